"""Testbench stand-in for the path from the AL-TLB to the destination GPUs' backing tables.

:class:`BackingResponder` takes backing reads from the DUT's ``mem.req`` stream (with random ``ready``
stalls), answers each one ``latency`` cycles after it was accepted plus a random ``jitter`` (so answers
come back out of order), and presents the answers on ``mem.resp`` holding ``valid`` and the payload until
the DUT takes them (the stream rule). What an answer says comes from ``serve(request) -> (addr, code)``:
a fixed table in the random tests, or the destinations' memory-manager reference models in the MoE test.
It can also inject responses with tags that name no MSHR (``bogus``), which the DUT must ignore and count.
"""

import heapq

from hw.switch.backing_if import BackingRequest, BackingResponse

from .cycler import Agent
from .gates import Gate
from .structs import pack, unpack

__all__ = ["BackingResponder"]


class BackingResponder(Agent):
    def __init__(self, dut, rng, serve, *, latency: int = 20, jitter: int = 0, stall: float = 0.0,
                 bogus: float = 0.0, bogus_tag: int = 255, prefix: str = "mem"):
        self.req_valid = getattr(dut, f"{prefix}__req__valid")
        self.req_ready = getattr(dut, f"{prefix}__req__ready")
        self.req_payload = getattr(dut, f"{prefix}__req__payload")
        self.resp_valid = getattr(dut, f"{prefix}__resp__valid")
        self.resp_ready = getattr(dut, f"{prefix}__resp__ready")
        self.resp_payload = getattr(dut, f"{prefix}__resp__payload")
        self.rng = rng
        self.serve = serve
        self.latency = latency
        self.jitter = jitter
        self.gate = Gate(rng, stall, 2.0)
        self.bogus = bogus
        self.bogus_tag = bogus_tag
        self.pending = []          # heap of (due cycle, seq, payload bits)
        self.seq = 0
        self.current = None        # payload presented on mem.resp, not yet taken
        self.accepted = []         # (cycle, request dict) of every backing read
        self.answered = 0
        self.bogus_sent = 0
        self._ready_now = False
        self.req_ready.value = 0
        self.resp_valid.value = 0

    @property
    def idle(self) -> bool:
        return not self.pending and self.current is None

    def drive(self, cycle):
        self._ready_now = self.gate.open()
        self.req_ready.value = int(self._ready_now)
        if self.current is None and self.pending and self.pending[0][0] <= cycle:
            _, _, self.current = heapq.heappop(self.pending)
        elif self.current is None and self.bogus and self.rng.random() < self.bogus:
            self.current = pack(BackingResponse, addr=self.rng.getrandbits(48), code=0, tag=self.bogus_tag)
            self.bogus_sent += 1
        if self.current is not None:
            self.resp_payload.value = self.current
            self.resp_valid.value = 1
        else:
            self.resp_valid.value = 0

    def sample(self, cycle):
        if self._ready_now and self.req_valid.value == 1:
            r = unpack(BackingRequest, self.req_payload.value)
            self.accepted.append((cycle, r))
            addr, code = self.serve(r)
            bits = pack(BackingResponse, addr=addr, code=code, tag=r["tag"])
            due = cycle + self.latency + (self.rng.randint(0, self.jitter) if self.jitter else 0)
            heapq.heappush(self.pending, (due, self.seq, bits))
            self.seq += 1
        if self.current is not None and self.resp_ready.value == 1:
            self.current = None
            self.answered += 1
