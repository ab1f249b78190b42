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

Tree-shaped inputs (n-best lists) have their hypotheses in a :class:`Table`. Other lattices are
:class:`LatticeLines`: along a line every path's score is linear too, so the best path's errors
are the same kind of step function, found exactly by the lattice's own upper envelope (lattice
MERT, Macherey et al. 2008) without listing its paths: a table of the paths met so far gives a
candidate envelope, and one Viterbi pass at many points at once (:func:`afp.viterbi.best_paths`)
checks it at each of its breakpoints and inside each segment. Where the lattice's best path
scores above the candidate, that path joins the table and the check is repeated; where it
does not, the envelope is the lattice's own (a convex function that meets a line at both ends of
a segment is that line in between). The tables persist across line searches, restarts and
cross-validation folds, so later searches mostly need a single pass.
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
from afp.viterbi import ArcLines, Graph, best_paths
from lattices.search import Dag

#: the search range of each coordinate (score weights: ``score:*``); natural bounds in NATURAL
RANGES = {"lm_weight": (0.0, 3.0), "old_lm_weight": (0.0, 3.0), "word_penalty": (-10.0, 10.0),
          "unk_penalty": (-30.0, 0.0), "score": (0.0, 3.0)}
NATURAL = {"lm_weight": {0.0}, "old_lm_weight": {0.0}, "unk_penalty": {0.0}, "score": {0.0}}
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
    scores that are not searched (``defaults``), and the utterances that are lattices
    (:class:`LatticeLines`)."""

    tables: list[Table]
    names: tuple[str, ...]
    defaults: dict[str, float]
    lattices: Sequence[LatticeLines] = ()
    evaluations: int = field(default=0)

    def __post_init__(self) -> None:
        self.lattice_set = LatticeSet(self.lattices)

    def vector(self, point: dict[str, float], acoustic_scale: float) -> numpy.ndarray:
        return component_vector(self.names, point_weights(point, self.defaults), acoustic_scale).numpy()

    def errors(self, point: dict[str, float]) -> int:
        """Total word errors at ``point`` (the first hypothesis of equal scores wins, as in rescoring)."""
        self.evaluations += 1
        total = 0
        # one weight vector per acoustic scale (the tables mostly share one), not one per table
        vectors = {scale: self.vector(point, scale) for scale in {table.acoustic_scale for table in self.tables}}
        for table in self.tables:
            scores = table.parts @ vectors[table.acoustic_scale]
            total += int(table.errors[int(numpy.argmax(scores))])  # argmax: the first of equals
        return total + (sum(self.lattice_set.errors(point)) if self.lattices else 0)


@dataclass(frozen=True)
class Result:
    """A search's end: the point, its errors, where it started and the line searches run."""

    point: dict[str, float]
    errors: int
    start_errors: int
    line_searches: int
    at_edge: list[str]


