"""``dysharp bench switch``: the NVSwitch RTL under uniform random traffic.

For each port count and queueing variant, one simulation steps through the offered loads. Every source
injects Bernoulli arrivals (a new packet with probability load / mean packet flits each cycle, into an
unbounded source queue) with uniformly random unicast destinations. After a warm-up, a measurement window
counts delivered flits (accepted throughput per port) and the header-in to header-out latency of every
packet that entered during it. A lone packet per port pair gives the zero-load latency. Multicast runs
offer saturating traffic with a fixed fanout and report delivered flits per output port.

The cocotb test (``bench_switch``) writes raw figures to the JSON path it is given; :func:`run` drives the
simulations, prints the tables and writes ``build/bench/switch.json``.
"""

import json
import os
import statistics
import time
from pathlib import Path

import cocotb

from hw.packet import Header, Opcode, Packet

from verif.harness import tbenv

# ---------------------------------------------------------------------------------------------------------
# Simulation side


class _Stats:
    def __init__(self, n):
        self.n = n
        self.flits_out = 0
        self.window = False
        self.header_in = {}
        self.latency = []
        self.sent_pkts = 0


def _payload_lengths(spec: str) -> tuple[int, int]:
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


@cocotb.test()
async def bench_switch(dut):
    import random

    from verif.harness.credit import CreditSink, CreditSource
    from verif.harness.cycler import Cycler

    s = tbenv.settings()
    p = tbenv.params()
    n = p["ports"]
    rng = random.Random(tbenv.seed())
    lo, hi = _payload_lengths(s.get("payload", "1-16"))
    mean_flits = 1 + (lo + hi) / 2
    cycler = Cycler(dut)
    stats = _Stats(n)
    seq = [0]

    def on_sent(pid, cycle):
        if stats.window:
            stats.header_in[pid] = cycle

    def on_flit(port, f, cycle):
        if stats.window:
            stats.flits_out += 1

    def on_packet(port, flits, cycle):
        h = Header.decode(flits[0].data)
        key = (h.src, h.addr)
        t0 = stats.header_in.pop(key, None)
        if t0 is not None:
            stats.latency.append(cycle - (len(flits) - 1) - t0)

    sources = [CreditSource(dut, f"rx__{i}", rng, credits=p["credits"], on_sent=on_sent) for i in range(n)]
    sinks = []
    for j in range(n):
        sinks.append(CreditSink(dut, f"tx__{j}", rng, credits=p["out_credits"] or p["credits"],
                                on_flit=lambda f, c, j=j: on_flit(j, f, c),
                                on_packet=lambda fl, c, j=j: on_packet(j, fl, c)))
    cycler.add(*sources, *sinks)

    def make_packet(src, mask=None):
        seq[0] += 1
        length = rng.randint(lo, hi)
        addr = seq[0] << 4          # unique per packet: the latency key
        payload = [rng.getrandbits(128) for _ in range(length)]
        if mask is None:
            h = Header(opcode=Opcode.WRITE, src=src, tag=seq[0] & 0xFF, length=length,
                       dst=rng.randrange(n), addr=addr)
        else:
            h = Header(opcode=Opcode.DYN_ST, src=src, tag=seq[0] & 0xFF, length=length, mask=mask,
                       index=seq[0] & 0x3FFFF)
            addr = None
        return Packet(h, payload), (src, addr)

    await cycler.start()
    results = {"ports": n, "queueing": p["queueing"], "credits": p["credits"], "payload": f"{lo}-{hi}",
               "loads": [], "multicast": []}
    wall0 = time.perf_counter()
    cyc0 = cycler.cycle

    # Zero-load latency: one packet at a time between a few port pairs.
    zl = []
    for src, dst in ((0, n - 1), (n - 1, 0), (1, 1)):
        pkt, key = make_packet(src)
        pkt.header.dst = dst
        stats.window = True
        stats.latency = []
        sources[src].send(pkt, packet_id=key)
        await cycler.until(lambda: stats.latency, timeout=200, what="a zero-load packet")
        zl.append(stats.latency[0])
        stats.window = False
        await cycler.cycles(5)
    results["zero_load_latency"] = zl

    def warmup_for(load):
        # Near and past saturation the input buffers fill at (offered - accepted) flits per cycle; the
        # window must start once they are full, or it measures the filling transient (a few percent low).
        return s.get("warmup", 1000) + (s.get("saturation_warmup_per_cell", 24) * p["credits"]
                                        if load >= 0.9 else 0)

    async def phase(load, mask_fn=None):
        """Offer ``load`` flits/cycle/port for warm-up + window cycles, then drain."""
        warmup = warmup_for(load)
        # Near saturation the accepted rate fluctuates more: measure three times as long.
        window = s.get("cycles", 2000) * (3 if load >= 0.9 else 1)
        prob = min(1.0, load / mean_flits)
        stats.flits_out = 0
        stats.latency = []
        stats.header_in = {}
        offered = 0
        for t in range(warmup + window):
            stats.window = t >= warmup
            for i in range(n):
                if rng.random() < prob:
                    pkt, key = make_packet(i, mask_fn() if mask_fn else None)
                    sources[i].send(pkt, packet_id=key)
                    if stats.window:
                        offered += 1 + pkt.header.length
            await cycler.cycles(1)
        stats.window = False
        delivered = stats.flits_out
        lat = sorted(stats.latency)
        # Drain before the next load so queues start empty (bounded; saturated queues are cut).
        for q in sources:
            q.queue.clear()
        await cycler.cycles(300)
        return {
            "offered": load,
            "offered_measured": offered / (window * n),
            "throughput": delivered / (window * n),
            "latency_mean": statistics.fmean(lat) if lat else None,
            "latency_p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
            "packets_measured": len(lat),
        }

    for load in s.get("loads", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]):
        r = await phase(load)
        results["loads"].append(r)
        dut._log.info(f"N={n} {p['queueing']} load {load:.2f}: throughput {r['throughput']:.3f}, "
                      f"latency mean {r['latency_mean']} p99 {r['latency_p99']}")

    for fanout in s.get("fanouts", []):
        if fanout > n:
            continue

        def mask_fn(f=fanout):
            return sum(1 << d for d in rng.sample(range(n), f))
        r = await phase(1.0, mask_fn)
        r["fanout"] = fanout
        r["delivered_per_output"] = r.pop("throughput")
        # Each injected flit becomes `fanout` delivered flits: input-side rate = delivered / fanout.
        r["injected_per_input"] = r["delivered_per_output"] / fanout
        results["multicast"].append(r)
        dut._log.info(f"N={n} multicast fanout {fanout}: delivered {r['delivered_per_output']:.3f} "
                      f"flits/cycle/output")

    wall = time.perf_counter() - wall0
    results["sim_cycles"] = cycler.cycle - cyc0
    results["wall_s"] = wall
    results["cycles_per_s"] = results["sim_cycles"] / wall
    Path(s["out"]).write_text(json.dumps(results, indent=1))


