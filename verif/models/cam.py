"""Reference models of :class:`hw.switch.cam.Cam`: the replacement policy, a fast functional CAM and a
cycle-exact model of the RTL pipeline.

* :class:`TreePlru` -- tree pseudo-LRU over ``entries`` leaves (heap-numbered nodes ``1..entries-1``; bit
  1 = the victim is in the right subtree). ``touch(e)`` points every node on ``e``'s path away from it;
  ``victim()`` follows the pointers from the root.
* :class:`CamCore` -- the contents and the policy: invalid entries first (lowest index), else the PLRU
  victim; keys unique; insert of a present key updates in place. Its ``lookup``/``insert``/``invalidate``
  methods are the *functional* CAM used by fast sweeps (the AL-TLB hit-rate benchmark).
* :class:`CamCycleModel` -- the RTL's timing built on :class:`CamCore`: results two cycles after the
  lookup, writes at the end of their cycle and forwarded into the lookup pipeline, the hit's PLRU touch
  in stage 2 before the insert's touch. ``step(...)`` returns the outputs the RTL shows in that cycle.

The cycle model is checked against the RTL, output by output and cycle by cycle, in ``verif/tb/cam.py``;
the functional methods share every line of policy code with it.
"""

import dataclasses

__all__ = ["TreePlru", "CamCore", "CamCycleModel", "CamOutputs", "INSERT", "INVALIDATE"]

INSERT = 0
INVALIDATE = 1


class TreePlru:
    def __init__(self, entries: int):
        if entries < 2 or entries & (entries - 1):
            raise ValueError(f"tree PLRU needs a power-of-two number of entries >= 2, got {entries}")
        self.entries = entries
        self.levels = entries.bit_length() - 1
        self.bits = [0] * entries          # index 0 unused

    def touch(self, e: int) -> None:
        node = 1
        for depth in range(self.levels):
            direction = (e >> (self.levels - 1 - depth)) & 1
            self.bits[node] = 1 - direction
            node = 2 * node + direction

    def victim(self) -> int:
        node = 1
        for _ in range(self.levels):
            node = 2 * node + self.bits[node]
        return node - self.entries


class CamCore:
    """CAM contents + replacement policy (no timing)."""

    def __init__(self, entries: int):
        self.entries = entries
        self.valid = [False] * entries
        self.keys = [0] * entries
        self.values = [0] * entries
        self.index = {}                    # key -> entry, for valid entries
        self.plru = TreePlru(entries)

    # -- policy pieces shared by the functional and the cycle model
    def find(self, key: int):
        return self.index.get(key)

    def insert_target(self, key: int) -> tuple[int, bool, bool]:
        """(entry, key_was_present, evicts_valid_entry) for an insert of ``key`` now."""
        e = self.index.get(key)
        if e is not None:
            return e, True, False
        for i, v in enumerate(self.valid):
            if not v:
                return i, False, False
        return self.plru.victim(), False, True

    def masked_matches(self, key: int, mask: int) -> list[int]:
        return [i for i in range(self.entries) if self.valid[i] and not ((self.keys[i] ^ key) & mask)]

    def write_entry(self, e: int, key: int, value: int) -> None:
        if self.valid[e]:
            del self.index[self.keys[e]]
        self.valid[e] = True
        self.keys[e] = key
        self.values[e] = value
        self.index[key] = e

    def clear_entry(self, e: int) -> None:
        if self.valid[e]:
            del self.index[self.keys[e]]
            self.valid[e] = False

    # -- functional use (fast sweeps): no pipeline, effects at once
    def lookup(self, key: int):
        """Value on a hit (touching the entry), ``None`` on a miss."""
        e = self.index.get(key)
        if e is None:
            return None
        self.plru.touch(e)
        return self.values[e]

    def insert(self, key: int, value: int) -> tuple[int, bool]:
        """Insert; returns (entry, evicted a valid entry)."""
        e, _, evicted = self.insert_target(key)
        self.write_entry(e, key, value)
        self.plru.touch(e)
        return e, evicted

    def invalidate(self, key: int, mask: int) -> int:
        hits = self.masked_matches(key, mask)
        for e in hits:
            self.clear_entry(e)
        return len(hits)

    def occupancy(self) -> int:
        return len(self.index)


@dataclasses.dataclass
class CamOutputs:
    result_valid: int = 0
    result_hit: int = 0
    result_index: int = 0
    result_value: int = 0
    write_done: int = 0
    write_index: int = 0
    write_hit: int = 0
    write_evicted: int = 0


class CamCycleModel:
    """Cycle-exact model of the CAM RTL. Call :meth:`step` once per clock with that cycle's inputs."""

    def __init__(self, entries: int, key_width: int, value_width: int):
        self.core = CamCore(entries)
        self.key_mask = (1 << key_width) - 1
        self.value_mask = (1 << value_width) - 1
        self.out = CamOutputs()
        self.s1 = None                     # (key, matched entry or None) of the lookup in stage 2

    def outputs(self) -> CamOutputs:
        """Registered outputs visible in the current cycle (before :meth:`step` advances)."""
        return dataclasses.replace(self.out)

    def write_effect(self, write):
        """What the write ``(op, key, mask, value)`` (or None) does this cycle: (target, cleared set,
        key_present, evicts)."""
        if write is None:
            return None, set(), False, False
        op, key, mask, _ = write
        if op == INSERT:
            target, present, evicts = self.core.insert_target(key)
            return target, {target}, present, evicts
        hits = self.core.masked_matches(key, mask)
        return None, set(hits), bool(hits), False

    def step(self, lookup=None, write=None) -> CamOutputs:
        """Advance one clock. ``lookup`` is a key or None; ``write`` is ``(op, key, mask, value)`` or None.

        Returns the outputs visible during this cycle (i.e. computed by earlier cycles)."""
        out_now = self.outputs()
        core = self.core
        if write is not None:
            op, wkey, wmask, wvalue = write
            write = (op, wkey & self.key_mask, wmask & self.key_mask, wvalue & self.value_mask)
        target, cleared, present, evicts = self.write_effect(write)
        ins_key = write[1] if (write is not None and write[0] == INSERT) else None

        # stage 2: the lookup presented last cycle
        new = CamOutputs()
        hit_idx = None
        if self.s1 is not None:
            key1, e1 = self.s1
            if e1 in cleared:
                e1 = None
            if ins_key is not None and ins_key == key1:
                hit_idx, value = target, write[3]
            elif e1 is not None:
                hit_idx, value = e1, core.values[e1]
            new.result_valid = 1
            if hit_idx is not None:
                new.result_hit, new.result_index, new.result_value = 1, hit_idx, value

        # stage 1: the lookup presented now
        s1 = None
        if lookup is not None:
            lkey = lookup & self.key_mask
            e = core.find(lkey)
            if e in cleared:
                e = None
            if ins_key is not None and ins_key == lkey:
                e = target
            s1 = (lkey, e)

        # write-port outputs (registered)
        if write is not None:
            new.write_done = 1
            new.write_index = target if write[0] == INSERT else 0
            new.write_hit = int(present)
            new.write_evicted = int(evicts)

        # end of cycle: PLRU touches (hit first, insert last), then the write itself
        if hit_idx is not None:
            core.plru.touch(hit_idx)
        if write is not None:
            if write[0] == INSERT:
                core.plru.touch(target)
                core.write_entry(target, write[1], write[3])
            else:
                for e in cleared:
                    core.clear_entry(e)
        self.s1 = s1
        self.out = new
        return out_now
