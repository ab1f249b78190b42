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


def beam_tolerance(best: float) -> float:
    """The rounding allowance of a beam cut at ``best - beam``: a path's score summed in another
    order (the forward and the backward pass, a priority queue's sums) may miss ``best`` by a few
    ulps, so scores down to this much further below are within the beam."""
    return 1e-9 * (1.0 + abs(best))


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
        score = self.score.cpu().numpy().astype(np.float64, copy=False)[order]
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
        frm, to, score = src[order], dst[order], self.score.cpu().numpy().astype(np.float64, copy=False)[order]
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


def _scatter_logsumexp(target: Tensor, index: Tensor, values: Tensor) -> Tensor:
    peak = target.scatter_reduce(0, index, values, reduce="amax", include_self=True)
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.exp(target - safe_peak).scatter_add(0, index, torch.exp(values - safe_peak[index]))
    return torch.log(total) + safe_peak


def segment_logsumexp(values: Tensor, index: Tensor, size: int) -> Tensor:
    """float ``(size,)``: log-sum-exp of ``values`` grouped by ``index`` (``-inf`` for empty groups)."""
    start = torch.full((size,), NEG_INF, dtype=values.dtype, device=values.device)
    return _scatter_logsumexp(start, index, values)
