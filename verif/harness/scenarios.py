"""The cocotb test module of :func:`verif.harness.runner.run_scenarios`: several scenarios of one testbench on
one design in one simulator run.

Each scenario (a testcase of the testbench module, its settings, its seed) becomes a cocotb test of its own,
named ``s<i>``: cocotb ends its tasks and clocks when it ends, and the next scenario starts the clock and
resets the design again, as every testbench does. While a scenario runs, :mod:`verif.harness.tbenv` returns
its settings and seed, as in a run of its own.
"""

import importlib
import json
import os
import random

import cocotb

from . import tbenv

_RUN = tbenv.settings()


def _scenario(fn, env: dict, seed: int):
    async def run(dut):
        os.environ["DYSHARP_ENV"] = json.dumps(env)
        os.environ["DYSHARP_SEED"] = str(seed)
        random.seed(seed)
        await fn(dut)
    return run


def _register() -> None:
    tb = importlib.import_module(_RUN["test_module"])
    for i, (case, env, seed) in enumerate(_RUN["scenarios"]):
        gen = getattr(tb, case)
        if gen.options:
            raise ValueError(f"{_RUN['test_module']}.{case} is parametrized in cocotb; give its parameters "
                             f"as settings")
        test = cocotb.test(name=f"s{i}")(_scenario(gen.func, env, seed))
        test.timeout = gen.timeout
        globals()[f"s{i}"] = test      # cocotb collects the module's tests in this order


_register()
