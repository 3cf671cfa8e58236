"""The DySHARP switch's two timeouts sized from its parameters: the longest a request can legally wait when
every GPU answers, so that no request whose GPUs all answer ever times out.

The switch has two timeouts (:class:`~hw.switch.dysharp_switch.DySharpSwitch`): ``tlb_timeout``, after
which the AL-TLB abandons a ``TLB_FILL`` (:mod:`hw.switch.al_tlb`), and ``red_timeout``, after which the
reduction buffer answers an ``ld_reduce`` ``ERROR(TIMEOUT)`` (:mod:`hw.switch.reduction_buffer`). Each
timeout must be at least the longest wait of its request in a switch whose GPUs all keep the contract
below; :func:`timeout_bounds` computes both from the parameters (the argument, term by term, is in
``docs/timeouts.md``).

The GPU contract (what the bound assumes of every GPU on the switch):

* it answers a request (``TLB_FILL``, ``RED_READ``) within ``gpu_latency`` cycles of taking its last flit:
  the answer is then queued at the GPU's NIC, which sends its answers in the order they became ready;
* its links move a flit per cycle: it returns each receive credit as it takes the flit and sends whenever
  it holds a credit (the flit-count terms below are cycles at that rate);
* it sends nothing but answers on its response channel.

The benches' GPUs (``dysharp bench soak``, ``dysharp bench dysharp_switch``) answer within ``base +
jitter`` cycles (450 at the soak's defaults) and stall a link in a fraction of the cycles (0.1 in the soak):
:data:`MARGIN` x the bound covers links that move a flit in at least half the cycles.
"""

import dataclasses
import math

__all__ = ["TimeoutBound", "timeout_bounds", "derived_timeouts", "check_timeouts", "DEFAULT_GPU_LATENCY",
           "MARGIN", "RESP_SLOWDOWN", "MAX_DERIVED_TIMEOUT"]

#: Cycles within which a GPU answers a request it has taken (the AL-TLB's documented backing latency: the
#: NVLink hop and an HBM access, 640 ns at 1.5625 GHz).
DEFAULT_GPU_LATENCY = 1000
#: The default timeouts are MARGIN x the bound (rounded up to a multiple of 1024): the flit-count terms
#: assume links that move a flit per cycle; a margin of 2 covers links that move one in half the cycles.
MARGIN = 2
#: Cycles per flit at which the slowest response sink takes flits: the reduction buffer takes single-flit
#: contributions to one row one per 3 cycles (``docs/reduction.md``, the same-row wait).
RESP_SLOWDOWN = 3
#: The largest timeout the blocks take (the reduction buffer's and AL-TLB's ``timeout`` range).
MAX_DERIVED_TIMEOUT = 1 << 26
# Fixed pipeline latencies on the paths, rounded up: an AL-TLB miss (request to read, fill to answer, 7),
# the bridge and the link stages of a fill (8); the engine, two network traversals (6 each), the receive
# and egress stages and the result (24 + 12 + 28).
_TLB_PIPELINE = 16
_RED_PIPELINE = 64


@dataclasses.dataclass(frozen=True)
class TimeoutBound:
    """``tlb``/``red``: the least legal ``tlb_timeout``/``red_timeout`` (cycles); ``tlb_terms``/``red_terms``:
    the terms that add up to them, {name: cycles}, in path order."""
    tlb: int
    red: int
    tlb_terms: dict
    red_terms: dict

    @staticmethod
    def describe(terms: dict) -> str:
        return " + ".join(f"{k} {v:,}" for k, v in terms.items())


