"""Shared pytest options: ``--seed`` for every random test, ``--sim`` for the cocotb simulator; the default
suite's longest tests run first."""

import json
import os
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


@pytest.fixture
def seed(request):
    """The test's seed; it is printed, and shown with the re-run command when the test fails."""
    opt = request.config.getoption("--seed") or os.environ.get("DYSHARP_SEED")
    if opt == "random":
        value = random.SystemRandom().randrange(1 << 31)
    elif opt is not None:
        value = int(opt)
    else:
        value = zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF
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
# The emission check builds the 4-port integrated switch's fast path that the bench and the short soak
# reuse: it goes first so that they find it built; likewise the compiled layer's nvls run builds the system top
# that the quiet-cycle drop check then reuses. A name that no longer matches is only not moved.
FIRST = [
    "tests/hw/test_emission.py::test_dysharp_switch_dedup_equals_flat",                      # 130 s
    "tests/verif/test_system_fast.py::test_fast_harness_nvls",                               # 85 (the G = 4 build)
    "tests/verif/test_system.py::test_layer_dysharp_basic",                                  # 42
    "tests/hw/switch/test_dysharp_switch.py::test_traffic_reductions_fills_and_deadlock",    # 32 CPU-s (6 scenarios)
    "tests/hw/test_emission.py::test_switch_dedup_equals_flat",                              # 40
    "tests/verif/formal/test_formal_reduction.py::test_stale_is_proved_by_k_induction",     # 35
    "tests/verif/formal/test_formal_tlb.py::test_cam_holds_and_every_property_is_covered",   # 25
    "tests/verif/formal/test_formal_switch.py::test_switch_packets_atomic_and_conserved",    # 22
    "tests/verif/faults/test_faults.py::test_fault_classes",                                 # 30-67 CPU-s (6 classes)
    "tests/hw/switch/test_dysharp_switch.py::test_bad_input",                                # 16 CPU-s (12 scenarios)
    "tests/dysharp/test_cli.py::test_every_registered_module_builds_at_its_points",          # 20
    "tests/verif/bench/test_bench_dysharp_switch.py::test_bench_dispatch_n4_matches_plain_switch",  # 20
    "tests/synth/test_synth.py::test_deep_cam_flip_flop_bound_is_extrapolated_from_two_slices",  # 20
    "tests/verif/test_runner.py::test_verilator_variant_exposes",                            # 2 x 15
    "tests/hw/switch/test_al_tlb.py::test_moe_deepseek_v3",                                  # 15
    "tests/hw/switch/test_reduction_engine.py::test_traffic_engine",                         # 12
    "tests/sim_models/test_sensitivity.py::test_cli_writes_files",                           # 9
    "tests/verif/formal/test_formal_switch.py::test_switch_with_an_output_queue_that_repeats_flits_fails",  # 8
]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("[")[0], len(FIRST)))   # stable: the rest keep their order


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
