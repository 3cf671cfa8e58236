"""The fault-injection campaign on the integrated DySHARP switch: one registry entry per fault class.

Each :class:`FaultClass` states the design's guarantee (from the RTL's documented behaviour, checked by
measurement), names its cocotb scenario in :mod:`verif.faults.tb` and its settings, and says how the
figures are counted. :func:`run_class` runs one class on the 4-port switch (one simulator build, shared
with ``tests/hw/switch/test_dysharp_switch.py``), :func:`run_classes` several in one simulator run, and
:func:`judge` decides whether the guarantee held: no scenario error, 0 hangs (a drain that overran its
**cycle** budget), every check true, and lost data at most the class's stated bound.
"""

import dataclasses
import json
import os
from pathlib import Path

__all__ = ["FaultClass", "CLASSES", "PARAMS", "select", "run_class", "run_classes", "judge", "Result"]

# The 4-port switch the campaign runs on: the default suite's point (short timeouts, so that the
# timeout classes end quickly, far above what good traffic needs at this size).
# Short timeouts, below the worst-case bound (hw.switch.timeouts) but far above what this traffic needs:
# the silent-GPU classes time out in a few thousand cycles.
PARAMS = {"ports": 4, "tlb_timeout": 512, "red_timeout": 1024, "allow_short_timeouts": True}
TB = "verif.faults.tb"
DRAIN_CYCLES = 30000   # a drain that takes longer is a hang (good traffic here drains in < 3,000 cycles)


@dataclasses.dataclass(frozen=True)
class FaultClass:
    name: str
    guarantee: str             # what the design guarantees, stated from its documented behaviour
    scenario: str | None       # key of verif.faults.tb.SCENARIOS; None: not supported by the RTL
    counting: str              # how injected / detected / recovered / lost are counted
    settings: dict = dataclasses.field(default_factory=dict)
    fast: bool = True          # in the default test suite
    lost_bound: int = 0        # lost data allowed (0 unless the guarantee states a bound)
    lost_per: tuple | None = None   # (figure, k): lost data allowed is k x that figure instead