def timeout_bounds(*, ports: int, credits: int, resp_credits: int, link_credits: int, gpu_credits: int,
                   max_payload: int, red_entries: int, tlb_mshrs: int, egress_slots: int,
                   gpu_latency: int = DEFAULT_GPU_LATENCY) -> TimeoutBound:
    """The longest legal waits of a ``TLB_FILL`` and of an ``ld_reduce`` in a DySHARP switch with these
    parameters whose GPUs keep the contract of this module (``gpu_latency``: their answer bound).

    Counts (``D = max_payload + 1``, the longest packet in flits):

    * ``ahead`` = ``credits + 2 (ports + 1)``: packets that can leave the requester's port into the request
      network before a ``RED_READ``: the input's cells (a packet holds at least one), the earlier reads of
      its own request and the engine's 2-flit read FIFO (``ports + 1``), and one GPU packet per read from
      the round-robin merge in front of the network (``ports + 1``);
    * ``served`` = ``(ahead + 1) x 2 ports``: packets the destinations' outputs send before the read:
      between two packets of one input an output sends at most ``2 ports - 1`` others (iSLIP: its grant
      pointer passes every other requester once, and while the input declines, accepting another output's
      grant, at most once per other output, the output matches others in later iterations);
    * each packet served may miss in the AL-TLB of its port, which has ``min(egress_slots, tlb_mshrs)``
      misses in flight: ``ceil(served / that)`` fill round trips one after another;
    * ``backlog`` = ``ports x red_entries x D + tlb_mshrs + ports x resp_credits + link_credits +
      gpu_credits``: what can be ahead of a GPU's answer on its way back: the answers a GPU owes (every
      entry of every requester reads it at most once), its fill answers, the response network's input
      cells and the link buffers; the response sinks take a flit per :data:`RESP_SLOWDOWN` cycles at worst.

    ``tlb`` = the fill's wait for the link (the packet on it and the fills queued ahead: ``D + tlb_mshrs``)
    + ``gpu_latency`` + ``RESP_SLOWDOWN x backlog`` + pipeline. ``red`` = the read's way out (the merge, the
    served packets' flits, the fill round trips) + ``gpu_latency`` + the answers ahead of its own (the
    backlog plus an answer per packet served meanwhile, each at most ``D`` flits) + the other answers to
    its requester (``ports x red_entries x D``, at the slowest sink rate) + pipeline.
    """
    D = max_payload + 1
    miss_par = min(egress_slots, tlb_mshrs)
    ahead = credits + 2 * (ports + 1)
    served = (ahead + 1) * 2 * ports
    owed = ports * red_entries * D
    backlog = owed + tlb_mshrs + ports * resp_credits + link_credits + gpu_credits
    fill_out = D + tlb_mshrs
    tlb_terms = {
        "fill to the GPU": fill_out,
        "gpu_latency": gpu_latency,
        "answers ahead": RESP_SLOWDOWN * backlog,
        "pipeline": _TLB_PIPELINE,
    }
    rounds = math.ceil(served / miss_par)
    red_terms = {
        "engine and merge": (ports + 2) * (D + 1),
        "packets served ahead": served * D,
        "fill round trips": rounds * (fill_out + gpu_latency + _TLB_PIPELINE),
        "gpu_latency": gpu_latency,
        "answers ahead at the GPU": RESP_SLOWDOWN * (backlog + served * D),
        "answers ahead at the requester": RESP_SLOWDOWN * owed,
        "pipeline": _RED_PIPELINE,
    }
    return TimeoutBound(sum(tlb_terms.values()), sum(red_terms.values()), tlb_terms, red_terms)


def _round_up(x: int, q: int = 1024) -> int:
    return -(-x // q) * q


def derived_timeouts(bound: TimeoutBound) -> tuple[int, int]:
    """(``tlb_timeout``, ``red_timeout``) defaults: :data:`MARGIN` x the bound, up to a multiple of 1024."""
    return _round_up(MARGIN * bound.tlb), _round_up(MARGIN * bound.red)


def check_timeouts(bound: TimeoutBound, tlb_timeout: int, red_timeout: int) -> None:
    """``ValueError`` naming the bound and its terms if a timeout is below its bound."""
    for name, value, least, terms in (("tlb_timeout", tlb_timeout, bound.tlb, bound.tlb_terms),
                                      ("red_timeout", red_timeout, bound.red, bound.red_terms)):
        if value < least:
            raise ValueError(
                f"{name} {value:,} is below {least:,} cycles, the longest a request can legally wait at these "
                f"parameters when every GPU answers within gpu_latency ({TimeoutBound.describe(terms)}): "
                f"leave it unset (derived: {MARGIN} x the bound), raise it, or pass allow_short_timeouts=True "
                f"for a fault experiment that wants answered requests to time out")
