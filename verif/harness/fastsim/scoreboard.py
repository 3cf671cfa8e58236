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

__all__ = ["check_delivery", "DeliveryReport", "ScoreboardError", "check_vc", "VcReport", "gpu_layouts",
           "expected_reduction"]

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


# ---------------------------------------------------------------------------------------------------------
# Two-VC runs (vc_main.cpp): what every GPU received, against the GPUs' layouts and the reduction reference


@dataclasses.dataclass
class VcReport:
    """What :func:`check_vc` found (every list is per delivery or per request, in log order)."""
    stores: int                  # dymultimem.st packets injected
    store_deliveries: int        # WRITEs received (each checked)
    stores_complete: int         # stores that reached every destination
    store_latency: list          # (traffic index, port, header sent -> header received cycles)
    reductions: int              # ld_reduce requests injected
    results: int                 # RED_RESPs received (each checked)
    result_latency: list         # (traffic index, request sent -> result header received cycles)
    fills: list                  # TLB_FILLs received per port
    red_reads: list              # RED_READs received per port
    other: dict                  # other opcodes received: {(vc, opcode name): count}
    result_record: dict = dataclasses.field(default_factory=dict)   # traffic index -> rx record of its result
    # Failures by kind (all 0 in a report; a ScoreboardError from check_vc carries them as ``.counts``):
    # lost (store deliveries, answers and RED_READs missing: counted with ``complete`` only), duplicated
    # (a WRITE twice, an answer or RED_READ too many), mismatched (anything received wrong or unexpected).
    counts: dict = dataclasses.field(default_factory=lambda: {"lost": 0, "duplicated": 0, "mismatched": 0})


def gpu_layouts(traffic, ports: int):
    """Per port a :class:`~verif.models.memory_manager.MemoryManagerSpec` set up like the C++ GPU models
    (``traffic.groups``, then ``traffic.preloads`` in order)."""
    from verif.models.memory_manager import SET_GROUP, MemoryManagerSpec

    specs = [MemoryManagerSpec(groups=256, layouts=256, index_bits=18, slots=1 << 40) for _ in range(ports)]
    for s in specs:
        for g in traffic.groups:
            legal, _ = s.command(SET_GROUP, g.group, int(g.valid), int(g.alloc), g.layout, g.base, g.stride)
            if not legal:
                raise ValueError(f"group binding {g} is not legal for the memory manager model")
    if traffic.preloads is not None:
        for port, group, index, src in traffic.preloads.tolist():
            specs[port].serve(group, index, src)
    return specs


def _row(spec, group, index):
    g = spec.binding(group)
    if g is None:
        return None
    slot = spec.slot_of(g.layout, index)
    return None if slot is None else (g.base + slot * g.stride * 16) & ((1 << 48) - 1)


def expected_reduction(h, specs, flit_bytes: int = 16):
    """The ``length`` result flits of ``dymultimem.ld_reduce`` header ``h`` over the GPU models' data
    (:func:`~verif.harness.fastsim.files.vc_word`), reduced by :func:`verif.models.reduce_ref.reduce_sequence`
    (integer types: the order does not matter), as uint32 words of shape (length, 4) (a logged flit's
    data words); None if a destination has no row for it."""
    from hw.packet import EType
    from verif.models.reduce_ref import reduce_sequence

    from .files import vc_words

    if EType(h.etype) not in (EType.S32, EType.U32):
        raise ValueError("the two-VC scoreboard checks integer reductions (their result does not depend on the "
                         f"arrival order); got etype {EType(h.etype).name}")
    dests = [d for d in range(len(specs)) if (h.mask >> d) & 1]
    rows = [_row(specs[d], h.group, h.index) for d in dests]
    if any(r is None for r in rows):
        return None
    # Lanes reduce independently, so all ``length`` flits of a contribution go through the model at once
    # (one lane vector per destination): the same lanes as flit by flit, in one call instead of ``length``.
    # A 128-bit flit (vc_word) is four 32-bit lanes, its 32-bit words.
    contrib = [vc_words(d, [r + (h.offset + j) * flit_bytes for j in range(h.length)]).reshape(-1)
               for d, r in zip(dests, rows)]
    return np.asarray(reduce_sequence(contrib, h.etype, h.redop), np.uint32).reshape(h.length, 4)