# ---------------------------------------------------------------------------------------------------------
# Host side: `dysharp bench switch`

DEFAULT_LOADS = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0"


def add_arguments(p) -> None:
    p.add_argument("--ports", default="8,16", help="comma-separated port counts (default: 8,16)")
    p.add_argument("--loads", default=DEFAULT_LOADS, help=f"offered loads, flits/cycle/port "
                                                          f"(default: {DEFAULT_LOADS})")
    p.add_argument("--payload", default="1-16", help="payload flits per packet, N or LO-HI uniform "
                                                     "(default: 1-16, i.e. 16..256 B)")
    p.add_argument("--credits", type=int, default=None, help="input buffer cells per port "
                                                              "(default: the module's default)")
    p.add_argument("--iterations", type=int, default=None, help="iSLIP iterations per cycle "
                                                                 "(default: the module's default)")
    p.add_argument("--cycles", type=int, default=2000, help="measured cycles per load (default: 2000; three "
                                                            "times that at loads >= 0.9)")
    p.add_argument("--warmup", type=int, default=1000,
                   help="warm-up cycles per load (default: 1000); loads >= 0.9 add 24 cycles per input cell "
                        "so that the buffers are full before measuring")
    p.add_argument("--fanouts", default="2,4,8", help="multicast fanouts, run at the largest port count "
                                                      "(default: 2,4,8; empty to skip)")
    p.add_argument("--variants", default="voq,fifo", help="queueing variants (default: voq,fifo)")
    p.add_argument("--sim", default=None, help="simulator for the sweep: verilator (default when installed) "
                                               "or icarus")
    p.add_argument("--probe", default=None, help="other simulators to time on a short run of the same design "
                                                 "(default: icarus when the sweep uses verilator; 'none' to skip)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="build/bench/switch.json")


def _int_list(text, what):
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} expects comma-separated integers, got {text!r}") from None


