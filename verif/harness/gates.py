"""Random on/off gates: valid gaps on drivers, ready/credit stalls on receivers."""

import random

__all__ = ["Gate"]


class Gate:
    """Each cycle ``open()`` says whether the agent may act.

    ``closed`` is the long-run fraction of closed cycles; ``burst`` the mean length of a closed run
    (1 = independent per cycle, larger = bursty stalls). ``closed=0`` is always open.
    """

    def __init__(self, rng: random.Random, closed: float = 0.0, burst: float = 1.0):
        if not 0.0 <= closed < 1.0:
            raise ValueError(f"closed fraction must be in [0, 1), got {closed}")
        if burst < 1.0:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.rng = rng
        self.closed = closed
        # Two-state Markov chain with the requested stationary closed fraction and mean closed run.
        self.p_reopen = 1.0 / burst
        self.p_close = closed * self.p_reopen / (1.0 - closed) if closed else 0.0
        self.state_closed = False

    def open(self) -> bool:
        if not self.closed:
            return True
        if self.state_closed:
            if self.rng.random() < self.p_reopen:
                self.state_closed = False
        elif self.rng.random() < self.p_close:
            self.state_closed = True
        return not self.state_closed
