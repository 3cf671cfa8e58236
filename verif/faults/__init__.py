"""Fault injection on the integrated DySHARP switch: the campaign's registry (:mod:`verif.faults.campaign`)
and its cocotb scenarios (:mod:`verif.faults.tb`). Run it with ``dysharp faults``."""
