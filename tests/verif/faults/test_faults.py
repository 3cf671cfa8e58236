"""The fault-injection campaign (verif/faults, `dysharp faults`): each class's guarantee holds on the 4-port
DySHARP switch; a broken guarantee is reported as a failure; bad arguments are named."""

import json

import pytest

from verif.faults.campaign import CLASSES, judge, run_class, run_classes, select

FAST = [c for c in CLASSES.values() if c.fast and c.scenario]
SLOW = [c for c in CLASSES.values() if not c.fast and c.scenario]


def _check(result):
    assert result.ok, f"{result.cls.name}: {result.problems}\n{json.dumps(result.figures, indent=1, default=str)[:4000]}"
    f = result.figures
    assert f["injected"] > 0 and f["hangs"] == 0, result.cls.name


def test_fault_classes(seed, sim, tmp_path):
    """The default suite's classes in one simulator run, each from reset with the seed a run of its own
    takes (:func:`run_classes`): a failure names its class."""
    results = run_classes(FAST, seed=seed, sim=sim, out=tmp_path)
    assert [r.cls.name for r in results] == [c.name for c in FAST]
    for r in results:
        _check(r)


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in SLOW])
def test_fault_class_slow(name, seed, sim, tmp_path):
    _check(run_class(CLASSES[name], seed=seed, sim=sim, out=tmp_path))


def test_broken_guarantee_is_a_failure(seed, sim, tmp_path):
    """GPUs that commit poisoned packets (a sabotaged receiver): the poison class must report lost data
    and fail."""
    r = run_class(CLASSES["poison_request"], seed=seed, sim=sim, out=tmp_path, sabotage="commit_poison")
    assert r.ok is False
    assert r.figures["lost"] == r.figures["injected"] > 0
    assert "check failed: no corrupted write committed" in r.problems


def test_judge():
    c = CLASSES["credit_dup_down"]
    good = {"injected": 4, "detected": 4, "recovered": 0, "lost": 4, "hangs": 0, "checks": {"x": True}}
    assert judge(c, good) == []
    assert judge(c, {**good, "lost": 5}) == ["lost data 5 > bound 4"]
    assert judge(CLASSES["hostile"], {**good, "lost": 1}) == ["lost data 1 > bound 0"]
    assert judge(c, {**good, "hangs": 1}) == ["1 hang(s)"]
    assert judge(c, {**good, "checks": {"x": False}}) == ["check failed: x"]
    assert judge(c, {**good, "injected": 0, "lost": 0}) == ["nothing was injected: the run proved nothing"]
    assert judge(c, {**good, "error": "boom"})[0].startswith("scenario error: boom")


def test_port_reset_not_supported(tmp_path):
    r = run_class(CLASSES["port_reset"], out=tmp_path)
    assert r.ok is None and r.row()["result"] == "not supported"


def test_unknown_class_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown fault class bogus; valid: poison_request, "):
        select("poison_request,bogus")
    with pytest.raises(ValueError, match="unknown fault class"):
        select(",")


def test_cli_bad_arguments(capsys):
    from dysharp.cli import main
    assert main(["faults", "--classes", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown fault class nope" in err and "hostile" in err
    assert main(["faults", "--sim", "vcs", "--classes", "hostile"]) == 2
    assert "unknown simulator 'vcs'" in capsys.readouterr().err
    assert main(["faults", "--seed", "-1"]) == 2


def test_cli_not_supported_row(tmp_path, capsys):
    from dysharp.cli import main
    assert main(["faults", "--classes", "port_reset", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "not supported" in out
    rows = json.loads((tmp_path / "faults.json").read_text())["classes"]
    assert [r["class"] for r in rows] == ["port_reset"]
