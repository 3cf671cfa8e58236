"""Cycle-exact reference model of the AL-TLB (:mod:`hw.switch.al_tlb`), built on the CAM model.

:class:`AlTlbModel` is stepped once per clock with the cycle's inputs (:class:`TlbInputs`) and returns the
outputs the RTL shows in that cycle (:class:`TlbOutputs`): ``tr.req.ready``, the head of the response
FIFO, the head of the backing-request FIFO, ``mem.resp.ready`` and the counters. The testbench checks
every one of them against the DUT in every cycle, so the model predicts the same hit/miss sequence, the
same MSHR use, the same replacement (through :class:`verif.models.cam.CamCycleModel`) and the same order
of answers. It is written from the contract in the RTL's docstring, with the same pipeline:

* stage A: one of (replay of the lowest filled MSHR) > (recirculated miss) > (new request) enters, if the
  response FIFO can take everything in flight; the CAM lookup and the group-table read start;
* stage B: isolation and bounds check against the group table (a write in the issue cycle is seen);
* stage C: the CAM answer arrives: error or hit -> response FIFO; miss -> the lowest free MSHR (primary:
  queue a backing read tagged ``gen << mshr_bits | mshr``; same key outstanding: coalesce; filled or
  timed out this very cycle: born filled) or, with no MSHR free (or a new read and the read queue full),
  the recirculation FIFO;
* timeouts: a primary whose read has waited ``timeout`` cycles (and is not filled in this cycle) answers
  every MSHR waiting on its key with ``TIMEOUT``, advances its generation and marks its tag owed; a
  response whose tag is owed is a stale one: ignored, counted, the tag no longer owed.

`functional_check` is the one-line specification (isolation, bounds, backing value) that the
scoreboards use independently of this model.
"""

import collections
import dataclasses

from hw.packet import ErrorCode
from hw.switch.al_tlb import (DEFAULT_TIMEOUT, INDEX_BITS, MAX_ROWS, TlbCounter, backing_tag_fields,
                              tlb_key_fields)

from verif.models.cam import INSERT, INVALIDATE, CamCycleModel

__all__ = ["AlTlbModel", "TlbInputs", "TlbOutputs", "Req", "functional_check", "SET", "FLUSH"]

SET = 0
FLUSH = 1
NONE = ErrorCode.NONE.value
ISOLATION = ErrorCode.ISOLATION.value
OUT_OF_BOUNDS = ErrorCode.OUT_OF_BOUNDS.value
TIMEOUT = ErrorCode.TIMEOUT.value


@dataclasses.dataclass(frozen=True)
class Req:
    group: int
    index: int
    dst: int
    src: int
    tag: int


@dataclasses.dataclass
class TlbInputs:
    req_valid: int = 0
    req: Req | None = None
    resp_ready: int = 0
    mem_req_ready: int = 0
    mem_resp_valid: int = 0
    mem_resp: tuple | None = None       # (addr, code, tag)
    cfg_valid: int = 0
    cfg: tuple | None = None            # (op, group, mask, rows)


@dataclasses.dataclass
class TlbOutputs:
    req_ready: int
    resp_valid: int
    resp: tuple | None                  # (addr, code, tag) when valid
    mem_req_valid: int
    mem_req: tuple | None               # (group, index, dst, src, tag) when valid
    mem_resp_ready: int
    cfg_ready: int
    counters: list


@dataclasses.dataclass
class _Mshr:
    busy: bool = False
    filled: bool = False
    primary: bool = False
    flushed: bool = False
    key: int = 0
    tag: int = 0
    addr: int = 0
    code: int = 0
    age: int = 0          # cycles the primary's read has waited


def functional_check(groups_cfg: dict, ports: int, n_groups: int, r: Req) -> int:
    """The error code the contract requires for request ``r`` under group config
    ``{group: (mask, rows)}`` (NONE when the translation must be looked up)."""
    if r.group >= n_groups or r.src >= ports or r.dst >= ports:
        return ISOLATION
    mask, rows = groups_cfg.get(r.group, (0, 0))
    if mask == 0 or not (mask >> r.src) & 1 or not (mask >> r.dst) & 1:
        return ISOLATION
    if r.index >= rows:
        return OUT_OF_BOUNDS
    return NONE


