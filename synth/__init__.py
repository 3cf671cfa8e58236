"""The area and power flow: yosys synthesis against the Nangate45 liberty, CACTI 7 for memory arrays,
activity-based power, and scaling to the NVSwitch's node.

Modules
-------
* :mod:`synth.tools`: where the external tools are (liberty, CACTI, yosys, OpenSTA), how ``./run setup``
  fetches and builds them, and the errors that say how to fix a missing or corrupted one.
* :mod:`synth.liberty`: a small Liberty reader (cell area, leakage, pin capacitance, internal power
  tables, Boolean functions, wire-load models).
* :mod:`synth.cacti`: CACTI 7 configurations for SRAM/CAM arrays and the parser of its output.
* :mod:`synth.yosys_flow`: synthesis of one registered module at one parameter point, with every
  ``lib.memory`` array kept as a black box, and of each array alone as flip-flops (the upper bound).
* :mod:`synth.area`: the area study over each registered module's ``area_grid``, with a result cache.
* :mod:`synth.activity`, :mod:`synth.power`: switching activity from a cocotb VCD, propagated through
  the gate-level netlist, and the power figures; :mod:`synth.opensta` cross-checks them.
* :mod:`synth.scaling`: 45 nm -> 7 nm -> N5 factors and the NVSwitch normalisation.
* :mod:`synth.report`: ``synth_reports/`` (Markdown, CSV, PNG).
"""
