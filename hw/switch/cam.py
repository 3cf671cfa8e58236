"""A fully associative content-addressable memory (CAM) with tree pseudo-LRU replacement.

The AL-TLB caches its translations in one; it is written as a reusable core (any key and value width).

Contract
--------
* Parameters: ``entries`` (a power of two, 16..1024), ``key_width`` (1..64), ``value_width`` (1..128).
* **Lookup port** (``lookup_valid``, ``lookup_key``): one lookup per cycle, fully pipelined, no stall. A
  lookup presented in cycle t answers in cycle t+2 on ``result_valid``/``result_hit``/``result_index``/
  ``result_value`` (registered outputs, valid for exactly one cycle). The answer reflects every write
  presented in cycles t and t+1 (writes are forwarded into the pipeline), i.e. the CAM as it stands when
  the answer appears, before that cycle's write. A client that inserts after a miss therefore never sees
  a stale miss for a key it has already inserted.
* **Write port** (``write_valid``, ``write_op``, ``write_key``, ``write_mask``, ``write_value``): one
  command per cycle, taking effect at the end of the cycle it is presented.

  - ``INSERT``: if ``write_key`` is present, its value is updated in place; otherwise the key goes to the
    lowest-numbered invalid entry, or, when every entry is valid, to the tree-PLRU victim (which is
    evicted). The written entry becomes most recently used.
  - ``INVALIDATE``: invalidates every valid entry whose key equals ``write_key`` on the bits set in
    ``write_mask``: an all-ones mask invalidates one key, a mask over a key field flushes by that field
    (for example every translation of one multimem group). ``write_value`` is ignored.

  One cycle after a command, ``write_done`` pulses with ``write_index`` (the entry an insert wrote),
  ``write_hit`` (insert: the key was present; invalidate: at least one entry matched) and
  ``write_evicted`` (insert replaced a valid entry holding another key).
* **Lookup and write in the same cycle** (the defined result tested by ``tests/hw/switch/test_cam.py``): the lookup
  sees the write. A lookup of the key being inserted hits with the new value and the insert's index; a
  lookup whose entry is invalidated or replaced misses.
* **Replacement** (tree pseudo-LRU, ``entries - 1`` bits): each internal node of a binary tree over the
  entries points to the half that holds the victim. A lookup hit (in the cycle its answer is computed,
  t+1) and an insert both *touch* their entry: every node on its path is set to point away from it. When
  both touch in one cycle, the insert's touch is applied last. Invalidations touch nothing. The victim is
  found by following the pointers from the root; invalid entries are always used first.
* Keys are unique: an insert never creates a second copy of a present key.
* Contents reset to invalid; keys and values are not reset.

Implementation: keys, values and PLRU bits are flip-flops. Each cycle uses two comparator arrays (lookup
key, write key with mask), one-hot match vectors, an AND-OR tree for the value and log-depth encoders; no
dynamically indexed multiplexer is built, so elaboration and Verilog size grow linearly with ``entries``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from ..arbiter import lowest_one, onehot_to_index, or_reduce

__all__ = ["Cam", "CamOp"]


class CamOp(enum.Enum, shape=1):
    INSERT = 0
    INVALIDATE = 1


class Cam(wiring.Component):
    """Fully associative CAM, tree-PLRU replacement; lookup latency 2 cycles, 1 lookup + 1 write per
    cycle (see the module docstring for the full contract)."""

    LATENCY = 2

    def __init__(self, *, entries: int = 64, key_width: int = 32, value_width: int = 48):
        if not isinstance(entries, int) or not 16 <= entries <= 1024 or entries & (entries - 1):
            raise ValueError(f"entries must be a power of two in 16..1024, got {entries!r}")
        if not isinstance(key_width, int) or not 1 <= key_width <= 64:
            raise ValueError(f"key_width must be an integer in 1..64, got {key_width!r}")
        if not isinstance(value_width, int) or not 1 <= value_width <= 128:
            raise ValueError(f"value_width must be an integer in 1..128, got {value_width!r}")
        self.entries = entries
        self.key_width = key_width
        self.value_width = value_width
        self.levels = entries.bit_length() - 1
        super().__init__({
            "lookup_valid": In(1),
            "lookup_key": In(key_width),
            "result_valid": Out(1),
            "result_hit": Out(1),
            "result_index": Out(range(entries)),
            "result_value": Out(value_width),
            "write_valid": In(1),
            "write_op": In(CamOp),
            "write_key": In(key_width),
            "write_mask": In(key_width),
            "write_value": In(value_width),
            "write_done": Out(1),
            "write_index": Out(range(entries)),
            "write_hit": Out(1),
            "write_evicted": Out(1),
        })
        # The contents (flip-flops), made here so that a formal harness can name them (verif/formal/).
        self.state = (Signal(entries, name="valid"),
                      [Signal(key_width, name=f"key_{i}", reset_less=True) for i in range(entries)],
                      [Signal(value_width, name=f"value_{i}", reset_less=True) for i in range(entries)])

    def elaborate(self, platform):
        m = Module()
        E, L, kw, vw = self.entries, self.levels, self.key_width, self.value_width

        valid, keys, values = self.state
        plru = Signal(E, name="plru")          # bit n (1..E-1) = node n; 1 = the victim is on the right

        # The comparator arrays, encoders and the value tree are evaluated inside the conditions that use
        # them (a write, a lookup, an answer): the same gates, but a cycle-based simulator (Verilator)
        # computes them only in the cycles they matter. Outside those cycles they read 0, which nothing
        # observes: every use of the write-side signals is qualified by ``ins``/``inv``, and of the
        # lookup-side ones by ``s1_valid`` (through ``hit``).

        # ---- write port: compare, target selection -------------------------------------------------
        wv = self.write_valid
        ins = Signal(name="ins")
        inv = Signal(name="inv")
        m.d.comb += [ins.eq(wv & (self.write_op == CamOp.INSERT)),
                     inv.eq(wv & (self.write_op == CamOp.INVALIDATE))]
        wmatch = Signal(E, name="wmatch")
        w_any = Signal(name="w_any")
        free_any = Signal(name="free_any")
        target = Signal(E, name="target")      # one-hot entry an insert writes
        target_idx = Signal(range(E), name="target_idx")
        with m.If(wv):
            wmask = Signal(kw, name="wmask")
            m.d.comb += wmask.eq(Mux(ins, Const(-1, kw), self.write_mask))
            m.d.comb += wmatch.eq(Cat(valid[i] & (((keys[i] ^ self.write_key) & wmask) == 0) for i in range(E)))
            m.d.comb += w_any.eq(wmatch.any())
        with m.If(ins):
            w_first = lowest_one(m, wmatch, name="w_first")
            free = Signal(E, name="free")
            m.d.comb += free.eq(~valid)
            m.d.comb += free_any.eq(free.any())
            free_first = lowest_one(m, free, name="free_first")
            # Tree-PLRU victim as a one-hot: entry e is the victim when every node on its path points to it.
            victim = Signal(E, name="victim")
            m.d.comb += victim.eq(Cat(self._on_path_all(plru, e) for e in range(E)))
            m.d.comb += target.eq(Mux(w_any, w_first, Mux(free_any, free_first, victim)))
            m.d.comb += target_idx.eq(onehot_to_index(target))
        # Entries whose current contents disappear this cycle (for forwarding into the lookup pipeline).
        clear = Signal(E, name="clear")
        m.d.comb += clear.eq(Mux(ins, target, 0) | Mux(inv, wmatch, 0))

        with m.If(ins):
            m.d.sync += valid.eq(valid | target)
            for i in range(E):
                with m.If(target[i]):
                    m.d.sync += [keys[i].eq(self.write_key), values[i].eq(self.write_value)]
        with m.Elif(inv):
            m.d.sync += valid.eq(valid & ~wmatch)

        m.d.sync += [
            self.write_done.eq(wv),
            self.write_index.eq(Mux(ins, target_idx, 0)),
            self.write_hit.eq(wv & w_any),
            self.write_evicted.eq(ins & ~w_any & ~free_any),
        ]

        # ---- lookup stage 1 (cycle t): compare, forward this cycle's write ---------------------------
        lmatch = Signal(E, name="lmatch")
        bypass1 = Signal(name="bypass1")
        s1_valid = Signal(name="s1_valid")
        s1_key = Signal(kw, name="s1_key")
        s1_match = Signal(E, name="s1_match")
        with m.If(self.lookup_valid):
            m.d.comb += lmatch.eq(Cat(valid[i] & (keys[i] == self.lookup_key) for i in range(E)))
            m.d.comb += bypass1.eq(ins & (self.write_key == self.lookup_key))
        m.d.sync += [
            s1_valid.eq(self.lookup_valid),
            s1_key.eq(self.lookup_key),
            s1_match.eq((lmatch & ~clear) | Mux(bypass1, target, 0)),
        ]

        # ---- lookup stage 2 (cycle t+1): forward this cycle's write, encode, read the value ----------
        kept = Signal(E, name="kept")
        bypass2 = Signal(name="bypass2")
        kept_idx = Signal(range(E), name="kept_idx")
        kept_value = Signal(vw, name="kept_value")
        hit = Signal(name="hit")
        hit_idx = Signal(range(E), name="hit_idx")
        with m.If(s1_valid):
            m.d.comb += kept.eq(s1_match & ~clear)
            m.d.comb += bypass2.eq(ins & (self.write_key == s1_key))
            m.d.comb += kept_idx.eq(onehot_to_index(kept))
            m.d.comb += kept_value.eq(self._and_or(m, kept, values))
            m.d.comb += [
                hit.eq(bypass2 | kept.any()),
                hit_idx.eq(Mux(bypass2, target_idx, kept_idx)),
            ]
        m.d.sync += [
            self.result_valid.eq(s1_valid),
            self.result_hit.eq(hit),
            self.result_index.eq(Mux(hit, hit_idx, 0)),
            self.result_value.eq(Mux(hit, Mux(bypass2, self.write_value, kept_value), 0)),
        ]

        # ---- PLRU update: the hit's touch, then the insert's touch -----------------------------------
        new_plru = []
        for n in range(1, E):
            depth = n.bit_length() - 1                 # root is depth 0
            shift = L - depth                          # entry index >> shift == n - 2**depth on the path
            prefix = n - (1 << depth)
            away_bit = L - 1 - depth                   # direction bit of the entry at this node
            on_ins = ins & ((target_idx >> shift) == prefix)
            on_hit = hit & ((hit_idx >> shift) == prefix)
            new_plru.append(Mux(on_ins, ~target_idx[away_bit],
                                Mux(on_hit, ~hit_idx[away_bit], plru[n])))
        with m.If(ins | hit):
            m.d.sync += plru.eq(Cat(Const(0, 1), *new_plru))
        return m

    def _on_path_all(self, plru, e):
        """1 when every PLRU node on entry ``e``'s path points towards ``e``."""
        L = self.levels
        terms = []
        for depth in range(L):
            node = (self.entries + e) >> (L - depth)
            direction = (e >> (L - 1 - depth)) & 1
            terms.append(plru[node] if direction else ~plru[node])
        return Cat(*terms).all()

    @staticmethod
    def _and_or(m, onehot, values):
        """OR over entries of (onehot[i] ? values[i] : 0), as a balanced tree of named partial sums."""
        width = len(values[0])
        level = [Mux(onehot[i], v, 0) for i, v in enumerate(values)]
        depth = 0
        while len(level) > 1:
            nxt = []
            for j in range(0, len(level), 4):
                s = Signal(width, name=f"vsum_{depth}_{j // 4}")
                m.d.comb += s.eq(or_reduce(level[j:j + 4]))
                nxt.append(s)
            level = nxt
            depth += 1
        return level[0]
