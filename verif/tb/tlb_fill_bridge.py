"""cocotb testbench of :class:`hw.switch.tlb_fill_bridge.TlbFillBridge`.

* Requests: random :class:`~hw.switch.backing_if.BackingRequest`\\ s on ``mem.req`` (random gaps), ``tx``
  stalled at random: every ``tx`` flit must be, bit for bit and in order, the ``TLB_FILL`` header the
  contract builds from the request taken in the same cycle (:class:`~hw.packet.Header` encodes the
  expected one, so the RTL and the Python encoder must agree).
* Responses: a random mix on ``rx`` of good header-only ``TLB_FILL_RESP`` packets and bad ones (another
  opcode, two or three flits, poisoned, poisoned multi-flit), with random gaps; ``mem.resp.ready`` drops
  for single cycles at random (what the AL-TLB does during a config write). Every good one must come out
  as the right :class:`~hw.switch.backing_if.BackingResponse`, in order, and nothing else; ``bad`` must
  equal the number of bad packets. :class:`BufferModel` checks every cycle that ``mem.resp.valid`` and
  ``rx.ready`` are exactly the one-entry buffer's (``rx.ready`` low only while the buffer is full and
  ``mem.resp.ready`` low).
* Full rate: K requests in K cycles (latency 0) and K good responses in K + 1 cycles (latency 1).

Settings (``DYSHARP_ENV``): ``requests``, ``responses``, ``gap``, ``stall``, ``bad`` (fraction).
"""

import cocotb

from hw.packet import ErrorCode, Flit, Header, Opcode, pack_flit
from hw.switch.backing_if import BackingRequest, BackingResponse

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.scoreboard import Scoreboard
from verif.harness.stream import StreamDriver, StreamMonitor, record_cycles
from verif.harness.structs import Port, pack, unpack

CODES = [c.value for c in ErrorCode]


def fill_flit(req: dict, flit_width=128) -> int:
    h = Header(opcode=Opcode.TLB_FILL, src=req["src"], tag=req["tag"], group=req["group"],
               index=req["index"], mask=1 << req["dst"])
    return pack_flit(Flit(h.encode(), last=True), flit_width)


class BufferModel:
    """The response buffer as a cycle model (a :class:`Cycler` watcher)."""

    def __init__(self, dut, flit_width):
        self.W = flit_width
        self.rx_valid, self.rx_ready, self.rx_payload = (Port(getattr(dut, f"rx__{n}"))
                                                         for n in ("valid", "ready", "payload"))
        self.r_valid, self.r_ready = Port(dut.mem__resp__valid), Port(dut.mem__resp__ready)
        self.full = False
        self.dropping = False

    def __call__(self, cycle):
        rv, rr = self.r_valid.high(), self.r_ready.high()
        assert rv == self.full, f"cycle {cycle}: mem.resp.valid={int(rv)}, buffer full={self.full}"
        exp_ready = self.dropping or not self.full or rr
        assert self.rx_ready.high() == exp_ready, f"cycle {cycle}: rx.ready={int(self.rx_ready.high())}, " \
                                                  f"expected {int(exp_ready)}"
        if rr:
            self.full = False
        if self.rx_valid.high() and exp_ready:
            bits = self.rx_payload.read()
            data, last, poison = bits & ((1 << self.W) - 1), (bits >> self.W) & 1, (bits >> (self.W + 1)) & 1
            good = not self.dropping and (data & 0xF) == Opcode.TLB_FILL_RESP.value and last and not poison
            if good:
                self.full = True
            else:
                self.dropping = not last


