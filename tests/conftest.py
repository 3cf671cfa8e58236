"""Shared pytest options: ``--seed`` for every random test, ``--sim`` for the cocotb simulator; the default
suite's longest tests run first."""

import json
import os
import pickle
import random
import resource
import time
import zlib

import pytest

# Verilator builds without a profile-guided second compile (verif/harness/fastsim/build.py): the suite's
# builds serve short runs, so the second compile would cost more CPU than it saves.
os.environ.setdefault("DYSHARP_PGO", "0")


def pytest_addoption(parser):
    parser.addoption("--seed", default=None,
                     help="seed for random tests: an integer, or 'random' (default: a fixed per-test seed, "
                          "or $DYSHARP_SEED)")
    parser.addoption("--sim", default=None, help="cocotb simulator: icarus (default) or verilator")
    parser.addoption("--cpu-log", default=None, metavar="PATH",
                     help="append one JSON line per test to PATH: its wall seconds and the CPU seconds (user + "
                          "system) of the test process and of every process it ran and waited for")


def _seed_of(config, nodeid: str) -> int:
    opt = config.getoption("--seed") or os.environ.get("DYSHARP_SEED")
    if opt == "random":
        return random.SystemRandom().randrange(1 << 31)
    if opt is not None:
        return int(opt)
    return zlib.crc32(nodeid.encode()) & 0x7FFFFFFF


@pytest.fixture
def seed(request):
    """The test's seed; it is printed, and shown with the re-run command when the test fails."""
    value = _seed_of(request.config, request.node.nodeid)
    print(f"seed={value}")
    request.node.user_properties.append(("seed", value))
    return value


@pytest.fixture
def sim(request):
    sim = request.config.getoption("--sim")
    if sim:
        os.environ["SIM"] = sim
    from verif.harness.runner import default_sim
    return default_sim()


# Cocotb tests of one design point that share one simulator run. A test marked
#   @pytest.mark.shared_run(module, params, test_module, testcase, env=None, fails=False)
# and calling its ``shared_run`` fixture runs, with the first such test of the session, every selected test
# with the same module, parameters (defaults filled in) and testbench as scenarios of one simulator run
# (verif.harness.runner.scenario_failures: each its own cocotb test, from reset, with the seed a run of its
# own takes); each pytest test reports its own scenarios' result. module, params and env are values or
# functions of some of the test's parametrize arguments that return them; testcase is a testbench test, or
# a list of (testcase, env) pairs, all the test's own; with fails=True the test passes when every one of
# them fails (a sabotaged reference). A run costs its design's load and cocotb's start (0.3-2.5 CPU-s) once
# for all of them. The xdist workers share the results through a file in the session's temporary folder;
# the other tests of a group run last (pytest_collection_modifyitems), when the first has long written
# them. Only for tests that pass whatever ran before them: a scenario starts where the last one left the
# memories that reset does not clear, so a test that reads them from power-up (the plain switch's group
# table, the reduction tags' generations, the GPU NIC's Tile Status Table) keeps a run of its own.
_SHARED = pytest.StashKey[dict]()


def _shared_scenarios(item):
    """(group key, [(testcase, settings)], fails) of a test marked shared_run, else None."""
    mark = item.get_closest_marker("shared_run")
    if mark is None:
        return None
    module, params, test_module, testcase = mark.args

    def value(v):
        if not callable(v):
            return v
        import inspect
        return v(**{name: item.callspec.params[name] for name in inspect.signature(v).parameters})
    module, params = value(module), value(params)
    try:                                        # parameters given at their defaults name the same point
        from hw import registry
        params = registry.point(module, params).overrides
    except Exception:
        pass                                    # the run names what is wrong
    key = json.dumps([module, params, test_module], sort_keys=True, default=str)
    cases = [(testcase, value(mark.kwargs.get("env")) or {})] if isinstance(testcase, str) else list(testcase)
    return key, cases, mark.kwargs.get("fails", False)


def pytest_configure(config):
    config.addinivalue_line("markers", "shared_run(module, params, test_module, testcase, env=None, fails=False): "
                            "cocotb scenarios run with the session's other tests of that design point and "
                            "testbench in one simulator run (the shared_run fixture)")