CLASSES: dict[str, FaultClass] = {c.name: c for c in [
    FaultClass(
        "poison_request",
        "A request flit marked poison (link CRC failure) on a GPU's uplink is never committed: its packet "
        "(a WRITE, or each copy of a dymultimem store, translated at its egress) reaches its receiver ending "
        "in poison and is discarded; all other traffic is delivered exactly.",
        "poison_request",
        "injected: corrupted WRITEs + store copies sent; detected: delivered poisoned (discarded) or answered with an "
        "ERROR; recovered: links hold all credits after the drain; lost: corrupted writes committed + good "
        "packets never delivered",
        {"rounds": 6}),
    FaultClass(
        "framing_request",
        "A request whose last flit disagrees with its length (one flit short or long) is ended with poison by "
        "the request network, discarded by its receiver and answered ERROR LENGTH_MISMATCH to its source "
        "(req_net counter +1 each); nothing of it is committed; other traffic is delivered exactly.",
        "framing_request",
        "injected: misframed WRITEs; detected: ERROR LENGTH_MISMATCH answers; recovered: as poison_request; "
        "lost: as poison_request",
        {"rounds": 6}),
    FaultClass(
        "malformed_ld_reduce",
        "An ld_reduce request (dymultimem or static multimem) whose header flit arrives marked poison (link CRC "
        "failure), or that a flit follows (misframed), is answered at once by the requester port's engine: one "
        "ERROR POISONED or ERROR LENGTH_MISMATCH, counted in its bad_requests; it takes no buffer entry and "
        "sends no RED_READ; all other traffic is delivered exactly.",
        "malformed_ld_reduce",
        "injected: malformed requests (poisoned and misframed in turn); detected = recovered: their ERROR "
        "answers (entries all free at the end); lost: good data never delivered",
        {"rounds": 6}),
    FaultClass(
        "poison_response",
        "A RED_READ_RESP contribution with a poisoned flit never enters a result: its reduction entry aborts "
        "and the requester gets ERROR LENGTH_MISMATCH; every other reduction is bit-exact.",
        "poison_response",
        "injected: corrupted contributions; detected = recovered: their reductions answered ERROR (entry "
        "freed); lost: results that used a corrupted contribution + good data never delivered",
        {"rounds": 6, "gpu": 1}, fast=False),
    FaultClass(
        "framing_response",
        "A misframed RED_READ_RESP (one flit short or long) is ended with poison by the response network and "
        "the responder is answered ERROR LENGTH_MISMATCH; the requester gets ERROR LENGTH_MISMATCH (also when "
        "the cut leaves only the header); no corrupted contribution enters a result.",
        "framing_response",
        "as poison_response; also checks one ERROR per misframed packet back to the responder",
        {"rounds": 6, "gpu": 1}, fast=False),
    FaultClass(
        "credit_drop_up",
        "A credit return lost on a GPU's uplink (switch to GPU sender) is not detected by the link protocol: "
        "no data is lost, and each drop permanently removes exactly one credit of that VC (the receive FIFO "
        "keeps a slot the sender never uses) until reset. Throughput is unchanged while 2 credits remain (the "
        "credit loop is 2 cycles; measured on GPU 0's request VC: 1.0 flits/cycle at 8, 5 and 2 credits, 0.50 "
        "at 1); after as many drops as credits the VC stalls, undetected.",
        "credit_drop_up",
        "injected: credits removed from the returns (3 per VC per port, then GPU 0's request VC down to 1); "
        "detected: 0 by design; recovered: 0 "
        "(no credit resync); lost: good packets never delivered; check: sender's credits = credits - drops",
        {"rounds": 12, "per_port": 3}, fast=False),
    FaultClass(
        "credit_drop_down",
        "A credit return lost on a GPU's downlink (GPU to the switch's sender): as credit_drop_up, measured on "
        "the RTL: with the GPU's buffer stalled the switch sends exactly gpu_credits - drops flits, never "
        "one without a credit.",
        "credit_drop_down",
        "as credit_drop_up; the switch's remaining credits measured by stalling GPU 0 and counting the flits "
        "it sends",
        {"rounds": 12, "per_port": 3}, fast=False),
    FaultClass(
        "credit_dup_up",
        "A credit return duplicated on a GPU's uplink gives the GPU's sender one credit more than the switch's "
        "receive FIFO has; it stays latent until the sender uses it against a full FIFO: VcReceiver drops "
        "that flit, counts LINK_OVERFLOWS (one per duplicate at most) and poisons the VC's flits up to the "
        "next last, so the broken packets are discarded (at most 2 per overflow) and nothing corrupted is "
        "committed.",
        "credit_dup_up",
        "injected: duplicated credit returns; detected: LINK_OVERFLOWS counted; recovered: 0 (no resync); "
        "lost: flood packets not delivered intact (bound: 2 per overflow); checks: the sender holds exactly "
        "credits + duplicates, nothing corrupted committed",
        {"rounds": 12, "per_port": 3}, lost_per=("detected", 2)),
    FaultClass(
        "credit_dup_down",
        "A credit return duplicated on a GPU's downlink lets the switch's sender overrun the GPU's receive "
        "buffer by one flit per duplicate once that buffer is full; the GPU's receive path discards each "
        "packet that lost a flit. Lost data is bounded: at most one packet per duplicated credit.",
        "credit_dup_down",
        "injected: duplicated credit returns; detected: flits that arrived at a full GPU buffer; recovered: 0; "
        "lost: packets the GPU discarded (bound: injected)",
        {"rounds": 12, "per_port": 3}, fast=False, lost_per=("injected", 1)),
    FaultClass(
        "silent_combine",
        "A GPU that stops answering RED_READs mid-combine: every ld_reduce that needs it is answered TIMEOUT "
        "(red_timeout after its entry was allocated, plus the scan), its buffer entry is freed, every other "
        "reduction completes bit-exact and all other traffic is delivered; nothing hangs.",
        "silent_combine",
        "injected: reductions whose read the silent GPU ignored; detected: answered TIMEOUT; recovered: "
        "entries freed (in_use 0 at the end); lost: good data never delivered",
        {"rounds": 6, "gpu": 1, "after": 6}),
    FaultClass(
        "fill_never",
        "A TLB_FILL that never returns: the AL-TLB abandons the read after tlb_timeout cycles (READ_TIMEOUTS), "
        "answers every request waiting on it TIMEOUT, caches nothing, and the switch keeps serving all other "
        "traffic; nothing hangs.",
        "fill_never",
        "injected: fills the GPU ignored; detected = recovered: READ_TIMEOUTS (each MSHR freed); lost: good "
        "data never delivered",
        {"rounds": 3, "gpu": 1}, fast=False),
    FaultClass(
        "fill_garbage",
        "A TLB_FILL answered with garbage the switch can recognise -- poisoned, misframed (a stray payload "
        "flit), or stale (the right answer after the read timed out) -- is dropped and counted (BAD_FILLS, "
        "STALE_RESPONSES), never cached; the read times out as in fill_never. (A well-formed answer with a "
        "wrong address, or one that carries another live read's tag, cannot be told from a good one.)",
        "fill_garbage",
        "injected: garbage answers; detected: BAD_FILLS + BAD_RESPONSES + STALE_RESPONSES; recovered: "
        "READ_TIMEOUTS; lost: good data never delivered",
        {"rounds": 3, "gpu": 1}, fast=False),
    FaultClass(
        "hostile",
        "A hostile GPU spraying requests into groups it does not belong to -- dymultimem stores and reductions "
        "into a foreign tenant's dynamic group and a group configured nowhere, static multimem.st and "
        "multimem.ld_reduce into a static group of the other GPUs: 0 writes into foreign groups' memory, every "
        "request answered ISOLATION (one ERROR per destination of a dynamic store, by its egress AL-TLB; one "
        "per static store, by the request network; one per reduction, by the engine) and counted there, "
        "other tenants' traffic delivered exactly (their writes into their own groups included).",
        "hostile",
        "injected: hostile requests (dynamic stores counted per destination); detected = recovered: "
        "ISOLATION answers; lost: good data never delivered; checks: the AL-TLB, req_net and engine counters",
        {"rounds": 8, "spray": 3, "spray_static": 2}),
    FaultClass(
        "port_reset",
        "Not supported: the switch has one synchronous reset for all ports (Amaranth's sync domain); no "
        "per-port reset exists to inject.",
        None, "-"),
]}


