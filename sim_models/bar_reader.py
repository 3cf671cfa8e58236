"""Read bar heights off a bar-chart image: how the validation's figure-only published values are obtained.

A published figure that gives its values only as bars (COMET's end-to-end latencies,
:mod:`published_comet`) is read from its pixels, not by eye. :func:`find_frames` finds the axes frames (long
dark horizontal and vertical lines); :func:`tick_rows` finds the y-axis tick marks left of a frame;
:func:`read_panel` finds every run of columns filled with one of the given bar colours and returns, per bar,
its value at its top and, if an overlay (a hatched or translucent bar drawn over it) covers its base, the
value at the overlay's top. Values come from the tick rows and the tick values the caller reads off the
labels (no OCR), by a least-squares line. Resolution: one pixel, reported as ``units_per_px``.
"""

import dataclasses

import numpy as np

__all__ = ["Bar", "load_rgb", "find_frames", "tick_rows", "read_panel"]

DARK = 300          # sum of R, G, B below which a pixel is a line (black or dark grey)


@dataclasses.dataclass(frozen=True)
class Bar:
    name: str            # the colour's name
    x0: int              # first and last pixel column of the bar
    x1: int
    value: float         # at the bar's top
    overlay: float | None  # at the top of the overlay covering the bar's base (None: no overlay)


def load_rgb(path) -> np.ndarray:
    """The image as an (rows, columns, 3) integer array."""
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")).astype(int)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) inclusive of each run of True in a 1-D mask."""
    d = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1))


def find_frames(img: np.ndarray, min_px: int = 60) -> list[tuple[int, int, int, int]]:
    """Axes frames ``(x0, x1, y0, y1)`` (pixel columns of the left and right spines, rows of the top and
    bottom ones), left to right then top to bottom: pairs of vertical dark lines of at least ``min_px``
    pixels spanning the same rows."""
    dark = img.sum(axis=2) < DARK
    lines, prev = [], []                         # (x, y0, y1) of each vertical line, one per spine
    for x in range(dark.shape[1]):
        cur = [(y0, y1) for y0, y1 in _runs(dark[:, x]) if y1 - y0 + 1 >= min_px]
        for y0, y1 in cur:
            if not any(abs(a - y0) <= 2 and abs(b - y1) <= 2 for a, b in prev):   # not a thick spine's 2nd column
                lines.append((x, int(y0), int(y1)))
        prev = cur
    frames, used = [], set()
    for i, (x, y0, y1) in enumerate(lines):
        if i in used:
            continue
        for j in range(i + 1, len(lines)):
            xj, a, b = lines[j]
            if j not in used and abs(a - y0) <= 2 and abs(b - y1) <= 2 and xj - x >= min_px:
                frames.append((x, xj, y0, y1))
                used.update((i, j))
                break
    if not frames:
        raise ValueError(f"no axes frame found (no two vertical dark lines of >= {min_px} px spanning the same rows)")
    frames.sort(key=lambda f: f[2])
    rows, out = [], []                           # frames whose tops are within a few pixels share a row
    for f in frames:
        if rows and f[2] - rows[-1][0][2] <= 5:
            rows[-1].append(f)
        else:
            rows.append([f])
    for r in rows:
        out += sorted(r, key=lambda f: f[0])
    return out


def tick_rows(img: np.ndarray, frame, length: int = 5) -> list[float]:
    """Rows of the y-axis tick marks: dark runs at least ``length`` pixels long just left of the left spine
    (a two-pixel-thick mark counts once, at its middle), top to bottom."""
    x0, _, y0, y1 = frame
    dark = img[:, max(0, x0 - length - 1):x0 - 1].sum(axis=2) < DARK
    hit = dark.sum(axis=1) >= length - 1
    hit[:max(0, y0 - 3)] = False
    hit[y1 + 4:] = False
    return [(a + b) / 2 for a, b in _runs(hit)]


def _near(px: np.ndarray, rgb, tol: int) -> np.ndarray:
    return np.abs(px - np.asarray(rgb)).max(axis=-1) <= tol


def read_panel(img: np.ndarray, frame, tick_values, colours: dict, tol: int = 3, min_width: int = 4) -> dict:
    """The bars of one panel: ``{"bars": [Bar, ...] (left to right), "units_per_px": float}``.

    ``tick_values`` are the labels of the y ticks found by :func:`tick_rows`, bottom to top; ``colours``
    maps a name to the RGB fill of its bars (``tol``: largest channel difference still counted as the
    fill). A bar's top is the first row of its fill colour (median over its columns); its overlay's top is
    the first row below that which is neither the fill nor a line (hatching), if any lies above the axis."""
    x0, x1, y0, y1 = frame
    rows = tick_rows(img, frame)[::-1]                   # bottom to top, as the values
    if len(rows) != len(tick_values):
        raise ValueError(f"frame {frame}: found {len(rows)} y ticks at rows {rows}, "
                         f"but {len(tick_values)} tick values were given")
    slope, icpt = np.polyfit(np.asarray(rows, float), np.asarray(tick_values, float), 1)   # value per row
    region = img[y0 + 2:y1 - 1, x0 + 2:x1 - 1]
    names = list(colours)
    hits = np.stack([_near(region, colours[n], tol) for n in names])            # (colour, row, column)
    col_name = np.where(hits.any(axis=1).any(axis=0), hits.any(axis=1).argmax(axis=0), -1)
    bars = []
    for a, b in _runs(col_name >= 0):
        for c0, c1 in _bar_spans(col_name[a:b + 1]):
            if c1 - c0 + 1 < min_width:
                continue
            k = col_name[a + c0]
            tops, overlays = [], []
            for c in range(a + c0, a + c1 + 1):
                fill = np.flatnonzero(hits[k, :, c])
                top = fill[0]
                while top > 0 and region[top - 1, c].min() < 255 - tol:   # its anti-aliased edge rows
                    top -= 1
                tops.append(top)
                below = region[fill[0]:, c]
                other = ~_near(below, colours[names[k]], tol) & (below.sum(axis=1) >= DARK)
                idx = np.flatnonzero(other)
                overlays.append(fill[0] + idx[0] if idx.size else None)
            top = float(np.median(tops)) + y0 + 2
            ov = [o for o in overlays if o is not None]
            ovr = float(np.median(ov)) + y0 + 2 if len(ov) > len(overlays) // 2 else None
            bars.append(Bar(names[k], x0 + 2 + a + c0, x0 + 2 + a + c1, float(slope * top + icpt),
                            None if ovr is None else float(slope * ovr + icpt)))
    return {"bars": bars, "units_per_px": float(abs(slope))}


def _bar_spans(names: np.ndarray) -> list[tuple[int, int]]:
    """Runs of equal colour index within a run of coloured columns (adjacent bars of different colours)."""
    cuts = np.flatnonzero(np.diff(names) != 0) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts - 1, [len(names) - 1]])
    return list(zip(starts, ends))
