"""The joint weight search of ``afp tune``: coordinate descent with exact line searches (MERT).

Och's minimum error rate training (2003), as Moses' MERT and SRILM's ``nbest-optimize`` do it for
n-best lists. Every weight setting scores each hypothesis of an utterance linearly in each single
weight: along coordinate ``k`` from point ``x``, hypothesis ``h`` scores ``a_h + t g_h``. The
hypothesis chosen as ``t`` moves is the upper envelope of these lines, so an utterance's word
errors are a step function of ``t``, and the corpus's errors their sum: every step is found
exactly (no grid), and the best interval's midpoint is taken. The current point is always one of
the candidates, so a line search never makes the errors worse: coordinate descent from the first
pass's own point can only end at or below the first pass's errors.

Weights (coordinates) are named like the options: ``lm_weight``, ``old_lm_weight``,
``word_penalty``, ``unk_penalty``, and ``score:NAME`` for the weight of a named first-pass score
(``score:decoder``). Each has a range (:data:`RANGES`); a chosen weight at a range edge that is not
a natural bound (0 for a weight of a log-probability) is reported, since the best value may lie
beyond it.

Only tree-shaped inputs (n-best lists) have their hypotheses in a table; a tuner holding other
lattices searches each candidate of a line search with the lattice engine instead, on
:data:`LATTICE_CANDIDATES` evenly spaced values (slower, and a grid, not exact).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import torch

from lattices.scored import POINT_WEIGHTS, component_vector, point_weights

#: the search range of each coordinate (score weights: ``score:*``); natural bounds in NATURAL
RANGES = {"lm_weight": (0.0, 3.0), "old_lm_weight": (0.0, 3.0), "word_penalty": (-10.0, 10.0),
          "unk_penalty": (-30.0, 0.0), "score": (0.0, 3.0)}
NATURAL = {"lm_weight": {0.0}, "old_lm_weight": {0.0}, "unk_penalty": {0.0}, "score": {0.0}}
LATTICE_CANDIDATES = 25
BASE = POINT_WEIGHTS


def range_of(name: str) -> tuple[float, float]:
    return RANGES["score" if name.startswith("score:") else name]


@dataclass
class Table:
    """One utterance as the search sees it: ``parts`` float64 ``(H, C)`` components of its
    hypotheses (recogniser's order), ``errors`` int ``(H,)`` word errors of each (the objective),
    ``acoustic_scale`` the default weight of a score named ``acoustic``."""

    parts: numpy.ndarray
    errors: numpy.ndarray
    acoustic_scale: float


@dataclass
class Problem:
    """What is searched: the utterances' tables, the component ``names``, the weights of named
    scores that are not searched (``defaults``), and for inputs that are not tables an
    ``evaluate(points) -> errors`` callback (the lattice engine)."""

    tables: list[Table]
    names: tuple[str, ...]
    defaults: dict[str, float]
    evaluate_other: Callable[[list[dict[str, float]]], numpy.ndarray] | None = None
    evaluations: int = field(default=0)

    def vector(self, point: dict[str, float], acoustic_scale: float) -> numpy.ndarray:
        return component_vector(self.names, point_weights(point, self.defaults), acoustic_scale).numpy()

    def errors(self, point: dict[str, float]) -> int:
        """Total word errors at ``point`` (the first hypothesis of equal scores wins, as in rescoring)."""
        self.evaluations += 1
        total = 0
        for table in self.tables:
            scores = table.parts @ self.vector(point, table.acoustic_scale)
            total += int(table.errors[int(numpy.argmax(scores))])  # argmax: the first of equals
        if self.evaluate_other is not None:
            total += int(self.evaluate_other([point])[0])
        return total


@dataclass(frozen=True)
class Result:
    """A search's end: the point, its errors, where it started and the line searches run."""

    point: dict[str, float]
    errors: int
    start_errors: int
    line_searches: int
    at_edge: list[str]


def _steps(table: Table, a: numpy.ndarray, g: numpy.ndarray, lo: float, hi: float
           ) -> tuple[list[float], list[int]]:
    """The errors of the hypothesis that wins along ``a + t g`` for ``t`` in ``[lo, hi]``:
    breakpoints ``b_1 < ... < b_m`` inside and the errors ``e_0 .. e_m`` of the intervals
    between them (ties: the first hypothesis, as rescoring breaks them).

    The winners are the upper envelope of the lines ``a_i + t g_i`` (Och's MERT line search):
    sorted by slope, a line that is never strictly above the others is dropped, in ``O(H log H)``
    for ``H`` hypotheses (a 500-best list's line search was an ``(H^2, H)`` array before)."""
    envelope, starts = _upper_envelope(a, g)
    inside = [i for i in range(1, len(starts)) if lo < starts[i] < hi]
    first = max([0] + [i for i in range(1, len(starts)) if starts[i] <= lo])
    winners = [envelope[first]] + [envelope[i] for i in inside]
    cuts = [float(starts[i]) for i in inside]
    values = table.errors[numpy.asarray(winners)].tolist()
    keep = [i for i in range(1, len(values)) if values[i] != values[i - 1]]
    return [cuts[i - 1] for i in keep], [values[0], *(values[i] for i in keep)]


def _upper_envelope(a: numpy.ndarray, g: numpy.ndarray) -> tuple[list[int], list[float]]:
    """The lines ``a_i + t g_i`` (float64 ``(H,)`` each) that are the maximum for some ``t``, in
    order of ``t``, and where each starts to be (``-inf`` for the first): line ``envelope[k]``
    wins on ``(starts[k], starts[k + 1])``. Of equal lines the first (lowest index) is kept."""
    order = numpy.lexsort((numpy.arange(len(a)), -a, g))  # slope up; among equal slopes the highest, then first
    envelope: list[int] = []
    starts: list[float] = []
    previous_slope = None
    for i in order.tolist():
        slope, height = float(g[i]), float(a[i])
        if slope == previous_slope:
            continue  # below (or equal to and after) the line of this slope already seen
        previous_slope = slope
        while envelope:
            j = envelope[-1]
            at = (float(a[j]) - height) / (slope - float(g[j]))  # where line i overtakes line j
            if at <= starts[-1]:
                envelope.pop()
                starts.pop()
            else:
                break
        starts.append(at if envelope else -math.inf)
        envelope.append(i)
    return envelope, starts


def simplest(left: float, right: float) -> float:
    """The number with the fewest decimals strictly inside ``(left, right)``, the one nearest to
    the middle among equals (the midpoint when none has 6 or fewer): recognisers' weights are
    round numbers, so this recovers them."""
    middle = (left + right) / 2
    for decimals in range(7):
        step = 10.0 ** -decimals
        low, high = math.floor(left / step) + 1, math.ceil(right / step) - 1
        if low <= high:
            k = min(max(round(middle / step), low), high)
            return round(k * step, decimals)
    return middle


def line_search(problem: Problem, point: dict[str, float], name: str, pick: str = "midpoint") -> tuple[float, int]:
    """The best value of coordinate ``name`` from ``point`` (others fixed) and its total errors.

    Among equal-error intervals the one holding the current value wins (no move), else the one
    nearest to it; inside the chosen interval its midpoint (``pick="midpoint"``: the most margin)
    or its :func:`simplest` number (``pick="simplest"``), unless it holds the current value."""
    lo, hi = range_of(name)
    here = point[name]
    if problem.evaluate_other is not None:
        return _grid_search(problem, point, name, lo, hi)
    unit = {**point, name: here + 1.0}
    events: list[tuple[float, int]] = []
    base = 0
    for table in problem.tables:
        v = problem.vector(point, table.acoustic_scale)
        a = table.parts @ v
        g = table.parts @ (problem.vector(unit, table.acoustic_scale) - v)
        cuts, values = _steps(table, a, g, lo - here, hi - here)
        base += values[0]
        events.extend((cut, values[i + 1] - values[i]) for i, cut in enumerate(cuts))
    problem.evaluations += 1
    events.sort()
    bounds = [lo - here, *[t for t, _ in events], hi - here]
    totals = [base]
    for _, delta in events:
        totals.append(totals[-1] + delta)
    best = min(totals)
    candidates = [i for i, total in enumerate(totals) if total == best]

    def distance(i: int) -> float:
        left, right = bounds[i], bounds[i + 1]
        return 0.0 if left <= 0.0 <= right else min(abs(left), abs(right))

    chosen = min(candidates, key=distance)
    left, right = bounds[chosen], bounds[chosen + 1]
    if left <= 0.0 <= right:
        return here, best
    return (simplest(here + left, here + right) if pick == "simplest" else here + (left + right) / 2), best


def _grid_search(problem: Problem, point: dict[str, float], name: str, lo: float, hi: float) -> tuple[float, int]:
    values = sorted({point[name], *numpy.linspace(lo, hi, LATTICE_CANDIDATES).tolist()})
    scored = [(problem.errors({**point, name: v}), abs(v - point[name]), v) for v in values]
    errors, _, value = min(scored)
    return value, errors


def coordinate_descent(problem: Problem, start: dict[str, float], names: Sequence[str], rounds: int = 8,
                       on_step: Callable[[], None] | None = None, pick: str = "midpoint") -> Result:
    """Line searches over ``names`` in turn from ``start`` until a round changes nothing (or
    ``rounds`` rounds): errors never go up."""
    point = dict(start)
    errors = start_errors = problem.errors(point)
    searches = 0
    for _ in range(rounds):
        moved = False
        for name in names:
            value, found = line_search(problem, point, name, pick)
            searches += 1
            if on_step is not None:
                on_step()
            if found < errors:
                point[name], errors, moved = value, found, True
        if not moved:
            break
    return Result(point=point, errors=errors, start_errors=start_errors, line_searches=searches,
                  at_edge=edges(point, names))


def edges(point: dict[str, float], names: Sequence[str]) -> list[str]:
    """The coordinates at an edge of their range that is not a natural bound."""
    out = []
    for name in names:
        lo, hi = range_of(name)
        natural = NATURAL.get("score" if name.startswith("score:") else name, set())
        value = point[name]
        for edge in (lo, hi):
            if edge not in natural and math.isclose(value, edge, abs_tol=1e-6 * max(1.0, abs(edge))):
                out.append(name)
    return out


def search(problem: Problem, start: dict[str, float], names: Sequence[str], restarts: int = 3, seed: int = 0,
           on_step: Callable[[], None] | None = None, pick: str = "midpoint") -> Result:
    """Coordinate descent from ``start`` and from ``restarts`` random points (seeded; within the
    ranges, the other coordinates as in ``start``); the best end point, ties to the first. The
    result's ``start_errors`` are ``start``'s."""
    best = coordinate_descent(problem, start, names, on_step=on_step, pick=pick)
    rng = random.Random(seed)
    searches = best.line_searches
    for _ in range(restarts):
        other = dict(start)
        for name in names:
            lo, hi = range_of(name)
            other[name] = rng.uniform(lo, hi)
        found = coordinate_descent(problem, other, names, on_step=on_step, pick=pick)
        searches += found.line_searches
        if found.errors < best.errors:
            best = found
    return Result(point=best.point, errors=best.errors, start_errors=problem.errors(start), line_searches=searches,
                  at_edge=best.at_edge)


def tables_from(utterances: Sequence[Any], objective: Callable[[Any], numpy.ndarray]) -> list[Table]:
    """:class:`Table` s of a tuner's table utterances (``hyp_parts``: a tensor ``(H, C)``,
    ``acoustic_scale``), with ``objective(utterance)`` as their errors."""
    return [Table(parts=torch.as_tensor(u.hyp_parts).numpy(), errors=objective(u), acoustic_scale=u.acoustic_scale)
            for u in utterances]
