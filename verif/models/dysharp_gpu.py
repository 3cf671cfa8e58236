"""The GPU side of one DySHARP switch link, for the switch testbench (:mod:`verif.tb.dysharp_switch`).

Per GPU ``port``:

* a memory (:class:`verif.harness.gpu_memory.GpuMemory`, flit-addressed: byte address // flit bytes);
* a memory manager (:class:`verif.models.memory_manager.MemoryManagerSpec`): the GPU's own, asymmetric
  layout; it answers the switch's ``TLB_FILL`` reads (allocating a row on a dispatch group's first touch);
* the responder, fed with every packet the switch delivers on the link (:meth:`DySharpGpu.on_packet`, a
  :class:`verif.harness.vc_link.VcLinkSink` callback):

  - ``WRITE``, ``MM_ST`` -> memory (logged in :attr:`writes` for the scoreboard);
  - ``READ`` -> ``READ_RESP`` (``dst`` = the request's ``src``, ``tag``/``xtag``/``length`` echoed, data
    from memory);
  - ``RED_READ`` -> ``RED_READ_RESP`` (``dst`` = the request's ``src``, ``src`` = this port, ``tag``,
    ``xtag``, ``length``, ``etype``, ``redop`` echoed, ``code`` 0, ``length`` flits of memory at ``addr``;
    a word nobody wrote is first initialised with ``init_word(flit_addr, etype)`` when given, so the
    reduction data are meaningful numbers of the request's type);
  - ``TLB_FILL`` -> ``TLB_FILL_RESP`` (``addr``/``code`` from the memory manager for (group, index, src),
    ``tag`` echoed, ``dst`` = ``src`` = this port);
  - everything else (responses to this GPU's own requests, errors) goes to ``on_delivery`` untouched.

Each answer is sent on VC 1 (the response class) after a random latency drawn per answer from this GPU's
own ``latency`` range (``fill_latency`` for TLB fills); answers leave in the order they fall due. The
responder never waits on anything the switch does (it answers whatever it has received, whatever its
own requests are doing), which is the GPU side's part of the deadlock-freedom argument.

Fault injection: ``silent_red_read`` (never answer a ``RED_READ``), ``red_read_late`` (answer each
``RED_READ`` that many cycles later than usual: after its entry timed out), ``silent_tlb_fill`` (never answer a
``TLB_FILL``), ``red_read_hook(request_header, response_packet) -> [extra packets]`` (sent right after the
answer: duplicates), and :meth:`inject` (send any packet later: a contribution for a freed entry).
For the fault campaign (:mod:`verif.faults`): ``silent_after`` (answer that many ``RED_READ`` s, then
stop answering them: a GPU that dies mid-combine; ``on_silent(request_header)`` is told of each one it
ignores), ``tlb_fill_garbage(request_header) -> [Packet or flit list]`` (sent instead of the answer when
``silent_tlb_fill``: a fill that returns garbage) and ``answer_hook(packet) -> [Packet or flit list]``
(rewrites every answer as it leaves: corrupted flits, bad framing).
"""

import heapq

from hw.packet import Header, Opcode, Packet

from verif.harness.cycler import Agent
from verif.harness.gpu_memory import GpuMemory
from verif.models.memory_manager import MemoryManagerSpec

__all__ = ["DySharpGpu", "GpuProtocolError"]


class GpuProtocolError(AssertionError):
    """The switch sent this GPU something the link protocol forbids (a malformed TLB_FILL, ...)."""


