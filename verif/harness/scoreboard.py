"""Scoreboard: compare what a DUT produced with what a reference model expects.

Expectations and observations are grouped by a key (an output port, a (source, destination) pair, ...).
Within a key they are matched in order (``ordered=True``) or by equality in any order. The first mismatch
raises :class:`ScoreboardError` at once, naming the key, the position in that stream, the cycle, the
expected and observed items with the fields that differ, and the last items that did match, which is
usually what one needs to find the bug. :meth:`Scoreboard.finish` fails if anything expected never came.
"""

import collections
import dataclasses

__all__ = ["Scoreboard", "ScoreboardError", "describe_diff"]


class ScoreboardError(AssertionError):
    pass


def describe_diff(expected, observed) -> str:
    """Field-by-field difference of two dataclass-like items (falls back to both reprs)."""
    if dataclasses.is_dataclass(expected) and type(expected) is type(observed):
        diffs = []
        for f in dataclasses.fields(expected):
            a, b = getattr(expected, f.name), getattr(observed, f.name)
            if a != b:
                if dataclasses.is_dataclass(a) and type(a) is type(b):
                    diffs.append(f"{f.name}: {{{describe_diff(a, b)}}}")
                elif isinstance(a, list) and isinstance(b, list):
                    if len(a) != len(b):
                        diffs.append(f"{f.name}: length {len(a)} expected, {len(b)} observed")
                    else:
                        k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                        diffs.append(f"{f.name}[{k}]: expected {_short(a[k])}, observed {_short(b[k])}")
                else:
                    diffs.append(f"{f.name}: expected {_short(a)}, observed {_short(b)}")
        return "; ".join(diffs)
    return f"expected {expected!r}, observed {observed!r}"


def _short(v):
    return f"{v:#x}" if isinstance(v, int) and not isinstance(v, bool) and v > 9 else repr(v)


class Scoreboard:
    def __init__(self, name: str, *, ordered: bool = True, history: int = 3):
        self.name = name
        self.ordered = ordered
        self.history = history
        self.expected: dict = collections.defaultdict(collections.deque)
        self.matched: dict = collections.defaultdict(lambda: collections.deque(maxlen=history))
        self.count: dict = collections.Counter()
        self.total_expected = 0

    def expect(self, key, item) -> None:
        self.expected[key].append(item)
        self.total_expected += 1

    def observe(self, key, item, *, cycle=None) -> None:
        queue = self.expected.get(key)
        where = f"{self.name}[{key!r}] item #{self.count[key]}" + (f" at cycle {cycle}" if cycle is not None
                                                                   else "")
        if not queue:
            raise ScoreboardError(f"{where}: unexpected {item!r} (nothing more was expected here)"
                                  f"{self._context(key)}")
        if self.ordered:
            exp = queue[0]
            if exp != item:
                raise ScoreboardError(f"{where}: mismatch: {describe_diff(exp, item)}\n  expected {exp!r}\n"
                                      f"  observed {item!r}{self._context(key)}")
            queue.popleft()
        else:
            try:
                queue.remove(item)
            except ValueError:
                raise ScoreboardError(f"{where}: {item!r} matches none of the {len(queue)} outstanding "
                                      f"items, e.g. {queue[0]!r}{self._context(key)}") from None
        self.count[key] += 1
        self.matched[key].append(item)

    def _context(self, key) -> str:
        if not self.matched[key]:
            return "\n  (no earlier item matched on this key)"
        return "\n  last matched: " + "; ".join(repr(x) for x in self.matched[key])

    @property
    def outstanding(self) -> int:
        return sum(len(q) for q in self.expected.values())

    @property
    def observed(self) -> int:
        return sum(self.count.values())

    def finish(self) -> None:
        """Fail if anything expected was never observed."""
        missing = {k: q for k, q in self.expected.items() if q}
        if missing:
            lines = [f"  {k!r}: {len(q)} missing, first {q[0]!r}" for k, q in list(missing.items())[:8]]
            raise ScoreboardError(f"{self.name}: {self.outstanding} expected item(s) never observed "
                                  f"({self.observed} matched):\n" + "\n".join(lines))
