"""``dysharp bench soak`` (``verif/bench/soak.py``): one long run of mixed dispatch and combine traffic on the
8-port DySHARP switch with random stalls on every link, random memory latency and TLB misses throughout.

* ``slow``: the full soak, 10^6 cycles, must pass with 0 lost, 0 duplicated, 0 mismatched and no deadlock.
* default suite: a 20,000-cycle soak passes, and its figures show what the soak claims to exercise (misses
  in every tenth of the run, GPU responses out of order, stall fractions near the probabilities asked);
  the same log, tampered with (a delivery removed, one duplicated, a result bit flipped, a response left
  waiting), fails with the matching count; a run cut off before its traffic drained is a deadlock; bad
  arguments get clear errors.
"""

import dataclasses
import json
import re

import numpy as np
import pytest

from hw.packet import Opcode
from verif.harness.runner import SIMULATORS

pytestmark = pytest.mark.skipif("verilator" not in SIMULATORS, reason="the fast path needs Verilator")

SHORT = 20_000
# The default suite soaks the 4-port switch, the build the 4-port benches already
# make (an 8-port build costs about a minute of compile); the slow soak is the 8-port, 10^6-cycle run.
SMALL = dict(ports=4, fanouts=(1, 2, 4), contributors=(1, 2, 4))
SMALL_ARGS = ["--ports", "4", "--fanouts", "1,2,4", "--contributors", "1,2,4"]


@pytest.fixture(scope="module")
def short_run():
    from verif.bench import soak

    cfg = soak.SoakConfig(cycles=SHORT, **SMALL).validate()
    vt, log, _, _ = soak.simulate(cfg)
    return cfg, vt, log


def _ops(log):
    from verif.bench.soak import _field
    from hw import packet

    return _field(log.rxflits[log.rx["flit0"]], *packet._COMMON["opcode"]).astype(int)


def test_short_soak_passes_and_exercises_what_it_claims(short_run):
    from verif.bench import soak

    cfg, vt, log = short_run
    r = soak.evaluate(cfg, vt, log)
    assert r["ok"], (r["scoreboard_error"], r["unfinished"], r["errors"])
    assert r["errors"] == {}
    assert (r["lost"], r["duplicated"], r["mismatched"], r["deadlock"]) == (0, 0, 0, False)
    assert r["cycles"] == SHORT
    c = r["checked"]
    assert c["stores_complete"] == c["stores"] == r["traffic"]["stores"] > 0
    assert c["ld_reduce_results"] == r["traffic"]["ld_reduce"] > 0
    assert c["contributions"] == c["red_reads"] > c["ld_reduce_results"]
    # TLB misses throughout: in every tenth of the arrival period (the last tenths are the drain).
    tenths = r["tlb"]["misses_by_tenth"]
    assert all(m > 0 for m in tenths[:8]), tenths
    assert 0.5 < r["tlb"]["hit_rate"] < 1.0
    # Random memory latency reorders GPU responses; the stall fractions are the probabilities asked.
    resp = r["responses"]
    assert resp["sent_ahead_of_an_earlier_request"] > 0
    for kind, base in (("fill", cfg.fill_latency), ("read", cfg.read_latency)):
        lo, hi = resp[f"{kind}_latency_range"]
        assert base <= lo < base + 30 and base + cfg.jitter - 30 < hi <= base + cfg.jitter, (kind, lo, hi)
    assert abs(r["stalls"]["credit_return"] - cfg.stall) < 0.01
    assert abs(r["stalls"]["sender"] - cfg.send_stall) < 0.01
    assert r["longest_wait"]["ld_reduce_result"] >= cfg.read_latency
    assert r["engine"]["timeouts"] == 0 and r["tlb"]["read_timeouts"] == 0


def _tampered(log, **changes):
    return dataclasses.replace(log, **changes)


def _drop_rx(log, r):
    keep = np.ones(len(log.rx), bool)
    keep[r] = False
    return _tampered(log, rx=log.rx[keep])