class BridgeEnv:
    def __init__(self, dut, *, gap=0.0, stall=0.0, resp_stall=0.0):
        p = tbenv.params()
        self.port = p["port"]
        self.W = p["flit_width"]
        self.cycler = Cycler(dut)
        self.sb = Scoreboard("tlb_fill_bridge")
        self.req = StreamDriver(dut, "mem__req", tbenv.rng("req"), gap=gap, burst=2.0,
                                on_accept=lambda bits, cyc: self.sb.expect(
                                    "tx", fill_flit(unpack(BackingRequest, bits), self.W)))
        self.tx = StreamMonitor(dut, "tx", tbenv.rng("tx"), stall=stall, burst=3.0,
                                on_item=lambda bits, cyc: self.sb.observe("tx", bits, cycle=cyc))
        self.rx = StreamDriver(dut, "rx", tbenv.rng("rx"), gap=gap, burst=2.0)
        # Single-cycle ready drops, like the AL-TLB's during a config write.
        self.resp = StreamMonitor(dut, "mem__resp", tbenv.rng("resp"), stall=resp_stall, burst=1.0,
                                  on_item=lambda bits, cyc: self.sb.observe("resp", bits, cycle=cyc))
        self.cycler.add(self.req, self.tx, self.rx, self.resp)
        self.cycler.watchers.append(BufferModel(dut, self.W))
        self.bad = 0
        self.dut = dut

    def request(self, rng):
        r = dict(group=rng.getrandbits(8), index=rng.getrandbits(18), dst=rng.randrange(64),
                 src=rng.randrange(64), tag=rng.getrandbits(8))
        self.req.send(pack(BackingRequest, **r))

    def good_response(self, rng):
        tag, addr, code = rng.getrandbits(8), rng.getrandbits(48), rng.choice(CODES)
        h = Header(opcode=Opcode.TLB_FILL_RESP, tag=tag, addr=addr, code=code, dst=self.port)
        self.rx.send(pack_flit(Flit(h.encode(), last=True), self.W))
        self.sb.expect("resp", pack(BackingResponse, addr=addr, code=code, tag=tag))

    def bad_response(self, rng):
        kind = rng.randrange(4)
        op = Opcode.TLB_FILL_RESP
        if kind == 0:   # wrong opcode (a response of another kind, or an unassigned value)
            op = rng.choice([o for o in range(16) if o != Opcode.TLB_FILL_RESP.value])
        n = rng.randint(2, 3) if kind in (1, 3) else 1
        poison = kind in (2, 3)
        h = Header(opcode=op, tag=rng.getrandbits(8)).encode() | (rng.getrandbits(100) << 28 if kind else 0)
        words = [h] + [rng.getrandbits(self.W) for _ in range(n - 1)]
        for k, w in enumerate(words):
            self.rx.send(pack_flit(Flit(w, k == n - 1, poison and k == n - 1), self.W))
        self.bad += 1

    async def drain(self, timeout):
        await self.cycler.until(lambda: self.req.idle and self.rx.idle and self.sb.outstanding == 0,
                                timeout=timeout, what="every request and response through")
        await self.cycler.cycles(3)
        self.sb.finish()
        assert int(self.dut.bad.value) == self.bad, (int(self.dut.bad.value), self.bad)


@cocotb.test()
async def test_random(dut):
    s = tbenv.settings()
    env = BridgeEnv(dut, gap=s.get("gap", 0.3), stall=s.get("stall", 0.4), resp_stall=s.get("stall", 0.4))
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    for _ in range(s.get("requests", 300)):
        env.request(rng)
    bad = s.get("bad", 0.3)
    for _ in range(s.get("responses", 400)):
        (env.bad_response if rng.random() < bad else env.good_response)(rng)
    await env.drain(timeout=20000)
    assert env.bad > 0


@cocotb.test()
async def test_full_rate(dut):
    env = BridgeEnv(dut)
    await env.cycler.start()
    rng = tbenv.rng("traffic")
    k = 40
    for _ in range(k):
        env.request(rng)
        env.good_response(rng)
    req_in, tx_out = record_cycles(env.req), record_cycles(env.tx, "on_item")
    rx_in, resp_out = record_cycles(env.rx), record_cycles(env.resp, "on_item")
    await env.drain(timeout=10 * k)
    assert tx_out == req_in and tx_out[-1] - tx_out[0] == k - 1, "TLB_FILL not at full rate, latency 0"
    assert resp_out == [c + 1 for c in rx_in] and rx_in[-1] - rx_in[0] == k - 1, \
        "responses not at full rate, latency 1"
