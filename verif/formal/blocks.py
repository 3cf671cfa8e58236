"""The formal harnesses ``dysharp formal`` knows: name -> (what, harness factory, prove depth, cover depth).

Depths: ``depth`` is the k of k-induction and the bound of the base case (a bounded proof of that many
cycles from reset when induction does not close); ``cover`` bounds the search for each ``Cover``."""

from .al_tlb import AlTlbHarness
from .cam import CamHarness
from .credit_link import CreditLinkHarness
from .token_tracker import TokenTrackerHarness
from .reduction import LIVENESS_KEYS, SAFETY_KEYS, ReductionBufferHarness, ReductionEngineHarness
from .receive_path import ReceivePathHarness
from .switch import SwitchHarness
from .switch_alloc import SwitchAllocHarness
from .switch_egress import SwitchEgressHarness
from .switch_induct import SwitchInductHarness
from .switch_queues import SwitchQueuesHarness

BLOCKS = {
    "credit_link": ("credit link: CreditSender -> CreditReceiver (4 credits), any traffic and stalls",
                    lambda: CreditLinkHarness(4), 2, 12),
    "cam": ("CAM: 16 entries, 5-bit keys, 4-bit values, any lookups and writes", lambda: CamHarness(), 3, 6),
    "al_tlb": ("AL-TLB: 2 ports, 1 group, 16 entries, 2 MSHRs, timeout 16, free backing table and config", lambda: AlTlbHarness(check="cam"), 4, 8),  # noqa: E501
    "al_tlb_mshr": ("AL-TLB MSHRs: 2 ports, 1 group, 16 entries, 2 MSHRs, timeout 16, free backing table and config", lambda: AlTlbHarness(check="mshr"), 4, 22),  # noqa: E501
    "token_tracker": ("Tile Status Table: 2 experts x 2 tiles of 4 tokens, any arrivals, commands, stalls", lambda: TokenTrackerHarness(), 4, 16),  # noqa: E501
    "reduction_buffer": ("reduction buffer by k-induction (2 entries, 2 flits, timeout 4; int32-add datapath): any allocations, contributions, stalls",
                         lambda: ReductionBufferHarness(entries=2, only=SAFETY_KEYS, invariant=True), 12, 16),
    "reduction_buffer_timeout": ("reduction buffer's error cause and timeout by k-induction at a timeout of 8 (else as reduction_buffer; where an early timeout is outside the race window)",
                                 lambda: ReductionBufferHarness(entries=2, only=("cause", "timeout"), invariant=True, timeout=8), 16, 18),
    "reduction_buffer_live": ("reduction buffer's liveness by k-induction (3 entries, else as reduction_buffer): answered within 11 cycles of out.ready once its timeout must have fired",
                              lambda: ReductionBufferHarness(only=LIVENESS_KEYS, invariant=True), 12, 24),
    "reduction_engine": ("reduction engine by k-induction with resets free (4 ports, 2 entries, 1 flit, deferred translation, timeout 8): 2 requests per reset, any answers after their reads or before their fan-out, any answers with an earlier epoch's tags; with the buffer's invariant and the engine's, by generations relative to the last reset",
                         lambda: ReductionEngineHarness(answers_after_reads=False, invariant=True, epochs=True), 10, 20),
    "reduction_engine_once": ("reduction engine's at-most-once by k-induction (timeout 4, else as reduction_engine; with the buffer's invariant and the engine's)",
                              lambda: ReductionEngineHarness(answers_after_reads=False, only=("once",), invariant=True, timeout=4), 10, 16),
    "reduction_engine_two": ("reduction engine by k-induction with 2 requests (else as reduction_engine; reset once, at the start; with the buffer's invariant and the engine's)",
                             lambda: ReductionEngineHarness(answers_after_reads=False, invariant=True), 10, 20),
    "reduction_engine_one": ("reduction engine by k-induction with 1 request (else as reduction_engine; reset once, at the start; with the buffer's invariant and the engine's)",
                             lambda: ReductionEngineHarness(answers_after_reads=False, requests=1, invariant=True), 12, 20),
    "receive_path": ("GPU receive path (3 credits, max_payload 2): a poisoned or misframed packet commits nothing",
                     lambda: ReceivePathHarness(), 3, 8),
    "switch": ("NVSwitch datapath (4 ports, 2 active; 4 credits, max_payload 1, speedup 1): atomic, lossless",
               lambda: SwitchHarness(), 9, 13),
    "switch_speedup2": ("NVSwitch datapath at speedup 2 (2 crossbar lanes, else as switch)",
                        lambda: SwitchHarness(speedup=2), 9, 15),
    "switch_fifo": ("NVSwitch datapath in FIFO mode (one queue per input, else as switch)",
                    lambda: SwitchHarness(queueing="fifo"), 9, 13),
    "switch_errors": ("NVSwitch datapath with bad packets: bad length, misframed, poisoned (else as switch)",
                      lambda: SwitchHarness(errors=True), 9, 13),
    "switch_induct": ("NVSwitch datapath by k-induction with its composed invariant (2 ports, both sending; 3 credits: 4 cells per input; max_payload 1, speedup 1, VOQ): the four properties of switch, each asserted with the invariant the part proofs state, over the switch's own signals; the base case bounded from reset, the induction step (k = 1) in 22 parts",
                      lambda: SwitchInductHarness(stepped=True, fine=True), 6, 13),
    "switch_induct_small": ("NVSwitch datapath by k-induction at 2 credits (3 cells per input) and 1 downstream credit (else as switch_induct): the base case bounded from reset, the induction step (k = 1) in parts, each proven from the whole invariant in the state before and the earlier parts",
                            lambda: SwitchInductHarness(credits=2, out_credits=1, stepped=True), 6, 14),
    "switch_egress": ("NVSwitch output: output queue (4 flits, 2 lanes) -> credit sender (2 credits) -> receiver",
                      lambda: SwitchEgressHarness(lanes=2), 2, 10),
    "switch_queues": ("NVSwitch input's packet store by k-induction: cell pool (4 cells), packet queues (2 VOQs + mask queue, lap margin 28: near_lap at 2 arrivals), max_payload 1; any writes within credits and the lap contract, any dequeues and reads",
                      lambda: SwitchQueuesHarness(n_cells=4, n_uc=2, lap_margin=28), 2, 12),
    "switch_alloc": ("NVSwitch output allocation and multicast service by k-induction: 4 inputs' requests, grant starts and readers, the iSLIP allocator, output-busy, match and read-ahead registers (speedup 1, 5 cells, 4-flit output queues); any packet-store state within its contract",
                     lambda: SwitchAllocHarness(ports=4, n_cells=5), 2, 14),
    "switch_alloc_req_stage": ("as switch_alloc, with registered requests (RequestStage; no short transfers)",
                               lambda: SwitchAllocHarness(ports=4, n_cells=5, req_stage=True), 2, 14),
    "switch_alloc_fifo": ("as switch_alloc in FIFO mode (every packet in one queue per input, sent as a multicast; no counted transfers)",
                          lambda: SwitchAllocHarness(ports=4, n_cells=5, queueing="fifo"), 2, 14),
    "switch_alloc_speedup2": ("as switch_alloc at speedup 2: 3 ports, 2 lanes, packets of up to 6 flits (counted transfers of 1 to 3 read cycles, released ahead of their end), 7 cells, 16-flit output queues",
                              lambda: SwitchAllocHarness(ports=3, n_cells=7, speedup=2, max_payload=5, egress_depth=16), 2, 16),
}