class DySharpGpu(Agent):
    def __init__(self, port: int, source, rng, *, latency=(1, 1), fill_latency=None,
                 flit_width: int = 128, mm: MemoryManagerSpec | None = None, memory: GpuMemory | None = None,
                 on_delivery=None, init_word=None, silent_red_read: bool = False,
                 silent_tlb_fill: bool = False, red_read_hook=None, red_read_late: int = 0,
                 silent_after: int | None = None, on_silent=None, tlb_fill_garbage=None, answer_hook=None):
        for name, lat in (("latency", latency), ("fill_latency", fill_latency)):
            if lat is not None and (len(lat) != 2 or not 0 <= lat[0] <= lat[1]):
                raise ValueError(f"{name} must be a (min, max) pair with 0 <= min <= max, got {lat!r}")
        self.port = port
        self.source = source          # VcLinkSource on the switch's rx[port]
        self.rng = rng
        self.latency = tuple(latency)
        self.fill_latency = tuple(fill_latency or latency)
        self.flit_width = flit_width
        self.flit_bytes = flit_width // 8
        self.mm = mm if mm is not None else MemoryManagerSpec(index_bits=18, slots=1 << 16)
        self.memory = memory if memory is not None else GpuMemory(flit_width)
        self.on_delivery = on_delivery   # on_delivery(port, vc, Packet or None (poisoned), flits, cycle)
        self.init_word = init_word
        self.silent_red_read = silent_red_read
        self.silent_tlb_fill = silent_tlb_fill
        self.red_read_hook = red_read_hook
        self.red_read_late = red_read_late
        self.silent_after = silent_after
        self.on_silent = on_silent
        self.tlb_fill_garbage = tlb_fill_garbage
        self.answer_hook = answer_hook
        self.pending = []            # heap of (due cycle, seq, Packet)
        self._seq = 0
        self.cycle = 0
        # Logs (what the switch delivered here), for scoreboards and counters.
        self.writes = []             # (Header, payload list, cycle)
        self.red_reads = []          # (Header, cycle)
        self.red_read_resps = []     # (request Header, response Packet, cycle)
        self.fills = []              # (Header, addr, code, cycle)
        self.reads = []              # (Header, cycle)
        self.poisoned = 0

    # -- answers
    def _schedule(self, packet: Packet, lat, extra=()) -> None:
        due = self.cycle + self.rng.randint(*lat)
        for p in (packet, *extra):
            heapq.heappush(self.pending, (due, self._seq, p))
            self._seq += 1

    def inject(self, packet: Packet, delay: int = 0) -> None:
        """Send ``packet`` (on its opcode's VC) ``delay`` cycles from now."""
        heapq.heappush(self.pending, (self.cycle + delay, self._seq, packet))
        self._seq += 1

    @property
    def idle(self) -> bool:
        return not self.pending and self.source.idle

    def drive(self, cycle):
        self.cycle = cycle
        while self.pending and self.pending[0][0] <= cycle:
            p = heapq.heappop(self.pending)[2]
            for x in self.answer_hook(p) if self.answer_hook else (p,):
                self.source.send(x)

    # -- memory helpers
    def _word(self, flit_addr: int, etype: int | None = None) -> int:
        if self.init_word is not None and flit_addr not in self.memory.words:
            self.memory.write(flit_addr, self.init_word(flit_addr, etype))
        return self.memory.read(flit_addr)

    def data_at(self, byte_addr: int, length: int) -> list[int]:
        """``length`` flits of memory at ``byte_addr`` (nothing initialised)."""
        base = byte_addr // self.flit_bytes
        return [self.memory.read(base + k) for k in range(length)]

    # -- what the switch delivers
    def on_packet(self, vc: int, flits, cycle: int) -> None:
        self.cycle = cycle
        if flits[-1].poison:
            self.poisoned += 1
            if self.on_delivery:
                self.on_delivery(self.port, vc, None, flits, cycle)
            return
        pkt = Packet.from_flits(flits)
        h = pkt.header
        op = h.opcode
        if op in (Opcode.WRITE.value, Opcode.MM_ST.value):
            base = h.addr // self.flit_bytes
            for k, word in enumerate(pkt.payload):
                self.memory.write(base + k, word)
            self.writes.append((h, list(pkt.payload), cycle))
        elif op == Opcode.READ.value:
            self.reads.append((h, cycle))
            base = h.addr // self.flit_bytes
            resp = Packet(Header(opcode=Opcode.READ_RESP, src=self.port, dst=h.src, tag=h.tag, xtag=h.xtag,
                                 length=h.length), [self.memory.read(base + k) for k in range(h.length)])
            self._schedule(resp, self.latency)
        elif op == Opcode.RED_READ.value:
            self.red_reads.append((h, cycle))
            if self.silent_after is not None and len(self.red_read_resps) >= self.silent_after:
                self.silent_red_read = True
            if self.silent_red_read and self.on_silent:
                self.on_silent(h)
            if not self.silent_red_read:
                base = h.addr // self.flit_bytes
                data = [self._word(base + k, h.etype) for k in range(h.length)]
                resp = Packet(Header(opcode=Opcode.RED_READ_RESP, src=self.port, dst=h.src, tag=h.tag,
                                     xtag=h.xtag, length=h.length, etype=h.etype, redop=h.redop), data)
                extra = self.red_read_hook(h, resp) if self.red_read_hook else ()
                self.red_read_resps.append((h, resp, cycle))
                lat = self.latency if not self.red_read_late else \
                    (self.latency[0] + self.red_read_late, self.latency[1] + self.red_read_late)
                self._schedule(resp, lat, extra)
        elif op == Opcode.TLB_FILL.value:
            if h.mask != 1 << self.port or len(flits) != 1 or h.length:
                raise GpuProtocolError(f"GPU {self.port}: malformed TLB_FILL {h!r} ({len(flits)} flits) at "
                                       f"cycle {cycle}")
            if self.silent_tlb_fill:
                self.fills.append((h, None, None, cycle))
                if self.tlb_fill_garbage is not None:
                    due = self.cycle + self.rng.randint(*self.fill_latency)
                    for p in self.tlb_fill_garbage(h):
                        heapq.heappush(self.pending, (due, self._seq, p))
                        self._seq += 1
            else:
                addr, code = self.mm.serve(h.group, h.index, h.src)
                self.fills.append((h, addr, code, cycle))
                resp = Packet(Header(opcode=Opcode.TLB_FILL_RESP, src=self.port, dst=self.port, tag=h.tag,
                                     addr=addr, code=code))
                self._schedule(resp, self.fill_latency)
        if self.on_delivery:
            self.on_delivery(self.port, vc, pkt, flits, cycle)

    def row(self, group: int, index: int) -> int | None:
        """The byte address of (group, index)'s row in this GPU's layout, None if it has none (yet)."""
        g = self.mm.binding(group)
        if g is None:
            return None
        slot = self.mm.slot_of(g.layout, index)
        if slot is None:
            return None
        return (g.base + slot * g.stride * 16) & ((1 << 48) - 1)