class AlTlbModel:
    def __init__(self, *, ports=8, groups=16, entries=1024, mshrs=32, resp_depth=8, timeout=DEFAULT_TIMEOUT):
        self.ports, self.groups, self.entries = ports, groups, entries
        self.mshrs, self.resp_depth, self.timeout = mshrs, resp_depth, timeout
        self.ib, self.gen_bits = backing_tag_fields(mshrs)
        self.gen = [0] * mshrs               # per-MSHR generation (advanced by a timeout)
        self.owed = set()                    # tags of timed-out reads whose response is still owed
        self.db, self.gb, self.kw = tlb_key_fields(ports, groups)
        self.group_shift = INDEX_BITS + self.db
        self.group_field = ((1 << self.gb) - 1) << self.group_shift
        self.cam = CamCycleModel(entries, self.kw, 48)
        self.gtab = {}                       # group -> (mask, rows)
        self.p1 = None                       # dict of the item in stage B
        self.p2 = None                       # dict of the item in stage C
        self.mshr = [_Mshr() for _ in range(mshrs)]
        self.out = collections.deque()
        self.recirc = collections.deque()
        self.memq = collections.deque()
        self.counters = [0] * len(TlbCounter)
        self.pending = {}                    # this cycle's counter events: counted at the end of the next
        self.pending_resp = [{}, {}]         # BAD/STALE_RESPONSES: a cycle later still (looked up from registers)
        self.cycle = 0

    def key(self, r: Req) -> int:
        return (r.index | ((r.dst & ((1 << self.db) - 1)) << INDEX_BITS)
                | ((r.group & ((1 << self.gb) - 1)) << self.group_shift))

    def _out_ok(self) -> bool:
        return len(self.out) + (self.p1 is not None) + (self.p2 is not None) + 1 <= self.resp_depth

    def _replay_idx(self):
        for j, e in enumerate(self.mshr):
            if e.busy and e.filled:
                return j
        return None

    def outputs(self, cfg_valid: int = 0) -> TlbOutputs:
        ready = int(self._out_ok() and self._replay_idx() is None and not self.recirc)
        return TlbOutputs(
            req_ready=ready,
            resp_valid=int(bool(self.out)), resp=self.out[0] if self.out else None,
            mem_req_valid=int(bool(self.memq)), mem_req=self.memq[0] if self.memq else None,
            mem_resp_ready=int(not cfg_valid), cfg_ready=1, counters=list(self.counters))

    def step(self, i: TlbInputs) -> TlbOutputs:
        outs = self.outputs(i.cfg_valid)
        out_len, memq_len = len(self.out), len(self.memq)
        inc = collections.Counter()
        inc_resp = collections.Counter()
        N = self.mshrs
        gmask = (1 << self.gb) - 1

        # -- backing response (fill)
        fill = bool(i.mem_resp_valid and not i.cfg_valid)
        fill_ok, fill_key, fill_flushed, f_addr, f_code, fid = False, None, False, 0, 0, None
        late = False
        if fill:
            f_addr, f_code, rtag = i.mem_resp
            j, g = rtag & ((1 << self.ib) - 1), rtag >> self.ib
            e = self.mshr[j] if j < N else None
            if e is not None and e.busy and not e.filled and e.primary and self.gen[j] == g:
                fill_ok, fill_key, fill_flushed, fid = True, e.key, e.flushed, j
            elif rtag in self.owed:
                late = True
                inc_resp[TlbCounter.STALE_RESPONSES] += 1
            else:
                inc_resp[TlbCounter.BAD_RESPONSES] += 1

        # -- timeouts (at most one per cycle: primaries start in distinct cycles)
        tmo_idx = next((j for j, e in enumerate(self.mshr) if e.busy and not e.filled and e.primary
                        and e.age >= self.timeout and j != fid), None)
        tmo_key = self.mshr[tmo_idx].key if tmo_idx is not None else None
        if tmo_idx is not None:
            inc[TlbCounter.READ_TIMEOUTS] += 1

        # -- stage A
        replay_idx = self._replay_idx()
        out_ok = self._out_ok()
        take_replay = out_ok and replay_idx is not None
        take_recirc = out_ok and replay_idx is None and bool(self.recirc)
        take_new = out_ok and replay_idx is None and not self.recirc and bool(i.req_valid)
        issue = None
        if take_recirc:
            issue = self.recirc[0]
        elif take_new:
            issue = i.req
        pre_err = issue is not None and (issue.group >= self.groups or issue.src >= self.ports or
                                         issue.dst >= self.ports)

        # -- configuration and the CAM write port
        cfg_legal = flush = False
        cam_write = None
        if i.cfg_valid:
            op, cgroup, cmask, crows = i.cfg
            cfg_legal = cgroup < self.groups and (op == FLUSH or ((cmask >> self.ports) == 0
                                                                  and crows <= MAX_ROWS))
            flush = cfg_legal
            if not cfg_legal:
                inc[TlbCounter.CFG_ERRORS] += 1
            else:
                cam_write = (INVALIDATE, (cgroup & gmask) << self.group_shift, self.group_field, f_addr)
        insert = fill_ok and f_code == NONE and not fill_flushed
        if insert:
            inc[TlbCounter.FILLS] += 1
            cam_write = (INSERT, fill_key, self.group_field, f_addr)
        lookup = self.key(issue) if (issue is not None and not pre_err) else None
        cam_out = self.cam.step(lookup, cam_write)

        # -- stage C
        push = None
        alloc = None          # (index, filled, primary)
        p2 = self.p2
        if p2 is not None:
            if p2["replay"]:
                push = (p2["addr"], p2["code"], p2["req"].tag)
                inc[TlbCounter.REPLAYS] += 1
            elif p2["err"] != NONE:
                push = (0, p2["err"], p2["req"].tag)
            elif cam_out.result_hit:
                push = (cam_out.result_value, NONE, p2["req"].tag)
                inc[TlbCounter.HITS] += 1
            else:
                k = self.key(p2["req"])
                free = [j for j in range(N) if not self.mshr[j].busy]
                same_fill = fill_ok and fill_key == k
                same_tmo = tmo_idx is not None and tmo_key == k
                pend = any(e.busy and not e.filled and e.key == k for e in self.mshr)
                primary = not same_fill and not same_tmo and not pend
                if not free or (primary and memq_len >= N):
                    self.recirc.append(p2["req"])
                    inc[TlbCounter.RECIRCULATED] += 1
                else:
                    j = free[0]
                    alloc = (j, same_fill, same_tmo, primary, k, p2["req"])
                    if primary:
                        r = p2["req"]
                        tag = (self.gen[j] << self.ib) | j
                        self.memq.append((r.group, r.index, r.dst, r.src, tag))
                        self.owed.discard(tag)      # a wrapped generation gives the old response up
                        inc[TlbCounter.MISSES] += 1
                    else:
                        inc[TlbCounter.COALESCED] += 1
        if push is not None:
            code = push[1]
            name = {ISOLATION: "ISOLATION", OUT_OF_BOUNDS: "OUT_OF_BOUNDS",
                    ErrorCode.TLB_FAULT.value: "TLB_FAULT", ErrorCode.BUFFER_FULL.value: "BUFFER_FULL",
                    TIMEOUT: "TIMEOUT"}.get(code)
            if name:
                inc[TlbCounter[name]] += 1
            elif code != NONE:
                inc[TlbCounter.OTHER_ERRORS] += 1

        # -- stage B: check the item in P1 against the group data it read
        new_p2 = None
        if self.p1 is not None:
            new_p2 = dict(self.p1)
            if not self.p1["replay"]:
                mask, rows = self.p1["gdata"]
                r = self.p1["req"]
                if (self.p1["pre_err"] or mask == 0 or not (mask >> r.src) & 1 or not (mask >> r.dst) & 1):
                    new_p2["err"] = ISOLATION
                elif r.index >= rows:
                    new_p2["err"] = OUT_OF_BOUNDS
                else:
                    new_p2["err"] = NONE
            else:
                new_p2["err"] = NONE

        # -- end of cycle: group table, MSHRs, FIFOs, pipeline, counters
        if flush and i.cfg[0] == SET:
            self.gtab[i.cfg[1]] = (i.cfg[2], i.cfg[3])
        new_p1 = None
        if take_replay:
            e = self.mshr[replay_idx]
            new_p1 = {"replay": True, "req": Req(0, 0, 0, 0, e.tag), "addr": e.addr, "code": e.code}
        elif issue is not None:
            gdata = self.gtab.get(issue.group & gmask, (0, 0))     # transparent read: sees this cycle's write
            new_p1 = {"replay": False, "req": issue, "pre_err": pre_err, "gdata": gdata}

        if late:
            self.owed.discard(i.mem_resp[2])
        if tmo_idx is not None:
            self.owed.add((self.gen[tmo_idx] << self.ib) | tmo_idx)
            self.gen[tmo_idx] = (self.gen[tmo_idx] + 1) % (1 << self.gen_bits)
        for j, e in enumerate(self.mshr):
            if alloc is not None and alloc[0] == j:
                _, by_fill, by_tmo, primary, k, r = alloc
                self.mshr[j] = _Mshr(busy=True, filled=by_fill or by_tmo, primary=primary,
                                     flushed=flush and (r.group & gmask) == (i.cfg[1] & gmask),
                                     key=k, tag=r.tag, addr=f_addr if by_fill else 0,
                                     code=f_code if by_fill else (TIMEOUT if by_tmo else 0))
                continue
            waited = e.busy and not e.filled and e.primary
            if take_replay and replay_idx == j:
                e.busy = False
            elif fill_ok and e.busy and not e.filled and e.key == fill_key:
                e.filled, e.addr, e.code = True, f_addr, f_code
            elif tmo_idx is not None and e.busy and not e.filled and e.key == tmo_key:
                e.filled, e.addr, e.code = True, 0, TIMEOUT
            if waited:
                e.age += 1
            if flush and e.busy and (e.key >> self.group_shift) == (i.cfg[1] & gmask):
                e.flushed = True

        if push is not None:
            assert out_len < self.resp_depth, "model: response FIFO overflow (admission bug)"
        if i.resp_ready and out_len:
            self.out.popleft()
        if push is not None:
            self.out.append(push)
        if i.mem_req_ready and memq_len:
            self.memq.popleft()
        if take_recirc:
            self.recirc.popleft()
        self.p1, self.p2 = new_p1, new_p2
        # The RTL registers each counter event and adds it a cycle later.
        for c, n in [*self.pending.items(), *self.pending_resp[0].items()]:
            self.counters[c] = (self.counters[c] + n) & 0xFFFFFFFF
        self.pending = dict(inc)
        self.pending_resp = [self.pending_resp[1], dict(inc_resp)]
        self.cycle += 1
        return outs
