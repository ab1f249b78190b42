"""The best path of one lattice at many points along a line, compiled: ``afp tune``'s line searches.

A line search checks a lattice at ``T`` points along a line (:class:`afp.mert.LatticeLines`): at
point ``t`` an arc scores ``g * t + a`` and a final state likewise, and the best complete path is
wanted at each point, with the engine's own tie rule (:meth:`lattices.search.Dag.best_path`: a
state's ties go to its lowest incoming arc id, equal final states to the first). A tuning run
is mostly these ``(arc, point)`` cells: 1.6 billion for the first 100 PocketSphinx dev_clean
lattices. As numpy array steps (one per level of a union of lattices, to pay for numpy's per-call
cost) a cell cost about 16 ns; compiled by numba (a JIT compiler for numeric Python,
:mod:`lattices.compiled`), one pass over the arcs with the points as the inner loop
costs a few ns a cell, and each lattice is searched alone. numba caches the machine code beside
this file (:func:`lattices.compiled.compiled`), so only the first run on a machine compiles it (seconds).

The sums are the engine's, operation for operation: an arc's score is ``g * t + a`` (a product,
then a sum, never fused: numba does not contract them without ``fastmath``), a candidate is its
source's best plus that score, so equal inputs give the paths :meth:`Dag.best_path` gives
(``tests/afp/test_viterbi.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattices.compiled import compiled
from lattices.search import Dag


@dataclass(frozen=True)
class ArcLines:
    """Scores along a line: an arc scores ``arc_a + t * arc_g`` at point ``t`` (float64 ``(X,)``
    each), a final state ``final_a + t * final_g`` (``(G,)`` each), in the graph's arc and final
    order (:func:`best_paths`)."""

    arc_a: np.ndarray
    arc_g: np.ndarray
    final_a: np.ndarray
    final_g: np.ndarray


@dataclass(frozen=True)
class Graph:
    """One lattice's graph as the kernel reads it: ``S`` states, ``X`` arcs, ``G`` final states.

    src, dst: int64 ``(X,)``; order: int64 ``(X,)`` the arcs by the level of their destination
    (every arc after the arcs into its source); start: the start state; finals: int64 ``(G,)``."""

    num_states: int
    src: np.ndarray
    dst: np.ndarray
    order: np.ndarray
    start: int
    finals: np.ndarray

    @classmethod
    def of(cls, dag: Dag) -> Graph:
        src, dst = dag._arrays
        order, _ = dag._by_dst_level
        return cls(dag.num_states, np.ascontiguousarray(src, dtype=np.int64), np.ascontiguousarray(dst, dtype=np.int64),
                   np.ascontiguousarray(order, dtype=np.int64), int(dag.start),
                   np.ascontiguousarray(dag.finals.cpu().numpy(), dtype=np.int64))


def best_paths(graph: Graph, lines: ArcLines, points: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The best complete path at each of ``points`` (float64 ``(T,)``) along ``lines``: float64
    ``(T,)`` totals and, per point, the path's arc ids (int64, path order): the path
    :meth:`lattices.search.Dag.best_path` returns under that point's scores. Raises ``ValueError`` when no final
    state is reachable."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    totals, arcs, lengths = _best_paths(graph.num_states, graph.src, graph.dst, graph.order, graph.start,
                                        graph.finals, lines.arc_a, lines.arc_g, lines.final_a, lines.final_g, points)
    if not (totals > -np.inf).all():
        raise ValueError("no complete path: no final state is reachable from the start")
    return totals, [arcs[t, :lengths[t]].copy() for t in range(points.shape[0])]


@compiled
def _best_paths(num_states: int, src: np.ndarray, dst: np.ndarray, order: np.ndarray, start: int, finals: np.ndarray,
                arc_a: np.ndarray, arc_g: np.ndarray, final_a: np.ndarray, final_g: np.ndarray, points: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover (compiled)
    """totals (T,), the paths' arcs (T, S) padded, their lengths (T,): see :func:`best_paths`.

    The arcs are taken in ``order``, which lists the arcs into a state in arc id order, so a
    strictly better candidate alone takes a state over: its ties stay with the lowest arc id.
    The points are the inner loop (each arc's scores at all of them in a row of ``(S, T)``)."""
    count, arcs_in_all = points.shape[0], src.shape[0]
    none = arcs_in_all  # larger than every arc id: no back-pointer
    alpha = np.full((num_states, count), -np.inf)
    back = np.full((num_states, count), none, dtype=np.int64)
    alpha[start, :] = 0.0
    score = np.empty(count)
    for k in range(arcs_in_all):
        arc = order[k]
        g, a, frm, into = arc_g[arc], arc_a[arc], src[arc], dst[arc]
        for t in range(count):
            score[t] = g * points[t]
        for t in range(count):
            cand = alpha[frm, t] + (score[t] + a)
            if cand > alpha[into, t]:
                alpha[into, t] = cand
                back[into, t] = arc
    totals = np.full(count, -np.inf)
    paths = np.empty((count, num_states), dtype=np.int64)
    lengths = np.zeros(count, dtype=np.int64)
    for t in range(count):
        top, best = -1, -np.inf
        for f in range(finals.shape[0]):
            end = final_g[f] * points[t]
            total = alpha[finals[f], t] + (end + final_a[f])
            if total > best:
                top, best = f, total
        totals[t] = best
        if top < 0:
            continue
        state, steps = finals[top], 0
        while back[state, t] < none:
            paths[t, steps] = back[state, t]
            steps += 1
            state = src[back[state, t]]
        lengths[t] = steps
        for i in range(steps // 2):  # path order: from the start
            paths[t, i], paths[t, steps - 1 - i] = paths[t, steps - 1 - i], paths[t, i]
    return totals, paths, lengths
