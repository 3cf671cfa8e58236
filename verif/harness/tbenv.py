"""What a cocotb testbench knows about its run: module parameters, seed and extra settings.

:func:`verif.harness.runner.run_cocotb` puts them in the simulator's environment; testbenches read them here so a
failing seed can be replayed exactly.
"""

import json
import os
import random

__all__ = ["params", "seed", "settings", "rng"]


def params() -> dict:
    return json.loads(os.environ.get("DYSHARP_PARAMS", "{}"))


def seed() -> int:
    return int(os.environ.get("DYSHARP_SEED", "1"))


def settings() -> dict:
    return json.loads(os.environ.get("DYSHARP_ENV", "{}"))


def rng(salt: str = "") -> random.Random:
    """A generator seeded from the run's seed (and ``salt``, so independent streams stay independent)."""
    return random.Random(f"{seed()}:{salt}")
