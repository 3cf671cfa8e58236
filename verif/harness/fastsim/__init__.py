"""Fast simulation path: a compiled Verilator harness for credit-link components (the switch).

Python builds the traffic (numpy arrays: per packet its arrival cycle, source port and pre-encoded flits,
:class:`Traffic`), the generated C++ main drives every ``rx`` port and drains every ``tx`` port like the
cocotb agents :class:`~verif.harness.credit.CreditSource`/:class:`~verif.harness.credit.CreditSink`, and
logs every delivered packet to a binary file (:class:`SimLog`) that :func:`check_delivery` checks against
the reference model's destinations after the run.
"""

from .build import FastSim, FastsimBuildError, FastsimRunError, build
from .files import SimLog, Traffic, read_log, read_traffic, write_log, write_traffic
from .scoreboard import DeliveryReport, ScoreboardError, check_delivery

__all__ = ["build", "FastSim", "FastsimBuildError", "FastsimRunError", "Traffic", "SimLog", "read_log",
           "write_log", "read_traffic", "write_traffic", "check_delivery", "DeliveryReport", "ScoreboardError"]
