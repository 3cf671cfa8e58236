"""Formal harness of the CAM (:class:`~hw.switch.cam.Cam`): the real block, every input free (any lookup
and write command in any cycle, lookups and writes together), one key ``K`` chosen by the solver
(``AnyConst``: the properties hold for every key) and a ghost register holding the last value inserted
for ``K``.

Parameters: 16 entries (the smallest the block allows; tree-PLRU over 4 levels), 5-bit keys (32 keys >
16 entries, so inserts evict), 4-bit values. Nothing in the block depends on the entry count except the
width of the match vectors and the PLRU tree, so the argument is the same at 1024 entries; the key and
value widths only change comparator widths.

Properties (each with a ``Cover`` that shows it is not vacuous):

* **never two valid entries for one key**: for every pair of entries, not both valid with equal keys
  (inductive; covered by an insert of a key already present, the case that would make a second copy);
* **a hit returns the last value filled for that key**: a lookup of ``K`` answered in cycle t+2 hits
  exactly when ``K`` is in the CAM then (the contract: the answer reflects the writes of cycles t and
  t+1), and a hit's value is the value of the last ``INSERT`` of ``K``; strengthened with the invariant
  that the entry holding ``K`` holds that value (so k-induction can close). Covered by a hit on ``K``
  whose value was rewritten by an insert in the lookup's own window (t or t+1, the forwarding paths).

The environment contract is empty: the CAM accepts any command in any cycle, so no ``Assume``.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.hdl._ast import AnyConst     # public as amaranth.hdl.AnyConst in 0.4; still here in 0.5
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.switch.cam import Cam, CamOp

from .runner import Properties

__all__ = ["CamHarness"]


class CamHarness(wiring.Component):
    """Ports (free inputs of the proof): the CAM's lookup and write inputs. ``cam`` may be replaced (a
    mutant, to show the proof can fail); ``cam.state`` is its contents ``(valid, keys, values)``."""

    def __init__(self, *, entries: int = 16, key_width: int = 5, value_width: int = 4, cam=None):
        self.cam = cam if cam is not None else Cam(entries=entries, key_width=key_width, value_width=value_width)
        self.props = Properties()
        kw, vw = self.cam.key_width, self.cam.value_width
        super().__init__({"lookup_valid": In(1), "lookup_key": In(kw), "write_valid": In(1),
                          "write_op": In(CamOp), "write_key": In(kw), "write_mask": In(kw),
                          "write_value": In(vw)})

    def elaborate(self, platform):
        m = Module()
        c = self.cam
        E, kw, vw = c.entries, c.key_width, c.value_width
        m.submodules.cam = c
        valid, keys, values = c.state
        m.d.comb += [c.lookup_valid.eq(self.lookup_valid), c.lookup_key.eq(self.lookup_key),
                     c.write_valid.eq(self.write_valid), c.write_op.eq(self.write_op),
                     c.write_key.eq(self.write_key), c.write_mask.eq(self.write_mask),
                     c.write_value.eq(self.write_value)]
        p = self.props

        ins = self.write_valid & (self.write_op == CamOp.INSERT)
        dup = Cat(valid[i] & valid[j] & (keys[i] == keys[j]) for i in range(E) for j in range(i + 1, E))
        was_ins = Signal()                   # the command write_done/write_hit report was an INSERT
        m.d.sync += was_ins.eq(ins)
        p.check(m, "never two valid entries for one key", ~dup.any(), c.write_done & c.write_hit & was_ins)

        K = Signal(kw)
        m.d.comb += K.eq(AnyConst(kw))
        ghost = Signal(vw)                   # the value of the last INSERT of K
        with m.If(ins & (self.write_key == K)):
            m.d.sync += ghost.eq(self.write_value)
        holds = Cat(valid[i] & (keys[i] == K) for i in range(E))
        stored_ok = Cat(~holds[i] | (values[i] == ghost) for i in range(E)).all()
        # The lookup pipeline's key, as the harness saw it (cycles t+1 and t+2 of a lookup at t).
        v1, k1, v2, k2 = Signal(), Signal(kw), Signal(), Signal(kw)
        m.d.sync += [v1.eq(self.lookup_valid), k1.eq(self.lookup_key), v2.eq(v1), k2.eq(k1)]
        answer_k = c.result_valid & v2 & (k2 == K)
        answer_ok = ~answer_k | ((c.result_hit == holds.any()) & (~c.result_hit | (c.result_value == ghost)))
        recent = Signal(2)                   # an insert of K in cycle t+1 / t of the answered lookup
        m.d.sync += recent.eq(Cat(ins & (self.write_key == K), recent[0]))
        p.check(m, "a hit returns the last value filled for that key", (c.result_valid == v2) & answer_ok & stored_ok,
                answer_k & c.result_hit & recent.any())
        return m
