"""cocotb testbench: a TLB fill answer behind a blocked read answer, at the integrated DySHARP switch
(:mod:`hw.switch.dysharp_switch`, ``fill_bypass``; :mod:`hw.switch.fill_bypass`).

GPU 2 stops returning its response channel's credits. GPU 1 sends GPU 2 short read answers, one whenever
it holds credits for more than a whole one, until the response path stops taking them: then a read answer
waits at the response network's input, port 1's VC 1 receive FIFO holds flits that cannot move, and GPU 1
still holds a credit. GPU 0 sends a ``dymultimem.st`` to GPU 1: port 1's AL-TLB misses and sends
``TLB_FILL`` to GPU 1, whose ``TLB_FILL_RESP`` goes up the link behind the read answers that wait.

Expected (the contract of ``fill_bypass``): the ``WRITE`` comes out of port 1 (the egress translator got
its fill) at the row the fill answer gave, while GPU 2 still lacks a read answer that GPU 1 has sent. With
``fill_bypass`` off the fill waits behind the read answer and the test fails (``no WRITE``). Then GPU 2
drains: every read answer arrives whole, in order, with its payload; no error counter moved.

Settings (``DYSHARP_ENV``): ``length`` (payload flits of each read answer), ``within`` (cycles the WRITE
may take after the fill answer left GPU 1).
"""

import cocotb

from hw.packet import VC_REQ, VC_RESP, Header, Opcode, Packet

from verif.harness import tbenv
from verif.harness.cycler import Cycler
from verif.harness.stream import StreamDriver
from verif.harness.structs import fields, pack, read_status
from verif.harness.vc_link import VcLinkSink, VcLinkSource

GROUP, ROWS, ROW, INDEX, OFFSET = 1, 1024, 0x5_0000, 5, 3
REQ_GPU, FILL_GPU, READER = 0, 1, 2


@cocotb.test()
async def test_fill_behind_blocked_read(dut):
    p, s = tbenv.params(), tbenv.settings()
    n, w = p["ports"], p["flit_width"]
    cycler = Cycler(dut)
    got = {i: [] for i in range(n)}      # (vc, Header, payload words, cycle) per port
    sent = {}

    def on_packet(port):
        return lambda vc, flits, cyc: got[port].append(
            (vc, Header.decode(flits[0].data), [f.data for f in flits[1:]], cyc))

    sources = [VcLinkSource(dut, f"rx__{i}", tbenv.rng(f"src{i}"), credits=p["link_credits"], flit_width=w,
                            on_sent=lambda pid, cyc: sent.__setitem__(pid, cyc)) for i in range(n)]
    sinks = [VcLinkSink(dut, f"tx__{i}", tbenv.rng(f"sink{i}"), credits=p["gpu_credits"], flit_width=w,
                        on_packet=on_packet(i)) for i in range(n)]
    cfg = StreamDriver(dut, "cfg", tbenv.rng("cfg"))
    cycler.add(*sources, *sinks, cfg)
    sinks[READER].withhold(VC_RESP)
    await cycler.start()

    from hw.switch.dysharp_switch import SwitchConfig, errors_in, status_layout
    cfg.send(pack(SwitchConfig, target=1, port=0, all=1, tlb__op=0, tlb__group=GROUP,
                  tlb__mask=(1 << n) - 1, tlb__rows=ROWS))
    await cycler.until(lambda: cfg.idle, timeout=100, what="the AL-TLB configuration")

    # 1. GPU 1 sends GPU 2 short read answers, one whenever it holds credits for more than one, until the
    #    response path stops taking them: then port 1's VC 1 receive FIFO holds flits that cannot move
    #    (at least link_credits - length - 1), and GPU 1 still holds a credit.
    length = s.get("length", 2)
    src = sources[FILL_GPU]
    answers = []
    state = {"quiet": 0, "credits": None}

    def feed():
        c = src.credits[VC_RESP]
        if not src.pending(VC_RESP) and c >= length + 2:
            k = len(answers)
            answers.append(Packet(Header(opcode=Opcode.READ_RESP, dst=READER, tag=k & 0xFF, length=length),
                                  [(k << 8) | j for j in range(length)]))
            src.send(answers[-1], VC_RESP, packet_id=("read", k))
        quiet = not src.pending(VC_RESP) and c == state["credits"] and c < p["link_credits"]
        state["quiet"], state["credits"] = state["quiet"] + 1 if quiet else 0, c
        return state["quiet"] > 40
    await cycler.until(feed, timeout=3000, what="the read answers backing up into port 1's receive FIFO")
    whole = len(answers)
    assert src.credits[VC_RESP] >= 1, src.credits

    # 2. A store to GPU 1 misses port 1's AL-TLB: TLB_FILL down to GPU 1.
    store = Packet(Header(opcode=Opcode.DYN_ST, tag=9, length=1, group=GROUP, mask=1 << FILL_GPU, index=INDEX,
                          offset=OFFSET), [0xA5])
    sources[REQ_GPU].send(store, VC_REQ, packet_id=("store",))

    def fill_request():
        return next((h for vc, h, _, _ in got[FILL_GPU] if h.opcode == Opcode.TLB_FILL.value), None)
    await cycler.until(lambda: fill_request() is not None, timeout=200, what="the TLB_FILL to GPU 1")
    fr = fill_request()

    # 3. The fill answer goes up right behind the read answers that wait.
    src.send(Packet(Header(opcode=Opcode.TLB_FILL_RESP, tag=fr.tag, dst=FILL_GPU, addr=ROW)), VC_RESP,
             packet_id=("fill",))
    await cycler.until(lambda: ("fill",) in sent, timeout=10, what="the fill answer leaving GPU 1")

    # 4. With the bypass the fill reaches the AL-TLB and the store leaves as a WRITE at the row it gave.
    def write():
        return next(((h, d, c) for vc, h, d, c in got[FILL_GPU] if h.opcode == Opcode.WRITE.value), None)
    within = s.get("within", 300)
    for _ in range(within):
        if write() is not None:
            break
        await cycler.cycles(1)
    reads_in = sum(1 for vc, h, _, _ in got[READER] if h.opcode == Opcode.READ_RESP.value)
    assert write() is not None, (
        f"no WRITE at port {FILL_GPU} within {within} cycles of its fill answer leaving GPU {FILL_GPU}: the fill "
        f"waits behind a read answer ({reads_in} of {whole} read answers delivered to GPU {READER})")
    h, data, _ = write()
    assert (h.addr, data) == (ROW + OFFSET * w // 8, [0xA5]), (hex(h.addr), data)
    assert reads_in < whole, f"the read answers were not blocked ({reads_in} of {whole} delivered)"

    # 5. GPU 2 drains: every read answer sent arrives whole and in order; no error counted.
    sinks[READER].withhold(VC_RESP, False)
    await cycler.until(lambda: sum(1 for vc, h, _, _ in got[READER] if h.opcode == Opcode.READ_RESP.value) == whole,
                       timeout=2000, what="the read answers reaching GPU 2")
    await cycler.cycles(10)
    reads = [(h.tag, h.length, d) for vc, h, d, _ in got[READER] if h.opcode == Opcode.READ_RESP.value]
    assert reads == [(a.header.tag, length, a.payload) for a in answers[:whole]], reads
    layout = fields(status_layout(n))
    bits = read_status(dut, n)
    st = {k: (bits >> off) & ((1 << wd) - 1) for k, (off, wd) in layout.items()}
    assert errors_in(st) == {}, errors_in(st)