def _session_dir(tmp_path_factory):
    """The session's temporary folder, which the xdist workers share (each has its own folder below it)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session")
def once(tmp_path_factory):
    """``once(key, fn)``: ``fn()``, computed by the first xdist worker that asks and read back (pickled) by the
    other, for module fixtures that take seconds and would otherwise be computed once per worker."""
    root = _session_dir(tmp_path_factory)

    def get(key: str, fn):
        from verif.harness.runner import file_lock
        path = root / f"once-{key}.pickle"
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():
                path.write_bytes(pickle.dumps(fn()))
        return pickle.loads(path.read_bytes())
    return get


@pytest.fixture
def shared_run(request, sim, tmp_path_factory):
    """Checks the test's scenarios of its group's shared simulator run (see _SHARED above): call it."""
    item = request.node
    key = _shared_scenarios(item)[0]
    members = request.config.stash[_SHARED][key]
    path = _session_dir(tmp_path_factory) / f"shared-run-{zlib.crc32((key + sim).encode()):08x}.json"

    def check():
        from verif.harness.runner import CocotbFailure, file_lock, scenario_failures
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():
                module, params, test_module = json.loads(key)
                seeds = [_seed_of(request.config, m.nodeid) for m in members]
                own = [_shared_scenarios(m)[1] for m in members]
                scenarios = [(tc, env, seed) for cases, seed in zip(own, seeds) for tc, env in cases]
                try:
                    failures = scenario_failures(module, params, test_module=test_module, scenarios=scenarios,
                                                 sim=sim)
                except Exception as e:          # a failed build or a crash: every scenario of the run failed
                    failures = [f"{type(e).__name__}: {e}"] * len(scenarios)
                results, i = {}, 0
                for m, cases, seed in zip(members, own, seeds):
                    results[m.nodeid] = [seed, failures[i:i + len(cases)]]
                    i += len(cases)
                path.write_text(json.dumps(results))
            seed, failures = json.loads(path.read_text())[item.nodeid]
        print(f"seed={seed} (run with {len(members) - 1} other test(s) of {key})")
        item.user_properties.append(("seed", seed))
        if _shared_scenarios(item)[2]:
            passed = [i for i, f in enumerate(failures) if f is None]
            assert not passed, f"scenario(s) {passed} of {_shared_scenarios(item)[1]} passed; they must fail"
        elif any(failures):
            raise CocotbFailure("\n".join(f for f in failures if f))
    return check


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        seeds = [v for k, v in item.user_properties if k == "seed"]
        if seeds:
            report.sections.append(("seed", f"re-run with: pytest '{item.nodeid}' --seed={seeds[0]}"))


# The longest tests of the default suite, longest first (seconds under the suite's two workers, from a fresh
# clone). They start first, each worker taking the next test when it is free (`./run test` passes
# --maxschedchunk 1), so the two workers end together instead of one running a long test alone at the end.
# The 4-port bench builds the integrated switch's fast path that the other benches and the short soak reuse:
# it goes first so that they find it built; likewise the compiled layer's nvls run builds the system top that
# the quiet-cycle drop check then reuses. A name that no longer matches is only not moved.
FIRST = [
    "tests/verif/bench/test_bench_dysharp_switch.py::test_bench_dispatch_n4_matches_plain_switch",  # 70
    "tests/verif/test_system_fast.py::test_fast_harness_nvls",                               # 85 (the G = 4 build)
    "tests/hw/switch/test_dysharp_switch.py::test_traffic_reductions_fills_and_deadlock",    # 33 CPU-s (19 scenarios)
    "tests/hw/test_emission.py::test_switch_dedup_equals_flat",                              # 40
    "tests/verif/formal/test_formal_reduction.py::test_stale_is_proved_by_k_induction",     # 35
    "tests/verif/formal/test_formal_tlb.py::test_cam_holds_and_every_property_is_covered",   # 25
    "tests/verif/formal/test_formal_switch.py::test_switch_packets_atomic_and_conserved",    # 22
    "tests/verif/faults/test_faults.py::test_fault_classes",                                 # 30-67 CPU-s (6 classes)
    "tests/dysharp/test_cli.py::test_every_registered_module_builds_at_its_points",          # 20
    "tests/verif/test_runner.py::test_verilator_variant_exposes",                            # 15 (the flat one: slow)
    "tests/hw/switch/test_al_tlb.py::test_moe_deepseek_v3",                                  # 15
    "tests/hw/switch/test_reduction_buffer.py::test_traffic",                                # 14 + 5 + 4 CPU-s (shared runs)
    "tests/hw/switch/test_reduction_engine.py::test_traffic_engine",                         # 12
    "tests/hw/switch/test_reduction_engine.py::test_traffic_deferred",                       # 9 CPU-s (shared run)
    "tests/sim_models/test_sensitivity.py::test_cli_writes_files",                           # 9
]


@pytest.hookimpl(trylast=True)         # after the deselection by -k and -m
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("[")[0], len(FIRST)))   # stable: the rest keep their order
    # The tests of a shared simulator run: the first keeps its place, the others go last (see _SHARED).
    groups, first, later = {}, [], []
    for item in items:
        scenario = _shared_scenarios(item)
        if scenario is not None:
            (later if scenario[0] in groups else first).append(item)
            groups.setdefault(scenario[0], []).append(item)
        else:
            first.append(item)
    items[:] = first + later
    config.stash[_SHARED] = groups


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``--cpu-log``, the test's CPU: setup, call and teardown, the simulators and compilers it ran
    included (a child counts once it has been waited for; the xdist workers each append their own lines)."""
    path = item.config.getoption("--cpu-log")
    if not path:
        yield
        return
    cpu, wall = _cpu_s(), time.monotonic()
    yield
    line = {"test": item.nodeid, "cpu_s": round(_cpu_s() - cpu, 2), "wall_s": round(time.monotonic() - wall, 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
