"""``dysharp bench linerate``: packets and flits per cycle per port against packet length, at full load.

Every point is one run from reset on the fast path (a compiled Verilator main): the plain ``NVSwitch``
(credit links, :func:`verif.harness.fastsim.build`) or the integrated ``DySharpSwitch`` (two-VC links,
:func:`verif.harness.fastsim.build_vc`, requests on VC 0). Every source holds an unbounded queue of
``WRITE`` packets of one length (header plus ``length - 1`` payload flits; 1 = header only) from cycle 1,
so it sends whenever it holds a credit; sinks never stall. Traffic patterns:

* ``one``: input 0 to output 1, the other ports idle;
* ``perm``: input ``i`` to output ``i + 1 mod N`` (all-to-all permutation: every input and output busy);
* ``fanout``: input 0 to outputs 1..N-1 in turn (an engine's ``RED_READ`` fan-out: the input's rate);
* ``fanin``: inputs 1..N-1 to output 0 (an output's rate when several inputs compete for it).

After ``--warmup`` cycles a window of ``--cycles`` counts the packets whose header left each active output
(and entered each active input) and the flits each carried; the figures are the minimum over the active
ports. Every delivered packet is checked: at the right port, intact, once, and in order per
source-destination pair (the plain switch's by :func:`verif.harness.fastsim.check_delivery` and
:func:`_check_order`, the integrated switch's by :func:`_check_writes`).
"""

import time
from pathlib import Path

import numpy as np

from hw.packet import HEADER_BITS, Header, Opcode, flit_layout

from verif.bench.common import finish, table
from verif.harness.fastsim.files import Traffic, VcTraffic, flag_bits, flit_to_words, flit_words

PATTERNS = ("one", "perm", "fanout", "fanin")
SWITCHES = ("switch", "dysharp_switch")


def pattern_pairs(pattern: str, n: int) -> list[tuple[int, list[int]]]:
    """(source, the destinations it cycles through) of every active source of ``pattern``."""
    if pattern == "one":
        return [(0, [1])]
    if pattern == "perm":
        return [(i, [(i + 1) % n]) for i in range(n)]
    if pattern == "fanout":
        return [(0, list(range(1, n)))]
    if pattern == "fanin":
        return [(i, [0]) for i in range(1, n)]
    raise ValueError(f"unknown pattern {pattern!r}; valid: {', '.join(PATTERNS)}")


def packets(n: int, pattern: str, flits: int, run_cycles: int, rng):
    """``(Traffic-ready arrays)`` of the point: per active source enough ``WRITE``\\ s of ``flits`` flits to
    keep its link busy for the whole run, all queued at cycle 1; headers unique (address = packet number)."""
    if not 1 <= flits <= 17:
        raise ValueError(f"packet length must be 1..17 flits (header + up to 16 payload), got {flits}")
    per_src = run_cycles // flits + 4
    heads, srcs, dsts = [], [], []
    seq = 0
    for s, dests in pattern_pairs(pattern, n):
        for k in range(per_src):
            seq += 1
            d = dests[k % len(dests)]
            heads.append(Header(opcode=Opcode.WRITE, src=s, tag=seq & 0xFF, length=flits - 1, dst=d, addr=seq << 4))
            srcs.append(s)
            dsts.append(d)
    # Interleave the sources so the arrays stay sorted by arrival (all at cycle 1) and per source in order.
    order = np.argsort(np.array(srcs), kind="stable")
    words = flit_words(128)
    if flit_layout(128)["data"].offset != 0:
        raise ValueError("the traffic writer assumes flit data at bit 0 of the flit layout")
    hw = HEADER_BITS // 32
    P = len(heads)
    nflits = np.full(P, flits, np.int32)
    first = np.arange(P, dtype=np.int64) * flits
    fl = np.zeros((P * flits, words), np.uint32)
    fl[:, :hw] = rng.integers(0, 1 << 32, (len(fl), hw), dtype=np.uint64).astype(np.uint32)
    fl[first, :hw] = np.array([flit_to_words(heads[k].encode(), hw) for k in order], np.uint32).reshape(P, hw)
    lw, lb = flag_bits(128)["last"]
    fl[first + flits - 1, lw] |= np.uint32(1 << lb)
    src = np.array(srcs, np.int32)[order]
    dst = np.array(dsts, np.int64)[order]
    return words, np.ones(P, np.int64), src, dst, first, nflits, fl


