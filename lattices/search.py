"""Searches over a weighted DAG: best path, forward-backward (max and log-sum), exact k-best.

All work on a :class:`Dag`: arcs with one total score each, final states with a final score,
and a level per state (every arc goes to a deeper level). Each algorithm runs one tensor step
per level, never a Python loop over arcs, on whatever device the tensors live on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from lattices.ops import check_deadline, group_by

NEG_INF = -math.inf


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

    def with_scores(self, score: Tensor, final_score: Tensor) -> Dag:
        """The same graph with other scores (keeps the cached level grouping)."""
        other = Dag(self.num_states, self.start, self.src, self.dst, score, self.finals, final_score, self.level,
                    self.deadline)
        other.__dict__.update({k: v for k, v in self.__dict__.items() if k in ("_by_dst_level", "_by_src_level")})
        return other

    @cached_property
    def _by_dst_level(self) -> list[Tensor]:
        return group_by(self.level[self.dst])

    @cached_property
    def _by_src_level(self) -> list[Tensor]:
        return list(reversed(group_by(self.level[self.src])))

    def _final_vector(self) -> Tensor:
        out = torch.full((self.num_states,), NEG_INF, dtype=self.score.dtype, device=self.score.device)
        return out.index_put_((self.finals,), self.final_score, accumulate=False)

    # ------------------------------------------------------------------ forward / backward
    def forward(self, log_sum: bool = False) -> Tensor:
        """float ``(S,)``: best (or log-summed) score of reaching each state from the start."""
        alpha = torch.full((self.num_states,), NEG_INF, dtype=self.score.dtype, device=self.score.device)
        alpha[self.start] = 0.0
        reduce = _scatter_logsumexp if log_sum else _scatter_max
        for arcs in self._by_dst_level:
            check_deadline(self.deadline)
            alpha = reduce(alpha, self.dst[arcs], alpha[self.src[arcs]] + self.score[arcs])
        return alpha

    def backward(self, log_sum: bool = False) -> Tensor:
        """float ``(S,)``: best (or log-summed) score from each state to the end, final score included."""
        beta = self._final_vector()
        reduce = _scatter_logsumexp if log_sum else _scatter_max
        for arcs in self._by_src_level:
            check_deadline(self.deadline)
            beta = reduce(beta, self.src[arcs], beta[self.dst[arcs]] + self.score[arcs])
        return beta

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
        """The best complete path: ``(score, arcs)`` with ``arcs`` int64 in path order."""
        scores, paths = self.k_best_paths(1)
        return float(scores[0]), paths[0]

    def k_best_paths(self, k: int) -> tuple[Tensor, list[Tensor]]:
        """The ``k`` best complete paths (fewer if the graph has fewer), best first.

        Exact: every state keeps its ``k`` best partial paths (k-best Viterbi), level by level.
        Returns float ``(n,)`` scores and a list of ``n`` int64 arc-id tensors.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        device, dtype = self.score.device, self.score.dtype
        best = torch.full((self.num_states, k), NEG_INF, dtype=dtype, device=device)
        back_arc = torch.full((self.num_states, k), -1, dtype=torch.int64, device=device)
        back_rank = torch.zeros((self.num_states, k), dtype=torch.int64, device=device)
        best[self.start, 0] = 0.0
        ranks = torch.arange(k, device=device)
        for arcs in self._by_dst_level:
            check_deadline(self.deadline)
            cand = (best[self.src[arcs]] + self.score[arcs].unsqueeze(1)).flatten()  # (n*k,)
            cand_arc = arcs.unsqueeze(1).expand(-1, k).reshape(-1)
            cand_rank = ranks.repeat(arcs.shape[0])
            cand_dst = self.dst[cand_arc]
            keep = cand > NEG_INF
            cand, cand_arc, cand_rank, cand_dst = cand[keep], cand_arc[keep], cand_rank[keep], cand_dst[keep]
            order = torch.argsort(-cand, stable=True)
            order = order[torch.argsort(cand_dst[order], stable=True)]  # by dst, then best first
            sorted_dst = cand_dst[order]
            position = torch.arange(order.shape[0], device=device)
            first = torch.searchsorted(sorted_dst, sorted_dst)  # start of each dst segment
            rank = position - first
            take = rank < k
            order, rank = order[take], rank[take]
            best[cand_dst[order], rank] = cand[order]
            back_arc[cand_dst[order], rank] = cand_arc[order]
            back_rank[cand_dst[order], rank] = cand_rank[order]

        ends = (best[self.finals] + self.final_score.unsqueeze(1)).flatten()
        end_state = self.finals.unsqueeze(1).expand(-1, k).reshape(-1)
        end_rank = ranks.repeat(self.finals.shape[0])
        count = min(k, int((ends > NEG_INF).sum()))
        top = torch.topk(ends, count).indices if count else ends.new_zeros(0, dtype=torch.int64)
        state, rank = end_state[top].tolist(), end_rank[top].tolist()
        back_arc_cpu, back_rank_cpu, src_cpu = back_arc.cpu(), back_rank.cpu(), self.src.cpu()
        paths = []
        for s, r in zip(state, rank):
            arcs = []
            while True:
                arc = int(back_arc_cpu[s, r])
                if arc < 0:
                    break
                arcs.append(arc)
                s, r = int(src_cpu[arc]), int(back_rank_cpu[s, r])
            paths.append(torch.tensor(arcs[::-1], dtype=torch.int64))
        return ends[top], paths


def _scatter_max(target: Tensor, index: Tensor, values: Tensor) -> Tensor:
    return target.scatter_reduce(0, index, values, reduce="amax", include_self=True)


def _scatter_logsumexp(target: Tensor, index: Tensor, values: Tensor) -> Tensor:
    peak = target.scatter_reduce(0, index, values, reduce="amax", include_self=True)
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.exp(target - safe_peak).scatter_add(0, index, torch.exp(values - safe_peak[index]))
    return torch.log(total) + safe_peak


def k_best_distinct(dag: Dag, labels: Tensor, k: int, max_paths: int = 4096) -> list[tuple[float, Tensor]]:
    """The ``k`` best distinct label sequences and the best path of each, best first.

    ``labels``: int64 ``(X,)`` label of each arc, negative for arcs without one (epsilons).
    k-best paths are widened until ``k`` distinct sequences appear or ``max_paths`` paths were
    seen. Exact: listing paths best first, sequences first appear in the order of their best
    path. Returns ``(score, arcs)`` pairs, ``arcs`` int64 in path order.
    """
    labels_cpu = labels.cpu()
    width = k
    while True:
        scores, paths = dag.k_best_paths(width)
        found: dict[tuple[int, ...], tuple[float, Tensor]] = {}
        for score, arcs in zip(scores.tolist(), paths):
            sequence = tuple(x for x in labels_cpu[arcs].tolist() if x >= 0)
            if sequence not in found:
                found[sequence] = (score, arcs)
                if len(found) == k:
                    return list(found.values())
        if len(paths) < width or width >= max_paths:
            return list(found.values())
        width = min(width * 4, max_paths)


def segment_logsumexp(values: Tensor, index: Tensor, size: int) -> Tensor:
    """float ``(size,)``: log-sum-exp of ``values`` grouped by ``index`` (``-inf`` for empty groups)."""
    start = torch.full((size,), NEG_INF, dtype=values.dtype, device=values.device)
    return _scatter_logsumexp(start, index, values)