def _steps(errors: numpy.ndarray, a: numpy.ndarray, g: numpy.ndarray, lo: float, hi: float
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
    values = errors[numpy.asarray(winners)].tolist()
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
    unit = {**point, name: here + 1.0}
    events: list[tuple[float, int]] = []
    base = 0
    steps = []
    for table in problem.tables:
        v = problem.vector(point, table.acoustic_scale)
        a = table.parts @ v
        g = table.parts @ (problem.vector(unit, table.acoustic_scale) - v)
        steps.append(_steps(table.errors, a, g, lo - here, hi - here))
    if problem.lattices:
        steps.extend(problem.lattice_set.steps(point, unit, lo - here, hi - here))
    for cuts, values in steps:
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


def search(problem: Problem, start: dict[str, float], names: Sequence[str], restarts: int, seed: int = 0,
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


class LatticeLines:
    """One lattice utterance of the search: its best path's errors along any line, exactly.

    ``dag``: the expanded lattice's graph (its own scores unused); ``arc_parts`` float64
    ``(X, C)`` and ``final_parts`` ``(G, C)`` its score components; ``vector(point)``: the
    weight vector ``(C,)`` rescoring uses at a point (so a path's total is what rescoring
    computes); ``errors_of(arcs)``: the word errors of the path along ``arcs`` (int64 arc ids).
    :meth:`steps` is a line search's view (as :func:`_steps` of a table), :meth:`errors` a
    point's; :class:`LatticeSet` runs them for many lattices along the same line. The paths met so
    far are kept (their components and errors) and seed every later line; ``passes`` counts the
    multi-point Viterbi passes this lattice took part in."""

    def __init__(self, dag: Dag, arc_parts: numpy.ndarray, final_parts: numpy.ndarray,
                 vector: Callable[[dict[str, float]], numpy.ndarray],
                 errors_of: Callable[[numpy.ndarray], int]) -> None:
        self.dag, self.arc_parts, self.final_parts = dag, arc_parts, final_parts
        self.vector, self.errors_of = vector, errors_of
        self.paths: dict[bytes, int] = {}  # a path's arcs -> its row in the table
        self.table = numpy.empty((0, arc_parts.shape[1]))  # (K, C): the components of each known path
        self.path_errors: list[int] = []
        self.final_of = {state: i for i, state in enumerate(dag.finals.cpu().tolist())}
        self.passes = 0
        self.answers: dict[bytes, tuple[list[float], list[int]]] = {}  # the last lines' answers, by line
        self._alone: LatticeSet | None = None
        self.graph = Graph.of(dag)  # the graph as the compiled search reads it

    def remember(self, key: bytes, answer: tuple[list[float], list[int]]) -> None:
        """Keep a line's answer (exact whatever the table held): cross-validation's folds and the
        restarts start from the same points, so their first lines are the same lines."""
        if key not in self.answers and len(self.answers) >= LINE_MEMORY:
            self.answers.pop(next(iter(self.answers)))
        self.answers[key] = answer

    def errors(self, point: dict[str, float]) -> int:
        """The errors of the best path at ``point`` (rescoring's decision)."""
        return self._set().errors(point)[0]

    def steps(self, point: dict[str, float], unit: dict[str, float], lo: float, hi: float
              ) -> tuple[list[float], list[int]]:
        """Along ``point + t (unit - point)`` for ``t`` in ``[lo, hi]``: the breakpoints where the
        best path's errors change and the errors between them (as :func:`_steps`)."""
        return self._set().steps(point, unit, lo, hi)[0]

    def _set(self) -> LatticeSet:
        if self._alone is None:
            self._alone = LatticeSet([self])
        return self._alone

    def line(self, point: dict[str, float], unit: dict[str, float], lo: float, hi: float) -> _Line:
        """The arcs' and final states' scores along the line ``point + t (unit - point)``."""
        v = self.vector(point)
        dv = self.vector(unit) - v
        return _Line(v, dv, ArcLines(self.arc_parts @ v, self.arc_parts @ dv, self.final_parts @ v,
                                     self.final_parts @ dv), lo, hi)

    def candidate(self, line: _Line) -> tuple[list[float], numpy.ndarray, numpy.ndarray]:
        """The table's envelope along ``line``: its breakpoints inside ``(lo, hi)``, the points to
        check (the range's ends, the breakpoints, then each segment's middle) and the envelope's
        value at each point."""
        a, g = self.table @ line.v, self.table @ line.dv
        envelope, starts = _upper_envelope(a, g)
        cuts = [float(starts[k]) for k in range(1, len(starts)) if line.lo < starts[k] < line.hi]
        bounds = [line.lo, *cuts, line.hi]
        middles = [(bounds[k] + bounds[k + 1]) / 2 for k in range(len(bounds) - 1)]
        points = numpy.array([*bounds, *middles])
        return cuts, points, (a[:, None] + g[:, None] * points[None, :]).max(axis=0)

    def settle(self, cuts: list[float], points: numpy.ndarray, envelope: numpy.ndarray, best: numpy.ndarray,
               paths: list[numpy.ndarray]) -> tuple[list[float], list[int]] | None:
        """The line search's answer from the best paths at the candidate's ``points`` (totals
        ``best``), or None when a path scored above the candidate ``envelope`` (it joined the
        table: check again). When none did, the candidate envelope is the lattice's own (a convex
        function that meets a line at both ends of a segment is that line in between)."""
        above = best > envelope + 1e-9 * numpy.maximum(1.0, numpy.abs(best))
        grew = False
        for k in numpy.flatnonzero(above).tolist():
            grew |= self._add(paths[k])
        if grew:
            return None
        first_middle = len(cuts) + 2
        values = [self.path_errors[self._known(paths[first_middle + k])] for k in range(len(cuts) + 1)]
        keep = [k for k in range(1, len(values)) if values[k] != values[k - 1]]
        return [cuts[k - 1] for k in keep], [values[0], *(values[k] for k in keep)]

    def _add(self, arcs: numpy.ndarray) -> bool:
        """Add a path to the table; False when it was there already (a rounding difference)."""
        known = len(self.table)
        self._known(arcs)
        return len(self.table) > known

    def _known(self, arcs: numpy.ndarray) -> int:
        """The table row of the path along ``arcs`` (ending in the final state of its last arc),
        added with its components and errors when new."""
        key = arcs.astype(numpy.int64).tobytes()
        row = self.paths.get(key)
        if row is None:
            final = self._final_index(arcs)
            parts = self.arc_parts[arcs].sum(axis=0) + self.final_parts[final]
            row = self.paths[key] = len(self.table)
            self.table = numpy.vstack([self.table, parts[None, :]])
            self.path_errors.append(int(self.errors_of(arcs)))
        return row

    def _final_index(self, arcs: numpy.ndarray) -> int:
        """The index among the final states of where the path along ``arcs`` ends."""
        state = int(self.dag._arrays[1][arcs[-1]]) if len(arcs) else self.dag.start
        return self.final_of[state]


@dataclass(frozen=True)
class _Line:
    """A lattice's scores along a line: the weight vector ``v`` and its step ``dv`` (``(C,)``), the
    arcs' and final states' ``scores`` there (:class:`afp.viterbi.ArcLines`), for ``t`` in
    ``[lo, hi]``."""

    v: numpy.ndarray
    dv: numpy.ndarray
    scores: ArcLines
    lo: float
    hi: float

    @property
    def key(self) -> bytes:
        """What the line's answer depends on: its vector, step and range."""
        return self.v.tobytes() + self.dv.tobytes() + numpy.array([self.lo, self.hi]).tobytes()


#: the answers a lattice keeps (:meth:`LatticeLines.remember`)
LINE_MEMORY = 64


class LatticeSet:
    """Lattices (:class:`LatticeLines`) searched together: a line search checks every lattice at
    the points its candidate envelope asks for (:meth:`LatticeLines.candidate`), each lattice in
    one compiled multi-point Viterbi pass (:func:`afp.viterbi.best_paths`), again for those whose
    envelope grew. The answers are each lattice's own (:meth:`LatticeLines.settle`)."""

    def __init__(self, lines: Sequence[LatticeLines]) -> None:
        self.lines = list(lines)

    def errors(self, point: dict[str, float]) -> list[int]:
        """Each lattice's best path's errors at ``point``."""
        lines = [lattice.line(point, point, 0.0, 0.0) for lattice in self.lines]
        found = self._best(range(len(self.lines)), lines, {i: numpy.zeros(1) for i in range(len(self.lines))})
        return [lattice.path_errors[lattice._known(found[i][1][0])] for i, lattice in enumerate(self.lines)]

    def steps(self, point: dict[str, float], unit: dict[str, float], lo: float, hi: float
              ) -> list[tuple[list[float], list[int]]]:
        """:meth:`LatticeLines.steps` of every lattice along the same line."""
        lines = [lattice.line(point, unit, lo, hi) for lattice in self.lines]
        empty = [i for i, lattice in enumerate(self.lines) if not len(lattice.table) and lines[i].key not in lattice.answers]
        if empty:  # a first path each to start the envelopes from
            found = self._best(empty, lines, {i: numpy.array([(lo + hi) / 2]) for i in empty})
            for i in empty:
                self.lines[i]._known(found[i][1][0])
        keys = [line.key for line in lines]
        results: list[tuple[list[float], list[int]] | None] = [
            lattice.answers.get(key) for lattice, key in zip(self.lines, keys)]
        pending = [i for i, answer in enumerate(results) if answer is None]
        while pending:
            plans = {i: self.lines[i].candidate(lines[i]) for i in pending}
            found = self._best(pending, lines, {i: plans[i][1] for i in pending})
            again = []
            for i in pending:
                answer = self.lines[i].settle(*plans[i], *found[i])
                if answer is None:
                    again.append(i)
                results[i] = answer
            pending = again
        for lattice, key, answer in zip(self.lines, keys, results):
            lattice.remember(key, answer)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    def _best(self, which: Sequence[int], lines: list[_Line], points: dict[int, numpy.ndarray]
              ) -> dict[int, tuple[numpy.ndarray, list[numpy.ndarray]]]:
        """The best path's totals and arcs of lattices ``which`` at each of their ``points`` along
        their ``lines``."""
        out = {}
        for i in which:
            lattice = self.lines[i]
            lattice.passes += 1
            out[i] = best_paths(lattice.graph, lines[i].scores, points[i])
        return out
