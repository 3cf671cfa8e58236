"""Fast simulation path: a compiled Verilator harness for credit-link components (the switch).

Python builds the traffic (numpy arrays: per packet its arrival cycle, source port and pre-encoded flits,
:class:`Traffic`), the generated C++ main drives every ``rx`` port and drains every ``tx`` port like the
cocotb agents :class:`~verif.harness.credit.CreditSource`/:class:`~verif.harness.credit.CreditSink`, and
logs every delivered packet to a binary file (:class:`SimLog`) that :func:`check_delivery` checks against
the reference model's destinations after the run.

The two-VC harness (:func:`build_vc`, template ``vc_main.cpp``) drives components whose links carry a
request and a response virtual channel (the DySHARP switch): per port it models the GPU side (per-VC
credits, random credit stalls, a responder for ``TLB_FILL``/``RED_READ``/``READ`` with a first-touch
memory layout) and logs every packet each GPU received; :func:`check_vc` checks the log after the run.
"""

from .build import (SIM_RST, FastSim, FastsimBuildError, FastsimRunError, VcFastSim, build, build_vc,
                    registered_inputs, registered_reset)
from .files import (GpuGroup, SimLog, Traffic, VcLog, VcTraffic, read_log, read_traffic, read_vc_log, write_log,
                    write_traffic, write_vc_traffic)
from .scoreboard import DeliveryReport, ScoreboardError, VcReport, check_delivery, check_vc

__all__ = ["build", "FastSim", "FastsimBuildError", "FastsimRunError", "Traffic", "SimLog", "read_log",
           "write_log", "read_traffic", "write_traffic", "check_delivery", "DeliveryReport", "ScoreboardError",
           "build_vc", "VcFastSim", "VcTraffic", "VcLog", "GpuGroup", "read_vc_log", "write_vc_traffic", "check_vc",
           "VcReport", "registered_inputs", "registered_reset", "SIM_RST"]