def _window_rates(first_out, port_out, sent, src, nflits, active_in, active_out, w0, w1, flits_out):
    """Minimum over the active ports of packets and flits per cycle, out (headers leaving) and in."""
    win = w1 - w0
    out_p = [int(np.count_nonzero((port_out == j) & (first_out >= w0) & (first_out < w1))) / win
             for j in active_out]
    out_f = [float(flits_out[w0 - 1:w1 - 1, j].mean()) for j in active_out]
    in_p = [int(np.count_nonzero((src == i) & (sent >= w0) & (sent < w1))) / win for i in active_in]
    return {"out_packets": min(out_p), "out_flits": min(out_f), "in_packets": min(in_p),
            "in_flits": min(in_p) * int(nflits[0])}


def measure(switch: str, n: int, pattern: str, flits: int, *, cycles: int = 2000, warmup: int = 500,
            seed: int = 1, build_root: str = "build") -> dict:
    """One point: ``switch`` (``switch`` or ``dysharp_switch``) at ``n`` ports, ``pattern``, ``flits``-flit
    packets. Returns the window's rates (see the module docstring)."""
    from verif.harness.fastsim import build, build_vc, check_delivery

    rng = np.random.default_rng([seed, n, flits, PATTERNS.index(pattern)])
    run = warmup + cycles + 50
    words, arrival, src, dst, first, nflits, fl = packets(n, pattern, flits, run, rng)
    pairs = pattern_pairs(pattern, n)
    active_in = [s for s, _ in pairs]
    active_out = sorted({d for _, ds in pairs for d in ds})
    w0, w1 = warmup + 1, warmup + cycles + 1
    tag = f"linerate-{switch}-{n}-{pattern}-{flits}"
    workdir = Path(build_root) / "bench" / "fastsim"
    if switch == "switch":
        t = Traffic(n, words, arrival, src, first, nflits, fl, run,
                    dests=np.left_shift(np.uint64(1), dst.astype(np.uint64)))
        log = build("switch", {"ports": n}, build_root=build_root).run(t, workdir, tag=tag)
        rep = check_delivery(t, log)
        rec = log.records
        _check_order(rec["first"], rec["port"], src, rep.packet_index)
        rates = _window_rates(rec["first"], rec["port"], log.sent, src, nflits, active_in, active_out, w0, w1,
                              log.delivered)
    elif switch == "dysharp_switch":
        from verif.bench.dysharp_switch import GROUPS, switch_cfg
        from verif.harness.fastsim.files import RECV_VC0

        t = VcTraffic(n, words, arrival, src, np.zeros(len(src), np.int32), first, nflits, fl, run,
                      groups=GROUPS, cfg=switch_cfg(n))
        log = build_vc("dysharp_switch", {"ports": n}, build_root=build_root).run(t, workdir, tag=tag)
        _check_writes(t, dst, log)
        from verif.bench.dysharp_switch import check_switch_errors
        check_switch_errors(log, n, tag)
        rx = log.rx
        vc0 = rx["vc"] == 0
        rates = _window_rates(rx["first"][vc0], rx["port"][vc0], log.sent, src, nflits, active_in, active_out,
                              w0, w1, (log.activity & RECV_VC0) != 0)
    else:
        raise ValueError(f"unknown switch {switch!r}; valid: {', '.join(SWITCHES)}")
    return {"switch": switch, "ports": n, "pattern": pattern, "flits": flits, **rates,
            "sim_cycles": run}


def _check_order(first, port, src, index) -> None:
    """Per (source, output) pair, packets leave in the order their source sent them (``index`` is each
    delivery's traffic index: a source's packets are numbered in its sending order)."""
    order = np.argsort(first, kind="stable")
    last: dict[tuple[int, int], int] = {}
    for r in order:
        k = int(index[r])
        key = (int(src[k]), int(port[r]))
        if last.get(key, -1) >= k:
            raise AssertionError(f"packet {k} ({key[0]} -> {key[1]}) left after a younger one of its pair")
        last[key] = k


