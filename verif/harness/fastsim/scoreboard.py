"""After-the-run scoreboard of a fast-path (or cocotb) delivery log against the injected traffic.

Every delivered packet must be one that was sent, intact (same flit count and the same hash over every
word of every flit, so header, payload and ``last``/``poison`` bits all count), delivered once to each port
of its destination set (``Traffic.dests``, computed by the reference model) and to no other port. Packets
are reassembled per port by their ``last`` framing, so an output that interleaved two packets shows up as
corrupted ones: packet atomicity per output is checked by the same test. ``complete=True`` also requires
every packet to have reached all of its destinations (use it when the run drains).
"""

import dataclasses

import numpy as np

from hw.packet import HEADER_BITS

from verif.harness.scoreboard import ScoreboardError

from .files import SimLog, Traffic

__all__ = ["check_delivery", "DeliveryReport", "ScoreboardError"]

HEAD_WORDS = HEADER_BITS // 32


@dataclasses.dataclass
class DeliveryReport:
    packets: int           # injected
    records: int           # packet deliveries logged (one per destination port)
    complete: int          # packets delivered to all of their destinations
    packet_index: np.ndarray   # per record: index of the injected packet it is


def _head_keys(words: np.ndarray) -> list[bytes]:
    return [r.tobytes() for r in np.ascontiguousarray(words[:, :HEAD_WORDS], "<u4")]


def check_delivery(traffic: Traffic, log: SimLog, *, complete: bool = False, show: int = 5) -> DeliveryReport:
    if traffic.dests is None:
        raise ValueError("check_delivery needs Traffic.dests (the reference model's destination masks)")
    if log.ports != traffic.ports or len(log.sent) != traffic.packets:
        raise ScoreboardError(f"log of {log.ports} ports / {len(log.sent)} packets does not belong to traffic of "
                              f"{traffic.ports} ports / {traffic.packets} packets")
    rec = log.records
    errors = []

    def fail(what, rows):
        rows = np.flatnonzero(rows)
        if len(rows):
            shown = ", ".join(f"port {rec['port'][r]} cycles {rec['first'][r]}..{rec['last'][r]}" for r in rows[:show])
            errors.append(f"{len(rows)} deliveries {what} (first: {shown})")

    index = {k: i for i, k in enumerate(_head_keys(traffic.flits[traffic.first]))}
    if len(index) != traffic.packets:
        raise ValueError("traffic has packets with identical headers: the scoreboard keys packets by header")
    idx = np.array([index.get(k, -1) for k in _head_keys(rec["head"])], dtype=np.int64)
    known = idx >= 0
    fail("of packets that were never sent (unknown header)", ~known)
    k = np.where(known, idx, 0)
    port_bit = np.left_shift(np.uint64(1), rec["port"].astype(np.uint64))
    fail("to a port outside the destination set", known & ((traffic.dests[k] & port_bit) == 0))
    fail("with the wrong flit count", known & (rec["nflits"] != traffic.nflits[k]))
    fail("poisoned", rec["poison"] != 0)
    fail("with corrupted flits (hash differs)", known & (rec["nflits"] == traffic.nflits[k])
         & (rec["hash"] != traffic.hashes()[k]))
    pairs = idx[known] * traffic.ports + rec["port"][known]
    uniq, counts = np.unique(pairs, return_counts=True)
    dup = np.isin(pairs, uniq[counts > 1])
    fail("duplicated (same packet twice on one port)", np.isin(np.arange(len(rec)), np.flatnonzero(known)[dup]))
    fail("of packets that never left their source", known & (log.sent[k] < 0))
    fail("before their packet left its source", known & (rec["first"] <= log.sent[k]))
    got = np.zeros(traffic.packets, dtype=np.uint64)
    np.bitwise_or.at(got, idx[known], port_bit[known])
    done = got == traffic.dests
    if complete and not done.all():
        missing = np.flatnonzero(~done)
        errors.append(f"{len(missing)} of {traffic.packets} packets did not reach every destination (first: "
                      + ", ".join(f"#{m} src {traffic.src[m]} dests {int(traffic.dests[m]):#x} got "
                                  f"{int(got[m]):#x}" for m in missing[:show]) + ")")
    if errors:
        raise ScoreboardError("delivery log fails the scoreboard: " + "; ".join(errors))
    return DeliveryReport(traffic.packets, len(rec), int(done.sum()), idx)