def run(args) -> int:
    from verif.harness.runner import SIMULATORS, run_cocotb

    ports = _int_list(args.ports, "ports")
    fanouts = _int_list(args.fanouts, "fanouts")
    try:
        loads = [float(x) for x in args.loads.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--loads expects comma-separated numbers, got {args.loads!r}") from None
    if not loads or any(not 0 < x <= 1.0 for x in loads):
        raise ValueError("--loads must be in (0, 1] flits/cycle/port")
    _payload_lengths(args.payload)   # validates
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("voq", "fifo"):
            raise ValueError(f"unknown variant {v!r}; valid: voq, fifo")
    from verif.harness.runner import verilator_env
    sim = args.sim or ("verilator" if verilator_env() else "icarus")
    if sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {sim!r}; valid: {', '.join(SIMULATORS)}")
    probe = args.probe if args.probe is not None else ("icarus" if sim == "verilator" else "none")
    probes = [] if probe == "none" else [x for x in probe.split(",") if x]
    for x in probes:
        if x not in SIMULATORS:
            raise ValueError(f"unknown simulator {x!r} in --probe; valid: {', '.join(SIMULATORS)}, none")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": "dysharp bench switch " + " ".join(
        f"--{k}={v}" for k, v in (("ports", args.ports), ("loads", args.loads), ("payload", args.payload),
                                  ("cycles", args.cycles), ("warmup", args.warmup),
                                  ("fanouts", args.fanouts), ("variants", args.variants),
                                  ("sim", sim), ("seed", args.seed))),
              "runs": [], "probes": []}
    for n in ports:
        for variant in variants:
            module = "switch" if variant == "voq" else "switch_fifo"
            params = {"ports": n}
            if args.credits:
                params["credits"] = args.credits
            if args.iterations:
                params["iterations"] = args.iterations
            raw = out.parent / f"switch_{sim}_{variant}_{n}.json"
            env = {"loads": loads, "payload": args.payload, "cycles": args.cycles, "warmup": args.warmup,
                   "fanouts": fanouts if (variant == "voq" and n == max(ports)) else [],
                   "out": str(raw.resolve())}
            print(f"[bench switch] {sim}: N={n} {variant} ...", flush=True)
            t0 = time.time()
            run_cocotb(module, params, test_module="verif.bench.switch", testcase="bench_switch",
                       sim=sim, seed=args.seed, env=env, quiet=True)
            r = json.loads(raw.read_text())
            r["simulator"] = sim
            r["build_and_run_s"] = time.time() - t0
            report["runs"].append(r)
            _print_run(r)
    # Simulator speed: the same design and traffic for a short run on each probe simulator.
    for psim in probes:
        n = min(ports)
        params = {"ports": n}
        if args.credits:
            params["credits"] = args.credits
        raw = out.parent / f"switch_probe_{psim}_{n}.json"
        env = {"loads": [0.5], "payload": args.payload, "cycles": 1000, "warmup": 200, "fanouts": [],
               "out": str(raw.resolve())}
        print(f"[bench switch] speed probe on {psim}: N={n} voq, load 0.5 ...", flush=True)
        run_cocotb("switch", params, test_module="verif.bench.switch", testcase="bench_switch", sim=psim,
                   seed=args.seed, env=env, quiet=True)
        r = json.loads(raw.read_text())
        r["simulator"] = psim
        report["probes"].append({"simulator": psim, "ports": n, "cycles_per_s": r["cycles_per_s"],
                                 "throughput_at_0.5": r["loads"][0]["throughput"]})
        print(f"  {psim}: {r['cycles_per_s']:.0f} simulated cycles/s", flush=True)
    voq = [r for r in report["runs"] if r["queueing"] == "voq"]
    if voq:
        largest = max(voq, key=lambda r: r["ports"])
        report["calibration"] = {
            "switch_zero_load_latency_cycles": min(min(r["zero_load_latency"]) for r in voq),
            "switch_saturation_throughput": min(max(x["throughput"] for x in r["loads"]) for r in voq),
            "switch_ports_measured": largest["ports"],
        }
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    png = plot(report, out.with_suffix(".png"))
    if png:
        print(f"wrote {png}")
    return 0


