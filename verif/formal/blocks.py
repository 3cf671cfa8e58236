"""The formal harnesses ``dysharp formal`` knows: name -> (what, harness factory, prove depth, cover depth).

Depths: ``depth`` is the k of k-induction and the bound of the base case (a bounded proof of that many
cycles from reset when induction does not close); ``cover`` bounds the search for each ``Cover``."""

from .credit_link import CreditLinkHarness
from .reduction import LIVENESS_KEYS, SAFETY_KEYS, ReductionBufferHarness, ReductionEngineHarness

BLOCKS = {
    "credit_link": ("credit link: CreditSender -> CreditReceiver (4 credits), any traffic and stalls",
                    lambda: CreditLinkHarness(4), 8, 12),
    "reduction_buffer": ("reduction buffer (2 entries, 2 flits, timeout 4; int32-add datapath): any allocations, contributions, stalls",
                         lambda: ReductionBufferHarness(entries=2, only=SAFETY_KEYS), 16, 16),
    "reduction_buffer_live": ("reduction buffer, bounded liveness (3 entries, else as reduction_buffer; to a timeout and a full drain)",
                              lambda: ReductionBufferHarness(only=LIVENESS_KEYS), 24, 24),
    "reduction_engine": ("reduction engine (4 ports, 2 entries, 1 flit, deferred translation): 2 requests, any answers after their reads",
                         lambda: ReductionEngineHarness(), 20, 20),
}
