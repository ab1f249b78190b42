"""The k best distinct label sequences of a weighted DAG, by best-first (A*) search over word prefixes.

Many paths of a lattice can carry the same words (epsilons, silences, parallel arcs, the states
an expansion splits by history), so listing the k best *paths* until k distinct sequences
appear can need exponentially many paths. This search works on sequences instead:

* A search node is a pair (state, label prefix): a state of the DAG and the labels read on the
  way to it. Arcs with a negative label (epsilons and other skipped symbols) keep the prefix.
  All paths that reach a state with the same prefix are merged into one node, which is
  expanded at most once (a closed set).
* A node's priority is ``g + beta[state]``: ``g`` the best score found from the start to the
  node, ``beta`` the exact best completion score of the state (:meth:`Dag.backward`), an
  admissible and consistent heuristic. Reaching a final state pushes an end node for its
  prefix with priority ``g + final_score``; end nodes of one prefix are merged too.
* Priorities never increase along an arc, so nodes leave the queue best first, the first
  arrival of a node has its best ``g``, and the end nodes leave in the order of their
  sequences' best scores: the first ``k`` of them are the ``k`` best distinct sequences.

Bound: every node expanded before the k-th sequence is found lies on a complete path of score
at least the k-th best, made of the best path into the node and the best completion of its
state. Unless two complete paths have exactly the same score, that path's sequence is one of
the k best and, with the state, determines the node's prefix; so the search expands at most
``k * S`` nodes (``S`` states), typically about ``k`` times the length of a path, and ``S``
when all paths carry the same words. Exact ties can cost more (up to ``k * S * (L + 1)``, ``L``
the longest sequence), since every tied prefix of the answer is looked at. The number of
expanded nodes is capped by ``max_expansions`` (default ``k * S``); the queue holds at most
``max_expansions * (largest out-degree)`` entries. At the cap the search stops and says so
(:attr:`DistinctKBest.truncated`); what it found by then are still the exact best sequences,
in order, only fewer than ``k``.

Ties: sequences of equal score (equal float64 totals) come in lexicographic order of their
labels, a sequence before its extensions. Of several equally scored paths of one sequence,
the one the search completes first is returned (deterministic, by no simpler rule: among equal
priorities and prefixes, deeper states first, then the first pushed).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from lattices.ops import check_deadline
from lattices.search import Dag
from lattices.topology import arcs_by_state

__all__ = ["DistinctKBest", "search_distinct"]

_END, _STATE = 0, 1  # node kinds; an end node sorts before a state node of the same priority and prefix
_DEADLINE_EVERY = 1024  # expansions between deadline checks


class _Prefix:
    """A label sequence as a node of a trie (interned: one object per distinct sequence).

    ``<`` is lexicographic order of the label sequences, a sequence before its extensions; it
    walks the trie, so it costs the depth, and it is only asked for on equal priorities.
    """

    __slots__ = ("parent", "label", "depth")

    def __init__(self, parent: _Prefix | None, label: int) -> None:
        self.parent, self.label = parent, label
        self.depth = 0 if parent is None else parent.depth + 1

    def __lt__(self, other: _Prefix) -> bool:
        a, b = self, other
        while a.depth > b.depth:
            a = a.parent  # type: ignore[assignment]
        while b.depth > a.depth:
            b = b.parent  # type: ignore[assignment]
        if a is b:  # one is a prefix of the other
            return self.depth < other.depth
        while a.parent is not b.parent:
            a, b = a.parent, b.parent  # type: ignore[assignment]
        return a.label < b.label


@dataclass(frozen=True)
class DistinctKBest:
    """What :func:`search_distinct` found.

    Attributes:
      found: ``(score, arcs)`` per distinct label sequence, best first: ``score`` the best path
        score of the sequence (final score included), ``arcs`` int64 ``(n,)`` on the CPU, that
        path's arc ids in path order.
      expanded: (state, prefix) nodes expanded, each at most once; at most ``max_expansions``.
      pushed: queue entries created (the search's memory is proportional to it).
      truncated: True when ``max_expansions`` stopped the search before ``k`` sequences were
        found; ``found`` is then the exact best ``len(found)`` sequences, and more exist or may.
    """

    found: list[tuple[float, Tensor]]
    expanded: int
    pushed: int
    truncated: bool


def search_distinct(dag: Dag, labels: Tensor, k: int, max_expansions: int | None = None) -> DistinctKBest:
    """The ``k`` best distinct label sequences of ``dag`` and the best path of each (module docstring).

    Args:
      dag: the graph and its scores (any device; the search itself runs on the CPU).
      labels: int64 ``(X,)`` label of each arc, negative for arcs without one (epsilons).
      k: how many sequences (fewer are returned when the graph has fewer).
      max_expansions: the most (state, prefix) nodes to expand; None: ``k * dag.num_states``.
    Raises ``ValueError`` for ``k < 1`` or ``max_expansions < 1``, and
    :class:`~lattices.ops.DeadlineExceeded` past ``dag.deadline``.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    limit = k * max(dag.num_states, 1) if max_expansions is None else max_expansions
    if limit < 1:
        raise ValueError(f"max_expansions must be at least 1, got {max_expansions}")
    if labels.shape != dag.src.shape:
        raise ValueError(f"labels has shape {tuple(labels.shape)}, expected {tuple(dag.src.shape)}")
    beta = dag.backward()
    graph = _OutArcs(dag, labels, beta)
    final = dag._final_vector().cpu().tolist()
    start_priority = float(beta[dag.start])
    if start_priority == -math.inf:
        return DistinctKBest([], 0, 0, False)

    root = _Prefix(None, -1)
    children: dict[tuple[_Prefix, int], _Prefix] = {}
    # queue entry: (-priority, prefix, kind, -level, counter, state, g, arc, parent node), smallest first
    queue: list[tuple[float, _Prefix, int, int, int, int, float, int, int]] = [
        (-start_priority, root, _STATE, 0, 0, dag.start, 0.0, -1, -1)]
    best_g: dict[tuple[int, _Prefix], float] = {(dag.start, root): 0.0}  # state -1: end nodes
    closed: set[tuple[int, _Prefix]] = set()
    node_arc: list[int] = []  # per expanded node: the arc into it (-1 at the start) and its parent node
    node_parent: list[int] = []
    found: list[tuple[float, Tensor]] = []
    pushed, truncated = 1, False

    def push(priority: float, prefix: _Prefix, kind: int, depth: int, state: int, g: float, arc: int,
             parent: int) -> None:
        nonlocal pushed
        key = (state, prefix)
        if key in closed or best_g.get(key, -math.inf) >= g:
            return
        best_g[key] = g
        heapq.heappush(queue, (-priority, prefix, kind, -depth, pushed, state, g, arc, parent))
        pushed += 1

    while queue:
        _, prefix, kind, _, _, state, g, arc, parent = heapq.heappop(queue)
        key = (state, prefix)
        if key in closed:
            continue
        if kind == _END:
            closed.add(key)
            found.append((g, _path(node_arc, node_parent, parent)))
            if len(found) == k:
                break
            continue
        if len(node_arc) >= limit:
            truncated = True
            break
        if len(node_arc) % _DEADLINE_EVERY == 0:
            check_deadline(dag.deadline)
        closed.add(key)
        node = len(node_arc)
        node_arc.append(arc)
        node_parent.append(parent)
        if final[state] > -math.inf:
            end_score = g + final[state]
            push(end_score, prefix, _END, 0, -1, end_score, -1, node)
        for a, d, depth, score, h, label in graph.leaving(state):
            if h == -math.inf:  # no final state beyond this arc
                continue
            child = prefix
            if label >= 0:
                child = children.get((prefix, label))
                if child is None:
                    child = children[(prefix, label)] = _Prefix(prefix, label)
            push(g + h, child, _STATE, depth, d, g + score, a, node)
    found.sort(key=lambda item: -item[0])  # stable: only reorders scores that differ by rounding
    return DistinctKBest(found, len(node_arc), pushed, truncated)


class _OutArcs:
    """The arcs leaving each state, for the search: CPU arrays grouped by source state."""

    def __init__(self, dag: Dag, labels: Tensor, beta: Tensor) -> None:
        order, starts = arcs_by_state(dag.num_states, dag.src.cpu().numpy())
        self.offsets = starts.tolist()
        h = dag.score + beta[dag.dst]  # best score of a complete path from the arc's source through it
        dst = dag.dst.cpu().numpy()
        self.columns = (order, dst[order], dag.level.cpu().numpy()[dst[order]],
                        dag.score.cpu().double().numpy()[order], h.cpu().double().numpy()[order],
                        labels.cpu().numpy()[order])

    def leaving(self, state: int) -> zip:
        """``(arc, dst, level of dst, score, h, label)`` of each arc leaving ``state``, as Python numbers."""
        lo, hi = self.offsets[state], self.offsets[state + 1]
        return zip(*(column[lo:hi].tolist() for column in self.columns))


def _path(node_arc: list[int], node_parent: list[int], node: int) -> Tensor:
    """int64 arc ids from the start to expanded node ``node``, in path order."""
    arcs = []
    while node >= 0:
        if node_arc[node] >= 0:
            arcs.append(node_arc[node])
        node = node_parent[node]
    return torch.tensor(arcs[::-1], dtype=torch.int64)
