"""When two answers are the same answer: the one comparison that every "same result" check uses.

Two doors (``afp rescore``, ``POST /v1/rescore``, a container and its host, one process and a
corpus job on a Ray cluster...) give the same answer when every word, key, count and n-best
order is equal and every score is within :data:`SCORE_TOLERANCE`. Scores are float32 sums
computed by different kernels, thread counts and batch sizes, so they differ in the seventh
digit from one process to another (issue 38: a container's server against the host's one-thread
CLI on an AMD EPYC differed by 1.2e-6); equality to 1e-9 is not the project's bar.

    from afp.compare import compare_answers

    found = compare_answers(expected, got, ignore={"seconds", "timing"})
    if not found.same:
        print(found.difference)     # "[1].best.lm_logprob: -10.65 != -10.66 (off by 0.01 > 0.0001)"
    print(found.largest)            # the largest score difference seen, and where
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["SCORE_TOLERANCE", "Comparison", "Tolerance", "compare_answers"]


@dataclass(frozen=True)
class Tolerance:
    """Two scores ``a``, ``b`` are equal when ``|a - b| <= max(absolute, relative * max(|a|, |b|))``:
    ``absolute`` for scores of everyday size (a lattice path's log-probability), ``relative`` for
    long sums (a corpus's total log-probability, a perplexity in the thousands)."""

    absolute: float = 1e-4
    relative: float = 1e-6

    def bound(self, a: float, b: float) -> float:
        """The largest difference allowed between ``a`` and ``b``."""
        return max(self.absolute, self.relative * max(abs(a), abs(b)))

    def equal(self, a: float, b: float) -> bool:
        """``a`` and ``b`` within the bound (two infinities of one sign and two NaNs are equal)."""
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= self.bound(a, b)


#: the project's "same score": words identical, scores within 1e-4 (and 1e-6 relative for long sums)
SCORE_TOLERANCE = Tolerance()


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_answers` found: ``difference`` names the first place the answers differ
    (None: the same answer), ``largest`` is the largest score difference seen (0.0 when none) and
    ``largest_at`` where it is, so a drift shows before it fails."""

    difference: str | None
    largest: float = 0.0
    largest_at: str = ""

    @property
    def same(self) -> bool:
        return self.difference is None

    def describe(self) -> str:
        """One line: the difference, or the largest score difference within the tolerance."""
        head = self.difference or "the same answer"
        return f"{head}; largest score difference {self.largest:.3g}" + (f" at {self.largest_at}"
                                                                          if self.largest_at else "")


def compare_answers(expected: Any, got: Any, tolerance: Tolerance = SCORE_TOLERANCE,
                    ignore: Collection[str] = ()) -> Comparison:
    """Compare two JSON-like answers (dicts, lists, strings, numbers): lists item by item in order
    (n-best order counts), dicts on the keys both have except ``ignore`` (timings), floats within
    ``tolerance``, everything else (words, keys, counts, booleans) exactly."""
    walk = _Walk(tolerance, frozenset(ignore))
    walk.compare(expected, got, "")
    return Comparison(walk.difference, walk.largest, walk.largest_at)


class _Walk:
    """One comparison's state: the first difference, the largest score difference so far."""

    def __init__(self, tolerance: Tolerance, ignore: frozenset[str]) -> None:
        self.tolerance, self.ignore = tolerance, ignore
        self.difference: str | None = None
        self.largest, self.largest_at = 0.0, ""

    def compare(self, a: Any, b: Any, where: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted((a.keys() & b.keys()) - self.ignore, key=str):
                self.compare(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                self._differs(f"{where or 'answer'}: {len(a)} items != {len(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                self.compare(x, y, f"{where}[{i}]")
        elif _is_number(a) and _is_number(b) and (isinstance(a, float) or isinstance(b, float)):
            x, y = float(a), float(b)
            if math.isfinite(x) and math.isfinite(y) and abs(x - y) > self.largest:
                self.largest, self.largest_at = abs(x - y), where
            if not self.tolerance.equal(x, y):
                off = f" (off by {abs(x - y):.3g} > {self.tolerance.bound(x, y):.3g})" if math.isfinite(x - y) else ""
                self._differs(f"{where}: {a!r} != {b!r}{off}")
        elif a != b or type(a) is bool and type(b) is not bool or type(b) is bool and type(a) is not bool:
            self._differs(f"{where}: {a!r} != {b!r}")

    def _differs(self, text: str) -> None:
        if self.difference is None:
            self.difference = text


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
