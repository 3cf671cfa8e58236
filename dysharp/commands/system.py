"""``dysharp system``: a whole MoE layer on the system top (G GPU NICs and the DySHARP switch) per
scheme, checked against numpy, measured, plotted and compared with the estimator
(:mod:`verif.bench.system`)."""

from verif.bench import system as _system

add_arguments = _system.add_arguments
run = _system.run