def test_tampered_logs_fail_with_the_matching_count(short_run):
    from verif.bench import soak

    cfg, vt, log = short_run
    ops = _ops(log)
    write = int(np.flatnonzero((log.rx["vc"] == 0) & (ops == Opcode.WRITE.value))[10])
    result = int(np.flatnonzero((log.rx["vc"] == 1) & (ops == Opcode.RED_RESP.value))[3])

    lost = soak.evaluate(cfg, vt, _drop_rx(log, write))
    assert not lost["ok"] and lost["lost"] == 1 and lost["deadlock"]     # missing at the end
    assert "did not reach every destination" in lost["scoreboard_error"]

    dup = soak.evaluate(cfg, vt, _tampered(log, rx=np.concatenate([log.rx, log.rx[write:write + 1]])))
    assert not dup["ok"] and dup["duplicated"] == 1 and dup["lost"] == 0

    flits = log.rxflits.copy()
    flits[log.rx["flit0"][result] + 5, 0] ^= 1
    bad = soak.evaluate(cfg, vt, _tampered(log, rxflits=flits))
    assert not bad["ok"] and bad["mismatched"] == 1 and bad["lost"] == 0 and bad["duplicated"] == 0
    assert "RED_RESP data differs" in bad["scoreboard_error"]

    stuck = soak.evaluate(cfg, vt, _tampered(log, unsent=2))
    assert not stuck["ok"] and stuck["deadlock"] and "2 GPU responses still waiting" in stuck["unfinished"][0]

    from verif.bench.dysharp_switch import _status_index
    status = log.status.copy()
    status[-1, _status_index(cfg.ports)("total", "engine", "stale")] = 2320    # every contribution stale
    stale = soak.evaluate(cfg, vt, _tampered(log, status=status))
    assert not stale["ok"] and stale["errors"] == {"engine.stale": 2320} and stale["lost"] == 0


def test_a_run_cut_off_before_the_drain_is_a_deadlock():
    """No drain and a run too short to finish: packets are in flight at the end, the soak names them."""
    from verif.bench import soak

    cfg = soak.SoakConfig(cycles=2000, drain=0, load=1.5, **SMALL).validate()
    vt, log, _, _ = soak.simulate(cfg)
    r = soak.evaluate(cfg, vt, log)
    assert not r["ok"] and r["deadlock"] and r["lost"] > 0
    assert any("still active" in u or "never left" in u or "missing at the end" in u for u in r["unfinished"])


def test_cli_writes_the_report_and_exits_nonzero_on_failure(tmp_path, capsys, monkeypatch):
    from dysharp.cli import main
    from verif.bench import soak

    out = tmp_path / "soak.json"
    assert main(["bench", "soak", *SMALL_ARGS, "--cycles", "4000", "--drain", "2000", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["ok"] and r["cycles"] == 4000 and r["lost"] == r["duplicated"] == r["mismatched"] == 0
    text = capsys.readouterr().out
    assert "Soak (PASS)" in text and re.search(r"lost / duplicated / mismatched +\| 0 / 0 / 0 ", text)
    real = soak.evaluate
    monkeypatch.setattr(soak, "evaluate", lambda cfg, vt, log: real(cfg, vt, _tampered(log, unsent=1)))
    assert main(["bench", "soak", *SMALL_ARGS, "--cycles", "4000", "--drain", "2000", "--out", str(out)]) == 1
    assert "Soak (FAIL)" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--cycles", "10"], "--cycles must be >= 1000"),
    (["--ports", "3"], "--ports must be in 4..64"),
    (["--stall", "1.5"], "--stall is a probability in [0, 1)"),
    (["--send-stall", "-0.1"], "--send-stall is a probability in [0, 1)"),
    (["--jitter", "-1"], "--jitter, --read-latency and --fill-latency must be >= 0"),
    (["--fanouts", "1,9"], "--fanouts must be in 1..8"),
    (["--contributors", "x"], "--contributors expects comma-separated integers"),
    (["--cycles", "5000", "--drain", "5000"], "--drain must be in 0..4743"),
    (["--load", "0"], "--load must be in (0, 2]"),
])
def test_bad_arguments_get_clear_errors(argv, message, capsys):
    from dysharp.cli import main

    assert main(["bench", "soak", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_million_cycle_soak(tmp_path):
    """The long soak: >= 10^6 cycles in one run, 0 lost / duplicated / mismatched, no deadlock."""
    from verif.bench import soak

    r = soak.run_soak(soak.SoakConfig(cycles=1_000_000))
    (tmp_path / "soak.json").write_text(json.dumps(r, indent=1))
    assert r["ok"], (r["scoreboard_error"], r["unfinished"])
    assert r["cycles"] >= 1_000_000
    assert (r["lost"], r["duplicated"], r["mismatched"], r["deadlock"]) == (0, 0, 0, False)
    assert r["checked"]["packets"] > 100_000 and r["checked"]["contributions"] > 100_000
    assert all(m > 0 for m in r["tlb"]["misses_by_tenth"][:9])
