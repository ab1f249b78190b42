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
    def _into_state_runs(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Per level of destinations: its arc ids sorted by destination (arc id order within
        one), their sources, where each destination's run starts, the runs' lengths, the
        destinations and the arcs' positions ``(n, 1)``: a level's maxima are then one
        ``reduceat`` per level (:meth:`best_paths`)."""
        order, offsets = self._by_dst_level
        src, dst = self._arrays
        runs = []
        for i in range(len(offsets) - 1):
            arcs = order[offsets[i]:offsets[i + 1]]
            arcs = arcs[np.argsort(dst[arcs], kind="stable")]
            into = dst[arcs]
            new = np.ones(len(arcs), dtype=bool)
            new[1:] = into[1:] != into[:-1]
            starts = np.flatnonzero(new)
            lengths = np.diff(np.append(starts, len(arcs)))
            runs.append((arcs, src[arcs], starts, lengths, into[starts], np.arange(len(arcs))[:, None]))
        return runs

    def best_paths(self, score: np.ndarray, final_score: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The best complete path under each of ``T`` score settings at once: column ``t`` of
        ``score`` (float64 ``(X, T)``) and ``final_score`` (``(G, T)``) are one setting's arc and
        final scores (this Dag's own are not used). Returns float64 ``(T,)`` best totals and, per
        column, the path's arc ids (int64, path order): the path :meth:`best_path` returns under
        that column's scores (a state's ties to its lowest incoming arc id, the first of equal
        final states). :meth:`DagUnion.best_paths` of this Dag alone (the deadline is checked
        once, before the sweep). Raises ``ValueError`` when no final state is reachable."""
        if self.deadline is not None:
            check_deadline(self.deadline)
        totals, (paths,) = self._alone.best_paths(score, final_score)
        return totals[0], paths

    @_graph_cached
    def _alone(self) -> DagUnion:
        """This graph as a union of one (:meth:`best_paths`)."""
        return DagUnion([self])


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
        states = [d.num_states for d in dags]
        finals = [d.finals.cpu().numpy() for d in dags]
        self.arc_offsets = np.concatenate([[0], np.cumsum(arcs)]).astype(np.int64)
        self.state_offsets = np.concatenate([[0], np.cumsum(states)]).astype(np.int64)
        self.final_offsets = np.concatenate([[0], np.cumsum([len(f) for f in finals])]).astype(np.int64)
        if any(len(f) == 0 for f in finals):
            raise ValueError("no complete path: a graph has no final state")
        self.num_states = int(self.state_offsets[-1])
        self.src = np.concatenate([d._arrays[0] + off for d, off in zip(dags, self.state_offsets)])
        self.starts = np.array([d.start for d in dags], dtype=np.int64) + self.state_offsets[:-1]
        self.finals = np.concatenate([f + off for f, off in zip(finals, self.state_offsets)])
        self.graph_of_final = np.repeat(np.arange(self.count), [len(f) for f in finals])
        self.runs = self._merged_runs(dags)
        sizes = [len(run[0]) for run in self.runs]
        #: the arcs in sweep order (level by level, as ``runs``) and each level's offsets in it
        self.order = np.concatenate([run[0] for run in self.runs]) if self.runs else np.empty(0, np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()

    def _merged_runs(self, dags: list[Dag]) -> list[tuple[np.ndarray, ...]]:
        """Per union level: :meth:`Dag._into_state_runs` of every graph's level, concatenated
        with the union's ids (arcs, sources, run starts, run lengths, destinations, positions)."""
        per_graph = [d._into_state_runs for d in dags]
        out = []
        for level in range(max(len(runs) for runs in per_graph)):
            parts = [(g, runs[level]) for g, runs in enumerate(per_graph) if level < len(runs)]
            sizes = np.array([len(run[0]) for _, run in parts], dtype=np.int64)
            shift = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            arcs = np.concatenate([run[0] + self.arc_offsets[g] for g, run in parts])
            frm = np.concatenate([run[1] + self.state_offsets[g] for g, run in parts])
            starts = np.concatenate([run[2] + s for (_, run), s in zip(parts, shift)])
            lengths = np.concatenate([run[3] for _, run in parts])
            into = np.concatenate([run[4] + self.state_offsets[g] for g, run in parts])
            out.append((arcs, frm, starts, lengths, into, np.arange(len(arcs))[:, None]))
        return out

    def best_paths(self, score: np.ndarray, final_score: np.ndarray) -> tuple[np.ndarray, list[list[np.ndarray]]]:
        """The best complete path of every graph under each of ``T`` score settings: column ``t`` of
        ``score`` (float64 ``(X, T)``) and ``final_score`` (``(G, T)``) is a setting of every graph's
        arcs and final states (the graphs' own scores are not used). Returns float64 ``(N, T)``
        best totals of the ``N`` graphs and, per graph and column, the path's arc ids in the graph's
        own numbering (int64, path order): :meth:`Dag.best_path`'s path under that column's scores
        (a state's ties to its lowest incoming arc id, the first of equal final states). One level
        sweep for all (a ``reduceat`` per level: every arc into a state is in that state's level).
        Raises ``ValueError`` naming the first graph with no reachable final state."""
        columns = score.shape[1]
        alpha = np.full((self.num_states, columns), NEG_INF)
        alpha[self.starts] = 0.0
        none = self.src.shape[0]
        back = np.full((self.num_states, columns), none, dtype=np.int64)
        offsets = self.offsets
        in_order = score[self.order]  # one gather: each level's scores are then a contiguous slice
        for level, (arcs, frm, starts, lengths, states, positions) in enumerate(self.runs):
            cand = alpha[frm]
            cand += in_order[offsets[level]:offsets[level + 1]]
            best = np.maximum.reduceat(cand, starts, axis=0)
            alpha[states] = best
            count = len(arcs)
            position = np.where(cand == np.repeat(best, lengths, axis=0), positions, count)
            first = np.minimum.reduceat(position, starts, axis=0)
            chosen = arcs[np.minimum(first, count - 1)]
            chosen[best == NEG_INF] = none  # not reached in this column: no back-pointer
            back[states] = chosen
        ends = alpha[self.finals] + final_score  # (G, T)
        groups = self.final_offsets[:-1]
        top_score = np.maximum.reduceat(ends, groups, axis=0)  # (N, T)
        unreachable = np.flatnonzero(~(top_score > NEG_INF).all(axis=1))
        if len(unreachable):
            raise ValueError(f"no complete path: no final state is reachable from the start (graph {unreachable[0]})")
        rows = np.arange(len(self.finals))[:, None]
        first_top = np.where(ends == top_score[self.graph_of_final], rows, len(self.finals))
        top = np.minimum.reduceat(first_top, groups, axis=0)  # (N, T): the first of equal finals
        state, steps, everything = self.finals[top], [], np.arange(columns)
        while True:
            arc = back[state, everything]
            going = arc < none
            if not going.any():
                break
            steps.append(np.where(going, arc, -1))
            state = np.where(going, self.src[np.minimum(arc, none - 1)], state)
        walked = np.stack(steps[::-1]) if steps else np.empty((0, self.count, columns), dtype=np.int64)
        paths = []
        for g in range(self.count):
            offset = self.arc_offsets[g]
            graph = walked[:, g, :]
            paths.append([graph[:, t][graph[:, t] >= 0] - offset for t in range(columns)])
        return top_score, paths
