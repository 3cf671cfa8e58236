"""Shared pytest options: ``--seed`` for every random test, ``--sim`` for the cocotb simulator."""

import os
import random
import zlib

import pytest


def pytest_addoption(parser):
    parser.addoption("--seed", default=None,
                     help="seed for random tests: an integer, or 'random' (default: a fixed per-test seed, "
                          "or $DYSHARP_SEED)")
    parser.addoption("--sim", default=None, help="cocotb simulator: icarus (default) or verilator")


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