def check_vc(traffic, log, *, complete: bool = False, show: int = 5) -> VcReport:
    """Check a two-VC run of the DySHARP switch (see ``docs``/the bench): every ``dymultimem.st``
    (``DYN_ST``) lands as a ``WRITE`` at each destination's row (the GPU models' first-touch layout,
    replayed here from the ``TLB_FILL``\\ s each GPU received, in order) + ``offset``, with its payload,
    source, tag and length intact, exactly once, and no ``WRITE`` lands anywhere else; every
    ``dymultimem.ld_reduce`` (``DYN_LD_REDUCE``) is answered by one ``RED_RESP`` to its requester (matched
    by tag, oldest first) whose payload is :func:`expected_reduction`; nothing else reaches a GPU except
    ``TLB_FILL`` and ``RED_READ`` requests (any ``ERROR`` fails). ``complete`` also requires every store
    delivered everywhere, every request answered, each GPU's ``RED_READ`` count equal to the requests that
    name it, and no response left unsent."""
    from hw.packet import Header, Opcode

    from .files import words_to_int

    n = traffic.ports
    errors = []
    heads = [Header.decode(words_to_int(traffic.flits[traffic.first[k], :HEAD_WORDS])) for k in range(traffic.packets)]
    specs = gpu_layouts(traffic, n)
    rx = log.rx
    rheads = [Header.decode(words_to_int(log.rxflits[rx["flit0"][r], :HEAD_WORDS])) for r in range(len(rx))]
    fills = [0] * n
    reads = [0] * n
    other = {}
    counts = {"lost": 0, "duplicated": 0, "mismatched": 0}
    for r, h in enumerate(rheads):
        port, vc = int(rx["port"][r]), int(rx["vc"][r])
        if rx["poison"][r]:
            counts["mismatched"] += 1
            errors.append(f"a poisoned packet reached GPU {port} (VC {vc}, cycle {rx['last'][r]}): {h}")
        if vc == 0 and h.opcode == Opcode.TLB_FILL.value:
            fills[port] += 1
            specs[port].serve(h.group, h.index, h.src)
        elif vc == 0 and h.opcode == Opcode.RED_READ.value:
            reads[port] += 1
        elif not ((vc == 0 and h.opcode == Opcode.WRITE.value) or (vc == 1 and h.opcode == Opcode.RED_RESP.value)):
            key = (vc, Opcode(h.opcode).name if h.opcode in {o.value for o in Opcode} else str(h.opcode))
            other[key] = other.get(key, 0) + 1
            counts["mismatched"] += 1
            if other[key] <= show:
                errors.append(f"GPU {port} received an unexpected {key[1]} on VC {vc} at cycle {rx['last'][r]}: {h}")

    # Stores: (destination, address) -> traffic index.
    expect = {}
    stores = [k for k, h in enumerate(heads) if h.opcode == Opcode.DYN_ST.value]
    for k in stores:
        h = heads[k]
        for d in range(n):
            if (h.mask >> d) & 1:
                row = _row(specs[d], h.group, h.index)
                if row is not None:
                    expect[(d, row + h.offset * 16)] = k
    seen = {}
    store_lat = []
    bad = []
    for r, h in enumerate(rheads):
        if rx["vc"][r] != 0 or h.opcode != Opcode.WRITE.value:
            continue
        port = int(rx["port"][r])
        k = expect.get((port, h.addr))
        what = None
        if k is None:
            what = f"at an address no store maps to ({h})"
        elif (port, h.addr) in seen:
            what = f"twice (store #{k}, {h})"
        else:
            t = heads[k]
            body = log.packet(r)
            if h.dst != port or h.src != t.src or h.tag != t.tag or h.length != t.length:
                what = f"with a wrong header ({h} for store #{k} {t})"
            elif rx["nflits"][r] != traffic.nflits[k] or not np.array_equal(body[1:], traffic.packet_words(k)[1:]):
                what = f"with a corrupted payload (store #{k})"
            elif log.sent[k] < 0 or rx["first"][r] <= log.sent[k]:
                what = f"before its store was sent (store #{k})"
        if what:
            counts["duplicated" if what.startswith("twice") else "mismatched"] += 1
            bad.append(f"GPU {port} cycle {rx['last'][r]}: a WRITE {what}")
            continue
        seen[(port, h.addr)] = r
        store_lat.append((k, port, int(rx["first"][r] - log.sent[k])))
    if bad:
        errors.append(f"{len(bad)} bad WRITEs (first: " + "; ".join(bad[:show]) + ")")
    got = {}
    for (d, _), k in ((key, expect[key]) for key in seen):
        got[k] = got.get(k, 0) | (1 << d)
    done = sum(1 for k in stores if got.get(k, 0) == heads[k].mask)
    if complete and done != len(stores):
        missing = [k for k in stores if got.get(k, 0) != heads[k].mask]
        counts["lost"] += sum(bin(heads[k].mask & ~got.get(k, 0)).count("1") for k in missing)
        errors.append(f"{len(missing)} of {len(stores)} stores did not reach every destination (first: " +
                      ", ".join(f"#{k} src {heads[k].src} mask {heads[k].mask:#x} got {got.get(k, 0):#x}"
                                for k in missing[:show]) + ")")

    # Reductions: per requester, outstanding requests by tag in send order.
    reds = [k for k, h in enumerate(heads) if h.opcode == Opcode.DYN_LD_REDUCE.value]
    waiting = {}
    for k in sorted((k for k in reds if log.sent[k] >= 0), key=lambda k: (log.sent[k], k)):
        waiting.setdefault((heads[k].src, heads[k].tag), []).append(k)
    results = 0
    result_lat = []
    result_record = {}
    bad = []
    for r, h in enumerate(rheads):
        if rx["vc"][r] != 1 or h.opcode != Opcode.RED_RESP.value:
            continue
        port = int(rx["port"][r])
        queue = waiting.get((port, h.tag), [])
        k = queue[0] if queue else None
        if k is None or log.sent[k] >= rx["first"][r]:
            counts["duplicated"] += 1
            bad.append(f"GPU {port} cycle {rx['last'][r]}: a RED_RESP for no outstanding request ({h})")
            continue
        queue.pop(0)
        t = heads[k]
        want = expected_reduction(t, specs)
        body = log.packet(r)[1:, :HEAD_WORDS]
        if h.dst != port or h.length != t.length or h.etype != t.etype or h.redop != t.redop or h.code:
            counts["mismatched"] += 1
            bad.append(f"GPU {port} cycle {rx['last'][r]}: RED_RESP header {h} for request #{k} {t}")
        elif want is None or not np.array_equal(body, want):
            counts["mismatched"] += 1
            bad.append(f"GPU {port} cycle {rx['last'][r]}: RED_RESP data differs from the reduction of request #{k}")
        else:
            results += 1
            result_lat.append((k, int(rx["first"][r] - log.sent[k])))
            result_record[k] = r
    if bad:
        errors.append(f"{len(bad)} bad RED_RESPs (first: " + "; ".join(bad[:show]) + ")")
    if complete:
        left = [k for q in waiting.values() for k in q]
        unsent = [k for k in reds if log.sent[k] < 0]
        counts["lost"] += len(left) + len(unsent)
        if left or unsent:
            errors.append(f"{len(left) + len(unsent)} of {len(reds)} ld_reduce requests were not answered")
        want_reads = [sum(1 for k in reds if (heads[k].mask >> d) & 1) for d in range(n)]
        counts["lost"] += sum(max(0, w - g) for g, w in zip(reads, want_reads))
        counts["duplicated"] += sum(max(0, g - w) for g, w in zip(reads, want_reads))
        if reads != want_reads:
            errors.append(f"RED_READs received per GPU {reads}, the requests name {want_reads}")
        if log.unsent:
            errors.append(f"{log.unsent} GPU responses were still waiting at the end of the run")
    if errors:
        err = ScoreboardError("two-VC log fails the scoreboard: " + "; ".join(errors))
        err.counts = counts
        raise err
    return VcReport(len(stores), len(seen), done, store_lat, len(reds), results, result_lat, fills, reads, other,
                    result_record, counts)
