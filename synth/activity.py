"""Switching activity of RTL signals from a VCD (via vcdvcd), inside a measurement window.

:func:`vcd_activity` streams the VCD once and returns, per signal name (the hierarchical name below the
top scope, as yosys names the flattened nets: ``in0.q0_count``), per bit: the toggle count inside the
window ``(t0, t1]`` and the fraction of the window the bit was 1 (its static probability). Values ``x``
and ``z`` count as 0. Changes at exactly ``t0`` set the starting value (the dump may switch on there).
"""

import collections
import re

import numpy as np

__all__ = ["SignalActivity", "vcd_activity"]


class SignalActivity:
    __slots__ = ("width", "toggles", "ones", "changes")

    def __init__(self, width, toggles, ones, changes=0):
        self.width = width
        self.changes = changes      # value-change events of the whole signal in the window
        self.toggles = toggles      # np.ndarray (width,), bit 0 first: transitions in the window
        self.ones = ones            # np.ndarray (width,): fraction of the window at 1

    def __repr__(self):
        return f"SignalActivity(width={self.width}, toggles={self.toggles.sum()}, p1={self.ones.mean():.3f})"


def _bits_matrix(values: list[int], width: int) -> np.ndarray:
    """(len(values), width) 0/1 matrix, bit 0 first."""
    out = np.zeros((len(values), width), dtype=np.float64)
    for c in range(0, width, 62):
        w = min(62, width - c)
        chunk = np.array([(v >> c) & ((1 << w) - 1) for v in values], dtype=np.int64)
        out[:, c:c + w] = (chunk[:, None] >> np.arange(w)) & 1
    return out


def _parse_value(v: str) -> int:
    v = v.strip()
    if v[:1] in "bB":
        v = v[1:]
    v = re.sub(r"[xXzZuU-]", "0", v)
    try:
        return int(v, 2) if v else 0
    except ValueError:
        return 0


def vcd_activity(path, t0: float, t1: float, top: str | None = None) -> tuple[dict[str, SignalActivity], float]:
    """Per-signal activity in ``(t0, t1]`` (VCD time units). Returns (activities, window length)."""
    from vcdvcd import VCDVCD, StreamParserCallbacks

    if not t1 > t0:
        raise ValueError(f"empty measurement window ({t0}, {t1}]")
    state = {}          # id -> [last value, last time]
    segments = collections.defaultdict(list)   # id -> [(duration, value)]
    toggles = {}        # id -> dict bit -> count (sparse)
    widths = {}

    class Callbacks(StreamParserCallbacks):
        def enddefinitions(self, vcd, signals, cur_sig_vals):
            for ident, sig in vcd.data.items():
                widths[ident] = int(sig.size)

        def value(self, vcd, time, value, identifier_code, cur_sig_vals):
            new = _parse_value(value)
            st = state.get(identifier_code)
            if time <= t0 or st is None:
                state[identifier_code] = [new, max(time, t0)]
                return
            if time > t1:
                return
            old, last = st
            if new != old:
                diff = old ^ new
                tg = toggles.setdefault(identifier_code, collections.Counter())
                while diff:
                    low = diff & -diff
                    tg[low.bit_length() - 1] += 1
                    diff ^= low
                segments[identifier_code].append((time - last, old))
                st[0], st[1] = new, time

    vcd = VCDVCD(str(path), callbacks=Callbacks(), store_tvs=False)
    length = t1 - t0
    out = {}
    for ref, ident in vcd.references_to_ids.items():
        if ident not in widths:
            continue
        w = widths[ident]
        name = re.sub(r"\s*\[[^\]]*\]$", "", ref)
        if top and name.startswith(top + "."):
            name = name[len(top) + 1:]
        name = name.replace("\\", "")
        if name in out:
            continue
        segs = list(segments.get(ident, []))
        st = state.get(ident)
        if st is not None:
            segs.append((t1 - st[1], st[0]))
        if segs:
            durs = np.array([d for d, _ in segs], dtype=np.float64)
            ones = (_bits_matrix([v for _, v in segs], w) * durs[:, None]).sum(axis=0) / length
        else:
            ones = np.zeros(w)
        tg = np.zeros(w)
        for b, n in toggles.get(ident, {}).items():
            if b < w:
                tg[b] = n
        out[name] = SignalActivity(w, tg, np.clip(ones, 0.0, 1.0), len(segments.get(ident, [])))
    return out, length
