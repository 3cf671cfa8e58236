"""Testbench stand-in for the path from the AL-TLB to the destination GPUs' backing tables.

:class:`BackingResponder` takes backing reads from the DUT's ``mem.req`` stream (with random ``ready``
stalls), answers each one ``latency`` cycles after it was accepted plus a random ``jitter`` (so answers
come back out of order), and presents the answers on ``mem.resp`` holding ``valid`` and the payload until
the DUT takes them (the stream rule). What an answer says comes from ``serve(request) -> (addr, code)``:
a fixed table in the random tests, or the destinations' memory-manager reference models in the MoE test.
It can also inject responses with tags that name no MSHR (``bogus``), which the DUT must ignore and count.

Faults for the AL-TLB's timeout: a read for which ``withhold(request)`` is true, or a random fraction
``drop`` of the reads, is never answered unless the test calls :meth:`release`; a random fraction ``late``
is answered ``late_by`` cycles after its due time. :meth:`inject` presents an arbitrary response (a
duplicate, say), and ``blocked`` holds ``mem.req.ready`` low (a stuck link). Every withheld or late read is
recorded in ``withheld`` (its (group, index, dst) key in ``withheld_keys``).
"""

import heapq

from hw.switch.backing_if import BackingRequest, BackingResponse

from verif.harness.cycler import Agent
from verif.harness.gates import Gate
from verif.harness.structs import pack, unpack

__all__ = ["BackingResponder"]


class BackingResponder(Agent):
    def __init__(self, dut, rng, serve, *, latency: int = 20, jitter: int = 0, stall: float = 0.0,
                 bogus: float = 0.0, bogus_tag: int = 255, prefix: str = "mem", drop: float = 0.0,
                 late: float = 0.0, late_by: int = 0, withhold=None):
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
        self.drop, self.late, self.late_by = drop, late, late_by
        self.withhold = withhold   # request dict -> True to keep its answer back
        self.held = []             # (request dict, payload bits) kept back until release()
        self.withheld = []         # request dicts of every read withheld or answered late
        self.withheld_keys = set()
        self.late_sent = 0         # late answers queued (delivered once the heap reaches them)
        self.blocked = False       # hold mem.req.ready low
        self.cycle = 0
        self._ready_now = False
        self.req_ready.value = 0
        self.resp_valid.value = 0

    @property
    def idle(self) -> bool:
        return not self.pending and self.current is None

    def release(self, pred=None) -> int:
        """Present the held answers (those whose request satisfies ``pred``, default all) from now on."""
        keep, n = [], 0
        for r, bits in self.held:
            if pred is None or pred(r):
                self.inject(bits)
                n += 1
            else:
                keep.append((r, bits))
        self.held = keep
        return n

    def inject(self, bits):
        """Present the response ``bits`` as soon as the ones already due have gone."""
        heapq.heappush(self.pending, (self.cycle, self.seq, bits))
        self.seq += 1

    def drive(self, cycle):
        self.cycle = cycle
        self._ready_now = self.gate.open() and not self.blocked
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
            fault = None
            if self.withhold is not None and self.withhold(r):
                fault = "hold"
            elif self.drop or self.late:
                x = self.rng.random()
                fault = "hold" if x < self.drop else "late" if x < self.drop + self.late else None
            if fault:
                self.withheld.append(r)
                self.withheld_keys.add((r["group"], r["index"], r["dst"]))
            if fault == "hold":
                self.held.append((r, bits))
            else:
                if fault == "late":
                    due += self.late_by
                    self.late_sent += 1
                heapq.heappush(self.pending, (due, self.seq, bits))
                self.seq += 1
        if self.current is not None and self.resp_ready.value == 1:
            self.current = None
            self.answered += 1