def select(names: str | None) -> list[FaultClass]:
    """Classes named in a comma-separated list (all when None); an unknown name is a ValueError that
    lists the valid ones."""
    if names is None:
        return list(CLASSES.values())
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in chosen if n not in CLASSES]
    if bad or not chosen:
        raise ValueError(f"unknown fault class {', '.join(bad) or repr(names)}; valid: {', '.join(CLASSES)}")
    return [CLASSES[n] for n in dict.fromkeys(chosen)]


@dataclasses.dataclass
class Result:
    cls: FaultClass
    figures: dict | None       # the scenario's JSON (None: not supported)
    ok: bool | None            # None: not supported
    problems: list

    def row(self) -> dict:
        f = self.figures or {}
        status = "not supported" if self.ok is None else ("PASS" if self.ok else "FAIL")
        return {"class": self.cls.name, "guarantee": self.cls.guarantee,
                **{k: f.get(k, "-") for k in ("injected", "detected", "recovered", "lost", "hangs")},
                "result": status, "problems": self.problems, "cycles": f.get("cycles"),
                "checks": f.get("checks", {}), "notes": f.get("notes", []), "counting": self.cls.counting}


def judge(cls: FaultClass, figures: dict) -> list[str]:
    """What broke the guarantee (empty: it held)."""
    problems = []
    if figures.get("error"):
        problems.append(f"scenario error: {figures['error']}")
    if figures.get("hangs"):
        problems.append(f"{figures['hangs']} hang(s)")
    bound = cls.lost_bound if cls.lost_per is None else cls.lost_per[1] * figures.get(cls.lost_per[0], 0)
    if figures.get("lost", 0) > bound:
        problems.append(f"lost data {figures['lost']} > bound {bound}")
    if not figures.get("injected"):
        problems.append("nothing was injected: the run proved nothing")
    problems += [f"check failed: {k}" for k, v in figures.get("checks", {}).items() if not v]
    return problems


