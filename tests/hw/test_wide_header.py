"""Past 64 ports the blocks speak the wide header format (hw.packet.WIDE): what they write and read is what
the Python encoder and decoder make of the same bits, and a 128-bit flit is refused with the reason."""

import gc
import random

import pytest
from amaranth.sim import Simulator

from hw.packet import WIDE, EType, ErrorCode, Header, Opcode, RedOp, pack_deferred_addr, unpack_deferred_addr

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def _run(dut, tb):
    sim = Simulator(dut)
    sim.add_clock(1e-9, if_exists=True)
    sim.add_testbench(tb)
    sim.run()


@pytest.mark.parametrize("make", [
    lambda: __import__("hw.switch.dysharp_switch", fromlist=["x"]).DySharpSwitch(ports=72),
    lambda: __import__("hw.switch.nvswitch", fromlist=["x"]).NVSwitch(ports=72),
    lambda: __import__("hw.switch.egress_translator", fromlist=["x"]).EgressTranslator(ports=72),
    lambda: __import__("hw.switch.reduction_engine", fromlist=["x"]).ReductionEngine(ports=72),
    lambda: __import__("hw.switch.tlb_fill_bridge", fromlist=["x"]).TlbFillBridge(ports=72),
    lambda: __import__("hw.gpu_nic.request_gen", fromlist=["x"]).RequestGenerator(ports=72),
    lambda: __import__("hw.gpu_nic.nic", fromlist=["x"]).GpuNic(ports=72),
    lambda: __import__("hw.system", fromlist=["x"]).System(gpus=72),
])
def test_72_ports_at_128_bit_flits_are_refused(make):
    with pytest.raises(ValueError, match="72 ports need the wide header .* use flit_width 256, 512"):
        make()
    gc.collect()


def test_fill_bridge_writes_the_wide_tlb_fill(seed):
    """A TLB_FILL for GPU 71 of 72: the mask bit, the 7-bit src and the 20-bit index as Header.decode(WIDE)
    reads them; a wide TLB_FILL_RESP comes back as its BackingResponse."""
    from hw.switch.tlb_fill_bridge import TlbFillBridge
    dut = TlbFillBridge(port=71, ports=72, flit_width=256)
    rng = random.Random(seed)

    async def tb(ctx):
        for _ in range(20):
            req = {"group": rng.getrandbits(8), "index": rng.randrange(72 * 4096, 1 << 20), "dst": rng.randrange(72),
                   "src": rng.randrange(72), "tag": rng.getrandbits(8)}
            ctx.set(dut.mem.req.valid, 1)
            ctx.set(dut.mem.req.payload, req)
            ctx.set(dut.tx.ready, 1)
            assert ctx.get(dut.tx.valid) and ctx.get(dut.tx.payload.last)
            h = Header.decode(ctx.get(dut.tx.payload.data), WIDE)
            assert h == Header(opcode=Opcode.TLB_FILL, src=req["src"], tag=req["tag"], group=req["group"],
                               index=req["index"], mask=1 << req["dst"])
        ctx.set(dut.mem.req.valid, 0)
        resp = Header(opcode=Opcode.TLB_FILL_RESP, src=71, dst=71, tag=0x5A, addr=0xABCDE0000, code=0)
        ctx.set(dut.rx.valid, 1)
        ctx.set(dut.rx.payload, {"data": resp.encode(WIDE), "last": 1, "poison": 0})
        ctx.set(dut.mem.resp.ready, 1)
        await ctx.tick()
        ctx.set(dut.rx.valid, 0)
        assert ctx.get(dut.mem.resp.valid)
        got = ctx.get(dut.mem.resp.payload)
        assert (got.addr, got.tag, got.code) == (0xABCDE0000, 0x5A, ErrorCode.NONE)
    _run(dut, tb)


def test_ingress_check_stamps_a_7_bit_src_and_keeps_the_wide_route(seed):
    """Port 70's check rewrites only ``src``: a DYN_LD_REDUCE's 128-bit mask, index and offset pass bit for
    bit, and a refused opcode is answered with a wide ERROR to port 70."""
    from hw.packet import VC_REQ
    from hw.switch.ingress_check import IngressCheck
    dut = IngressCheck(port=70, vc=VC_REQ, flit_width=256, ports=72)
    rng = random.Random(seed)

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.err.ready, 1)
        for _ in range(20):
            h = Header(opcode=Opcode.DYN_LD_REDUCE, src=rng.randrange(72), tag=rng.getrandbits(8), length=4,
                       etype=EType.BF16, redop=RedOp.ADD, group=3, mask=rng.getrandbits(72) | 1 << 71,
                       index=rng.getrandbits(20), offset=rng.getrandbits(10))
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {"data": h.encode(WIDE), "last": 1, "poison": 0})
            assert ctx.get(dut.o.valid) and not ctx.get(dut.err.valid)
            h.src = 70
            assert Header.decode(ctx.get(dut.o.payload.data), WIDE) == h
            await ctx.tick()
        bad = Header(opcode=Opcode.RED_RESP, src=5, tag=9, dst=5, length=0)
        ctx.set(dut.i.payload, {"data": bad.encode(WIDE), "last": 1, "poison": 0})
        assert ctx.get(dut.err.valid) and not ctx.get(dut.o.valid)
        assert Header.decode(ctx.get(dut.err.payload.data), WIDE) == Header(
            opcode=Opcode.ERROR, src=70, tag=9, dst=70, code=ErrorCode.UNKNOWN_OPCODE)
    _run(dut, tb)


def test_deferred_reads_name_the_row_with_the_wide_index():
    """A DYN_RED_READ past 64 ports carries its row as a WideDeferredAddr (20-bit index)."""
    from hw.switch.reduction_reads import DeferredReads
    dut = DeferredReads(flit_width=256, ports=72)

    async def tb(ctx):
        ctx.set(dut.rd.ready, 1)
        ctx.set(dut.dest.valid, 1)
        ctx.set(dut.dest.payload, {"rtag": 0x1A5, "dst": 71, "static": 0, "group": 2, "index": 72 * 4096 - 1,
                                   "offset": 3, "addr": 0, "src": 66, "length": 8, "etype": EType.FP32,
                                   "op": RedOp.MAX})
        h = Header.decode(ctx.get(dut.rd.payload.data), WIDE)
        assert (h.opcode, h.dst, h.src, h.length, h.tag, h.xtag) == (Opcode.DYN_RED_READ.value, 71, 66, 8, 0xA5, 0x01)
        assert unpack_deferred_addr(h.addr, WIDE) == (2, 72 * 4096 - 1, 3 * 32)
        assert h.addr == pack_deferred_addr(2, 72 * 4096 - 1, 96, WIDE)
    _run(dut, tb)