def _check_writes(t: VcTraffic, dst: np.ndarray, log) -> None:
    """Every ``WRITE`` a GPU received is the next one of its (source, destination) pair, flit for flit;
    nothing else arrives."""
    from hw.packet import Header

    from verif.harness.fastsim.files import words_to_int

    hw = HEADER_BITS // 32
    expect: dict[tuple[int, int], list[int]] = {}
    for k in range(t.packets):
        expect.setdefault((int(t.src[k]), int(dst[k])), []).append(k)
    nxt = {key: 0 for key in expect}
    errors = []
    for r in np.argsort(log.rx["first"], kind="stable"):
        rec = log.rx[r]
        got = log.rxflits[rec["flit0"]:rec["flit0"] + rec["nflits"]]
        h = Header.decode(words_to_int(got[0, :hw]))
        key = (int(h.src), int(rec["port"]))
        if rec["vc"] != 0 or h.opcode != Opcode.WRITE.value or key not in expect or nxt[key] >= len(expect[key]):
            errors.append(f"unexpected packet at GPU {rec['port']} VC {rec['vc']} cycle {rec['first']}: {h}")
            continue
        k = expect[key][nxt[key]]
        nxt[key] += 1
        want = t.packet_words(k)
        if rec["poison"] or len(got) != len(want) or not np.array_equal(got[:, :hw], want[:, :hw]):
            errors.append(f"packet {k} ({key[0]} -> {key[1]}) arrived out of order or corrupted at cycle "
                          f"{rec['first']}")
    if errors:
        raise AssertionError(f"{len(errors)} bad deliveries; first: " + "; ".join(errors[:5]))


def add_arguments(p) -> None:
    p.add_argument("--switches", default="switch,dysharp_switch",
                   help=f"comma-separated: {', '.join(SWITCHES)} (default: both)")
    p.add_argument("--ports", type=int, default=4, help="port count (default: 4)")
    p.add_argument("--lengths", default="1,2,3,4,5,8", help="packet lengths in flits, header included "
                                                             "(default: 1,2,3,4,5,8)")
    p.add_argument("--patterns", default=",".join(PATTERNS), help=f"comma-separated: {', '.join(PATTERNS)}")
    p.add_argument("--cycles", type=int, default=2000, help="measured cycles per point (default: 2000)")
    p.add_argument("--warmup", type=int, default=500, help="warm-up cycles per point (default: 500)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/linerate.json")


def _list(text, what, conv=str):
    try:
        out = [conv(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects a comma-separated list, got {text!r}") from None
    if not out:
        raise ValueError(f"--{what} is empty")
    return out


def run(args) -> int:
    switches = _list(args.switches, "switches")
    if bad := set(switches) - set(SWITCHES):
        raise ValueError(f"--switches: unknown {sorted(bad)}; valid: {', '.join(SWITCHES)}")
    patterns = _list(args.patterns, "patterns")
    if bad := set(patterns) - set(PATTERNS):
        raise ValueError(f"--patterns: unknown {sorted(bad)}; valid: {', '.join(PATTERNS)}")
    lengths = _list(args.lengths, "lengths", int)
    if min(lengths) < 1 or max(lengths) > 17:
        raise ValueError("--lengths must be in 1..17 flits")
    if not 4 <= args.ports <= 64:
        raise ValueError(f"--ports must be in 4..64, got {args.ports}")
    if args.cycles < 100 or args.warmup < 0:
        raise ValueError("--cycles must be >= 100 and --warmup >= 0")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    points = [measure(s, args.ports, p, f, cycles=args.cycles, warmup=args.warmup, seed=args.seed)
              for s in switches for p in patterns for f in lengths]
    report = {"command": f"dysharp bench linerate --switches={args.switches} --ports={args.ports} "
                         f"--lengths={args.lengths} --patterns={args.patterns} --cycles={args.cycles} "
                         f"--warmup={args.warmup} --seed={args.seed}",
              "points": points, "wall_s": time.time() - t0}
    return finish(out, report, markdown(report))


def markdown(report: dict) -> str:
    lines = ["## Line rate against packet length", "",
             f"Command: `{report['command']}` (full load, no stalls; minimum over the active ports; every "
             "delivery checked).", ""]
    rows = [[x["switch"], x["pattern"], x["flits"], f"{x['out_packets']:.3f}", f"{x['out_flits']:.3f}",
             f"{x['in_packets']:.3f}", f"{x['in_flits']:.3f}"] for x in report["points"]]
    lines.append(table(rows, ["switch", "pattern", "flits/packet", "packets/cycle/output", "flits/cycle/output",
                              "packets/cycle/input", "flits/cycle/input"]))
    return "\n".join(lines)