def run_class(cls: FaultClass, *, seed: int = 1, out: str | os.PathLike = "build/faults", sim: str | None = None,
              sabotage: str | None = None, build_root: str | os.PathLike = "build", settings: dict | None = None) -> Result:
    """Run one class's scenario and judge it. ``sabotage`` (testing the campaign): ``commit_poison`` makes
    the GPU models commit poisoned packets, so a class that injects corrupted writes must fail."""
    if cls.scenario is None:
        return Result(cls, None, None, [])
    from verif.harness.runner import run_cocotb
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{cls.name}-s{seed}.json"
    if path.exists():
        path.unlink()
    # The cycle budget of every drain: past it the run is a hang (simulated cycles, never wall time).
    env = {"timeout": DRAIN_CYCLES, **cls.settings, **(settings or {}), "fault": cls.scenario, "out": str(path)}
    if sabotage:
        env["sabotage_fault"] = sabotage
    r = run_cocotb("dysharp_switch", PARAMS, test_module=TB, testcase="test_fault", seed=seed, sim=sim,
                   env=env, check=False, quiet=True, build_root=build_root)
    if not path.exists():
        why = ""
        if r.log_file and Path(r.log_file).exists():
            errs = [ln.strip() for ln in Path(r.log_file).read_text(errors="replace").splitlines()
                    if "Error" in ln and not ln.lstrip().startswith("warning")]
            why = f": {errs[-1]}" if errs else ""
        figures = {"error": f"the scenario wrote no figures{why}; log: {r.log_file}"}
    else:
        figures = json.loads(path.read_text())
    problems = judge(cls, figures)
    return Result(cls, figures, not problems, problems)


def run_classes(classes: list[FaultClass], *, seed: int = 1, out: str | os.PathLike = "build/faults",
                sim: str | None = None, build_root: str | os.PathLike = "build") -> list[Result]:
    """Run several classes' scenarios in one simulator run and judge each: each is a cocotb test of its own,
    from reset, with the seed a run of its own takes (:func:`~verif.harness.runner.run_scenarios`), so
    its figures are those of :func:`run_class`; the run costs the switch's load and cocotb's start once."""
    from verif.harness.runner import run_scenarios
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs = [c for c in classes if c.scenario is not None]
    paths = {c.name: out / f"{c.name}-s{seed}.json" for c in runs}
    for path in paths.values():
        path.unlink(missing_ok=True)
    failed = []
    if runs:
        failed = run_scenarios("dysharp_switch", PARAMS, test_module=TB, sim=sim, build_root=build_root, scenarios=[
            ("test_fault", {"timeout": DRAIN_CYCLES, **c.settings, "fault": c.scenario, "out": str(paths[c.name])},
             seed) for c in runs])
    results = []
    for c in classes:
        if c.scenario is None:
            results.append(Result(c, None, None, []))
            continue
        path = paths[c.name]
        if path.exists():
            figures = json.loads(path.read_text())
        else:
            why = [f for f in failed if f"'fault': '{c.scenario}'" in f]
            figures = {"error": f"the scenario wrote no figures: {why[0] if why else 'see the run log'}"}
        problems = judge(c, figures)
        results.append(Result(c, figures, not problems, problems))
    return results