def plot(report: dict, path: Path) -> Path | None:
    """Accepted throughput and mean latency against offered load, one line per port count and variant
    (None when matplotlib is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    for r in report["runs"]:
        label = f"N={r['ports']} {r['queueing'].upper()}"
        style = "-" if r["queueing"] == "voq" else "--"
        xs = [x["offered"] for x in r["loads"]]
        ax_t.plot(xs, [x["throughput"] for x in r["loads"]], style, marker="o", label=label)
        pts = [(x["offered"], x["latency_mean"]) for x in r["loads"] if x["latency_mean"] is not None]
        ax_l.plot([a for a, _ in pts], [b for _, b in pts], style, marker="o", label=label)
    ax_t.plot([0, 1], [0, 1], ":", color="grey", label="offered")
    ax_t.set(xlabel="offered load (flits/cycle/port)", ylabel="accepted (flits/cycle/port)",
             title="throughput, uniform unicast", xlim=(0, 1.02), ylim=(0, 1.02))
    ax_l.set(xlabel="offered load (flits/cycle/port)", ylabel="mean latency (cycles)", yscale="log",
             title="header-in to header-out latency")
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def _print_run(r):
    print(f"  N={r['ports']} {r['queueing']} ({r['simulator']}): zero-load latency "
          f"{sorted(set(r['zero_load_latency']))} cycles; {r['cycles_per_s']:.0f} simulated cycles/s")
    print("    load  throughput  lat.mean  lat.p99")
    for x in r["loads"]:
        print(f"    {x['offered']:.2f}  {x['throughput']:10.3f}  {_fmt(x['latency_mean']):>8}  "
              f"{_fmt(x['latency_p99'], 'd') if x['latency_p99'] is not None else '-':>7}")
    for x in r["multicast"]:
        print(f"    multicast fanout {x['fanout']}: {x['delivered_per_output']:.3f} flits/cycle/output "
              f"delivered ({x['injected_per_input']:.3f} injected per input)")


def markdown(report: dict) -> str:
    """The switch figures as a Markdown section (used by the README and the study report)."""
    lines = ["## NVSwitch datapath: throughput and latency", "",
             f"Command: `{report['command']}`", "",
             "![throughput and latency against offered load](switch.png)", ""]
    for pr in report.get("probes", []):
        lines.append(f"Simulator speed probe: {pr['simulator']} runs the N={pr['ports']} switch with its agents at "
                     f"{pr['cycles_per_s']:.0f} simulated cycles/s (same traffic at load 0.5: throughput "
                     f"{pr['throughput_at_0.5']:.3f}).")
        lines.append("")
    for r in report["runs"]:
        lines.append(f"**N={r['ports']}, {r['queueing'].upper()}** ({r['simulator']}, credits {r['credits']}, "
                     f"payload {r['payload']} flits): zero-load latency "
                     f"{'/'.join(str(x) for x in sorted(set(r['zero_load_latency'])))} cycles header-in to "
                     f"header-out; {r['cycles_per_s']:.0f} simulated cycles/s.")
        lines.append("")
        lines.append("| offered load | accepted flits/cycle/port | mean latency | p99 latency |")
        lines.append("|---|---|---|---|")
        for x in r["loads"]:
            lines.append(f"| {x['offered']:.2f} | {x['throughput']:.3f} | {_fmt(x['latency_mean'])} | "
                         f"{x['latency_p99'] if x['latency_p99'] is not None else '-'} |")
        if r["multicast"]:
            lines.append("")
            lines.append("| multicast fanout | delivered flits/cycle/output | injected flits/cycle/input |")
            lines.append("|---|---|---|")
            for x in r["multicast"]:
                lines.append(f"| {x['fanout']} | {x['delivered_per_output']:.3f} | {x['injected_per_input']:.3f} |")
        lines.append("")
    return "\n".join(lines)
