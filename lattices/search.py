"""Searches over a weighted DAG: best path, forward-backward (max and log-sum).

(The k best distinct label sequences: :mod:`lattices.kbest`.)

All work on a :class:`Dag`: arcs with one total score each, final states with a final score,
and a level per state (every arc goes to a deeper level). Each algorithm runs one array step
per level, never a Python loop over arcs; a level's step reads and writes that level's states
and arcs only, so a pass costs time linear in the graph however many levels it has (a
frame-level lattice has one per frame). Forward, backward and the best path run in numpy on the
CPU (``ufunc.at`` reductions: a level costs a few microseconds, a tenth of the same step in
small torch calls, which is what a narrow lattice's thousands of levels are made of) and return
tensors on the scores' device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from lattices.ops import check_deadline
from lattices.topology import level_order

NEG_INF = -math.inf
T = TypeVar("T")


def _graph_cached(compute: Callable[[Dag], T]) -> property:
    """A read-only property computed once per graph: kept in ``Dag.groupings``, which
    :meth:`Dag.with_scores` shares between Dags of the same graph."""

    def get(self: Dag) -> T:
        if compute.__name__ not in self.groupings:
            self.groupings[compute.__name__] = compute(self)
        return self.groupings[compute.__name__]

    return property(get, doc=compute.__doc__)


@dataclass(frozen=True)
class Dag:
    """A weighted acyclic graph (``S`` states, ``X`` arcs, ``G`` final states).

    Attributes:
      num_states: ``S``.
      start: the start state.
      src, dst: int64 ``(X,)``.
      score: float64 ``(X,)`` arc scores (log domain, higher is better).
      finals: int64 ``(G,)`` final states; final_score: float64 ``(G,)``.
      level: int64 ``(S,)``, ``level[dst] > level[src]`` for every arc.
      deadline: optional ``time.monotonic()`` seconds; the searches raise
        :class:`~lattices.ops.DeadlineExceeded` past it (checked once per level).
    """

    num_states: int
    start: int
    src: Tensor
    dst: Tensor
    score: Tensor
    finals: Tensor
    final_score: Tensor
    level: Tensor
    deadline: float | None = None
    #: the groupings that depend on the graph only, computed on first use (see :func:`_graph_cached`)
    groupings: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def with_scores(self, score: Tensor, final_score: Tensor, deadline: float | None = None) -> Dag:
        """The same graph with other scores and ``deadline``. It shares this Dag's groupings, those
        computed already and those either computes later, so a search per LM weight groups the
        graph once."""
        return Dag(self.num_states, self.start, self.src, self.dst, score, self.finals, final_score, self.level,
                   deadline, self.groupings)

    @_graph_cached
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``src``, ``dst`` as numpy int64 arrays on the CPU."""
        return self.src.cpu().numpy(), self.dst.cpu().numpy()

    @_graph_cached
    def _by_dst_level(self) -> tuple[np.ndarray, list[int]]:
        """Arc ids sorted by the level of their destination, and each level's offsets (forward passes)."""
        return level_order(self._arrays[1], self.level.cpu().numpy())

    @_graph_cached
    def _by_src_level(self) -> tuple[np.ndarray, list[int]]:
        """Arc ids sorted by the level of their source, and each level's offsets (backward passes)."""
        return level_order(self._arrays[0], self.level.cpu().numpy())

    def _final_vector(self) -> Tensor:
        out = torch.full((self.num_states,), NEG_INF, dtype=self.score.dtype, device=self.score.device)
        return out.index_put_((self.finals,), self.final_score, accumulate=False)

    # ------------------------------------------------------------------ forward / backward
    def forward(self, log_sum: bool = False) -> Tensor:
        """float ``(S,)``: best (or log-summed) score of reaching each state from the start."""
        alpha = np.full(self.num_states, NEG_INF)
        alpha[self.start] = 0.0
        return self._sweep(alpha, log_sum, reverse=False)

    def backward(self, log_sum: bool = False) -> Tensor:
        """float ``(S,)``: best (or log-summed) score from each state to the end, final score included."""
        beta = np.full(self.num_states, NEG_INF)
        beta[self.finals.cpu().numpy()] = self.final_score.cpu().numpy()
        return self._sweep(beta, log_sum, reverse=True)

    def _sweep(self, values: np.ndarray, log_sum: bool, reverse: bool) -> Tensor:
        """Fold every arc into ``values`` (float64 ``(S,)``, changed in place) at its end:
        ``values[end] = reduce(values[end], values[other end] + score)`` over the arcs into each
        end state (the source going backward), one level at a time, deepest first when ``reverse``.
        Returns ``values`` as a tensor of the scores' dtype and device."""
        order, offsets = self._by_src_level if reverse else self._by_dst_level
        src, dst = self._arrays
        frm, to = (dst[order], src[order]) if reverse else (src[order], dst[order])
        score = self.score.cpu().numpy().astype(np.float64)[order]
        fold = np.logaddexp.at if log_sum else np.maximum.at
        levels = range(len(offsets) - 2, -1, -1) if reverse else range(len(offsets) - 1)
        for i in levels:
            check_deadline(self.deadline)
            part = slice(offsets[i], offsets[i + 1])
            fold(values, to[part], values[frm[part]] + score[part])
        return torch.from_numpy(values).to(device=self.score.device, dtype=self.score.dtype)

    def arc_posteriors(self) -> Tensor:
        """float ``(X,)``: posterior probability of each arc (log-sum forward-backward)."""
        alpha, beta = self.forward(log_sum=True), self.backward(log_sum=True)
        total = torch.logsumexp(alpha[self.finals] + self.final_score, dim=0)
        return (alpha[self.src] + self.score + beta[self.dst] - total).exp()

    def arc_best_scores(self) -> Tensor:
        """float ``(X,)``: score of the best complete path through each arc (for beam pruning)."""
        alpha, beta = self.forward(), self.backward()
        return alpha[self.src] + self.score + beta[self.dst]

    # ------------------------------------------------------------------ best and k-best paths
    def best_path(self) -> tuple[float, Tensor]:
        """The best complete path: ``(score, arcs)`` with ``arcs`` int64 in path order (CPU).

        A state's ties go to its lowest incoming arc id; one back-pointer per state. Raises
        ``ValueError`` when no final state is reachable.
        """
        order, offsets = self._by_dst_level
        src, dst = self._arrays
        frm, to, score = src[order], dst[order], self.score.cpu().numpy().astype(np.float64)[order]
        alpha = np.full(self.num_states, NEG_INF)
        alpha[self.start] = 0.0
        none = src.shape[0]  # larger than every arc id
        back = np.full(self.num_states, none, dtype=np.int64)
        for i in range(len(offsets) - 1):
            check_deadline(self.deadline)
            part = slice(offsets[i], offsets[i + 1])
            into, cand = to[part], alpha[frm[part]] + score[part]
            np.maximum.at(alpha, into, cand)
            wins = (cand == alpha[into]) & (cand > NEG_INF)
            np.minimum.at(back, into[wins], order[part][wins])
        ends = alpha[self.finals.cpu().numpy()] + self.final_score.cpu().numpy()
        if not bool((ends > NEG_INF).any()):
            raise ValueError("no complete path: no final state is reachable from the start")
        top = int(np.argmax(ends))
        state, arcs = int(self.finals[top]), []
        while back[state] < none:
            arcs.append(int(back[state]))
            state = int(src[arcs[-1]])
        return float(ends[top]), torch.tensor(arcs[::-1], dtype=torch.int64)

    @_graph_cached
    def _incoming(self) -> tuple[np.ndarray, np.ndarray]:
        """The arc ids sorted by destination (arc id order within one) and where each state's run
        starts (``S + 1`` offsets): the arcs into state ``s`` are ``into[at[s]:at[s + 1]]``."""
        dst = self._arrays[1]
        into = np.argsort(dst, kind="stable")
        return into, np.searchsorted(dst[into], np.arange(self.num_states + 1))

    def best_paths(self, lines: ArcLines, points: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The best complete path at each of ``T`` points along a line: at point ``t`` of
        ``points`` (float64 ``(T,)``) an arc scores ``lines.arc_a + t * lines.arc_g`` and a final
        state ``lines.final_a + t * lines.final_g`` (this Dag's own scores are not used). Returns
        float64 ``(T,)`` best totals and, per point, the path's arc ids (int64, path order): the
        path :meth:`best_path` returns under that point's scores (a state's ties to its lowest
        incoming arc id, the first of equal final states). :meth:`DagUnion.best_paths` of this
        Dag alone (the deadline is checked once, before the sweep). Raises ``ValueError`` when no
        final state is reachable."""
        if self.deadline is not None:
            check_deadline(self.deadline)
        totals, (paths,) = self._alone.best_paths(lines, np.asarray(points, dtype=np.float64)[None, :])
        return totals[0], paths

    @_graph_cached
    def _alone(self) -> DagUnion:
        """This graph as a union of one (:meth:`best_paths`)."""
        return DagUnion([self])


@dataclass(frozen=True)
class ArcLines:
    """Scores along a line: an arc scores ``arc_a + t * arc_g`` at point ``t`` (float64 ``(X,)``
    each), a final state ``final_a + t * final_g`` (``(G,)`` each), in the graph's arc and final
    order (:meth:`Dag.best_paths`, :meth:`DagUnion.best_paths`)."""

    arc_a: np.ndarray
    arc_g: np.ndarray
    final_a: np.ndarray
    final_g: np.ndarray

    def arc_scores(self, arcs: np.ndarray, at: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """float64: the scores of ``arcs`` (int ``(n,)``) at points ``at`` (``(n,)``, or ``(n, T)``:
        ``T`` points each), computed one way everywhere (``g * t + a``), so that equal inputs give
        equal bits; into ``out`` (which may be ``at``) when given."""
        g, a = self.arc_g[arcs], self.arc_a[arcs]
        if at.ndim > g.ndim:
            g, a = g[:, None], a[:, None]
        out = np.multiply(g, at, out=out)
        out += a
        return out


def _scatter_logsumexp(target: Tensor, index: Tensor, values: Tensor) -> Tensor:
    peak = target.scatter_reduce(0, index, values, reduce="amax", include_self=True)
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.exp(target - safe_peak).scatter_add(0, index, torch.exp(values - safe_peak[index]))
    return torch.log(total) + safe_peak


def segment_logsumexp(values: Tensor, index: Tensor, size: int) -> Tensor:
    """float ``(size,)``: log-sum-exp of ``values`` grouped by ``index`` (``-inf`` for empty groups)."""
    start = torch.full((size,), NEG_INF, dtype=values.dtype, device=values.device)
    return _scatter_logsumexp(start, index, values)


class DagUnion:
    """Several Dags' graphs searched as one: their disjoint union, level ``k`` of the union being
    level ``k`` of each (so a sweep costs the deepest graph's levels, not their sum), for
    :meth:`best_paths` of all of them under many score settings in one sweep (``afp tune``'s line
    searches check every lattice at once). ``X``: the graphs' arcs in all, ``G`` their final states,
    in graph order; a graph's arc and final ids keep their order within it."""

    def __init__(self, dags: list[Dag]) -> None:
        if not dags:
            raise ValueError("a union of no graphs")
        self.count = len(dags)
        arcs = [d._arrays[0].shape[0] for d in dags]
        finals = [d.finals.cpu().numpy() for d in dags]
        self.arc_offsets = np.concatenate([[0], np.cumsum(arcs)]).astype(np.int64)
        self.state_offsets = np.concatenate([[0], np.cumsum([d.num_states for d in dags])]).astype(np.int64)
        self.final_offsets = np.concatenate([[0], np.cumsum([len(f) for f in finals])]).astype(np.int64)
        if any(len(f) == 0 for f in finals):
            raise ValueError("no complete path: a graph has no final state")
        self.num_states = int(self.state_offsets[-1])
        self.src = np.concatenate([d._arrays[0] + off for d, off in zip(dags, self.state_offsets)])
        dst = np.concatenate([d._arrays[1] + off for d, off in zip(dags, self.state_offsets)])
        self.starts = np.array([d.start for d in dags], dtype=np.int64) + self.state_offsets[:-1]
        self.finals = np.concatenate([f + off for f, off in zip(finals, self.state_offsets)])
        self.graph_of_final = np.repeat(np.arange(self.count), [len(f) for f in finals])
        self.graph_of_arc = np.repeat(np.arange(self.count), arcs)
        # the arcs level by level: each graph's arcs by the level of their destination (its k-th
        # level with arcs is the union's k-th), graph by graph within a level
        by_level = [d._by_dst_level for d in dags]
        rank = np.concatenate([np.repeat(np.arange(len(offsets) - 1, dtype=np.int32), np.diff(offsets))
                               for _, offsets in by_level])
        ordered = np.concatenate([order + off for (order, _), off in zip(by_level, self.arc_offsets)])
        #: the arcs in sweep order, each level's offsets in it, and the arcs' ends in that order
        self.order = ordered[np.argsort(rank, kind="stable")]
        self.offsets = np.concatenate([[0], np.cumsum(np.bincount(rank))]).astype(int).tolist()
        self.frm, self.to = self.src[self.order], dst[self.order]
        self.graph_in_order = self.graph_of_arc[self.order]
        incoming = [d._incoming for d in dags]
        self.into = np.concatenate([into + off for (into, _), off in zip(incoming, self.arc_offsets)])
        self.into_at = np.concatenate([*(at[:-1] + off for (_, at), off in zip(incoming, self.arc_offsets)),
                                       [self.arc_offsets[-1]]])

    def best_paths(self, lines: ArcLines, points: np.ndarray,
                   wanted: Callable[[np.ndarray], np.ndarray] | None = None
                   ) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
        """The best complete path of every graph at each of its ``T`` points along a line: graph
        ``n``'s arcs and final states score as :class:`ArcLines` ``lines`` (the union's arc and
        final order) say at point ``points[n, t]`` (float64 ``(N, T)``; the graphs' own scores are
        not used). Returns float64 ``(N, T)`` best totals and, per graph and point, the path's arc
        ids in the graph's own numbering (int64, path order): :meth:`Dag.best_path`'s path under
        that point's scores (a state's ties to its lowest incoming arc id, the first of equal
        final states). One level sweep for all that keeps the best scores only
        (:meth:`forward_max`), then one walk back from the best final states (:meth:`_walk_back`)
        of the points whose paths are ``wanted``: a function of the best totals that says which
        (bool ``(N, T)``; every point when None), the others' paths being None. Raises
        ``ValueError`` naming the first graph with no reachable final state."""
        in_order = np.take(points, self.graph_in_order, axis=0)  # (X, T): each arc's graph's points
        alpha = self.forward_max(lines.arc_scores(self.order, in_order, out=in_order))
        final_score = lines.final_g[:, None] * points[self.graph_of_final] + lines.final_a[:, None]
        ends = alpha[self.finals] + final_score  # (G, T)
        groups = self.final_offsets[:-1]
        top_score = np.maximum.reduceat(ends, groups, axis=0)  # (N, T)
        unreachable = np.flatnonzero(~(top_score > NEG_INF).all(axis=1))
        if len(unreachable):
            raise ValueError(f"no complete path: no final state is reachable from the start (graph {unreachable[0]})")
        rows = np.arange(len(self.finals))[:, None]
        first_top = np.where(ends == top_score[self.graph_of_final], rows, len(self.finals))
        top = np.minimum.reduceat(first_top, groups, axis=0)  # (N, T): the first of equal finals
        walk = np.ones(top.shape, dtype=bool) if wanted is None else wanted(top_score)
        return top_score, self._walk_back(alpha, lines, points, self.finals[top], walk)

    def forward_max(self, in_order: np.ndarray) -> np.ndarray:
        """float64 ``(S, T)``: each state's best score from its graph's start under each column of
        ``in_order`` (the arcs' scores ``(X, T)`` in sweep order, :attr:`order`). A level is one
        gather, one add and one ``maximum.at`` into the flattened scores (a tenth of the time of
        a ``reduceat`` over the destinations' runs, which are a few arcs long)."""
        columns = in_order.shape[1]
        alpha = np.full((self.num_states, columns), NEG_INF)
        alpha[self.starts] = 0.0
        flat, step = alpha.reshape(-1), np.arange(columns)
        offsets = self.offsets
        for level in range(len(offsets) - 1):
            part = slice(offsets[level], offsets[level + 1])
            cand = np.take(alpha, self.frm[part], axis=0)
            cand += in_order[part]
            cells = self.to[part][:, None] * columns + step  # where each arc's scores go in flat
            np.maximum.at(flat, cells.reshape(-1), cand.reshape(-1))
        return alpha

    def _walk_back(self, alpha: np.ndarray, lines: ArcLines, points: np.ndarray, ends: np.ndarray,
                   walk: np.ndarray) -> list[list[np.ndarray | None]]:
        """Per graph and column where ``walk`` (bool ``(N, T)``; None elsewhere), the arcs of the
        best path into state ``ends[g, t]`` (``(N, T)``)
        under ``alpha`` (:meth:`forward_max`) and the arcs' ``lines`` at their graphs' ``points``
        (``(N, T)``): from each
        state back along its lowest-id incoming arc whose source's best plus its score is the
        state's best (the sum the sweep took its maximum of, so equal to it bit for bit), until a
        state no such arc enters (the start). All (graph, column) pairs walk at once."""
        columns = alpha.shape[1]
        pair_state = ends.reshape(-1).copy()
        pair_column = np.tile(np.arange(columns), self.count)
        steps: list[np.ndarray] = []
        walking = walk.reshape(-1)
        active = np.flatnonzero(walking & (self.into_at[pair_state + 1] > self.into_at[pair_state]))
        while active.shape[0]:
            state, column = pair_state[active], pair_column[active]
            lo, count = self.into_at[state], self.into_at[state + 1] - self.into_at[state]
            begin = np.cumsum(count) - count  # each pair's first candidate in the flattened candidates
            run = np.repeat(np.arange(active.shape[0]), count)
            arcs = self.into[np.repeat(lo - begin, count) + np.arange(run.shape[0])]
            col = column[run]
            target = alpha[state, column]
            hit = (alpha[self.src[arcs], col] + lines.arc_scores(arcs, points[self.graph_of_arc[arcs], col]) == target[run]) & (target[run] > NEG_INF)
            first = np.minimum.reduceat(np.where(hit, np.arange(run.shape[0]), run.shape[0]), begin)
            found = first < run.shape[0]
            taken = np.full(pair_state.shape[0], -1, dtype=np.int64)
            active = active[found]
            taken[active] = arcs[first[found]]
            steps.append(taken)
            pair_state[active] = self.src[taken[active]]
            active = active[self.into_at[pair_state[active] + 1] > self.into_at[pair_state[active]]]
        walked = np.stack(steps[::-1]) if steps else np.empty((0, pair_state.shape[0]), dtype=np.int64)
        walked = walked.reshape(walked.shape[0], self.count, columns)
        paths = []
        for g in range(self.count):
            offset = self.arc_offsets[g]
            graph = walked[:, g, :]
            paths.append([graph[:, t][graph[:, t] >= 0] - offset if walk[g, t] else None for t in range(columns)])
        return paths
