"""Levels and reachability of a lattice's graph, on the CPU: numpy arrays in and out.

Kahn's algorithm and the passes in level order are loops over the arcs, compiled
(:mod:`lattices.compiled`): their cost is the number of states and arcs, with no fixed cost per
level (as whole-array numpy steps, one per level, a numpy call cost about a microsecond, about
15 us a level: a 100-level lattice took 2 ms, and every lattice built, subset or minimized goes
through them).

Arrays: ``src``, ``dst`` int64 ``(A,)`` state ids in ``0..S-1``; ``levels`` int64 ``(S,)``.
"""

from __future__ import annotations

import numpy as np

from lattices.compiled import compiled


def arcs_by_state(num_states: int, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR index of the arcs by source state: ``order`` int64 ``(A,)`` (arc ids sorted by source,
    stable) and ``starts`` int64 ``(S + 1,)``: the arcs leaving state ``s`` are
    ``order[starts[s]:starts[s + 1]]``."""
    order = np.argsort(src, kind="stable")
    starts = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_states), out=starts[1:])
    return order, starts


def gather(order: np.ndarray, starts: np.ndarray, states: np.ndarray) -> np.ndarray:
    """int64: the ids of the arcs leaving ``states`` (grouped by state, in ``states`` order),
    from the CSR index of :func:`arcs_by_state`. Costs the number of those arcs."""
    if states.size == 1:  # a chain's level: a slice
        state = int(states[0])
        return order[starts[state]:starts[state + 1]]
    lo, hi = starts[states], starts[states + 1]
    counts = hi - lo
    total = int(counts.sum())
    if total == 0:
        return order[:0]
    ends = np.cumsum(counts)
    owner = np.repeat(np.arange(len(states)), counts)
    return order[lo[owner] + np.arange(total) - (ends - counts)[owner]]


def longest_path_levels(num_states: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """int64 ``(S,)``: each state's longest-path depth from the sources (states without incoming
    arcs), so that every arc goes to a deeper level; None when the graph has a cycle."""
    order, starts = arcs_by_state(num_states, src)
    level = _kahn_levels(num_states, np.ascontiguousarray(dst, dtype=np.int64), order.astype(np.int64), starts)
    return level if num_states == 0 or level.min() >= 0 else None


@compiled
def _kahn_levels(num_states: int, dst: np.ndarray, order: np.ndarray, starts: np.ndarray
                 ) -> np.ndarray:  # pragma: no cover (compiled)
    """Kahn's algorithm: a state is taken once every arc into it has been, and its level is one
    more than its deepest predecessor's; -1 where a cycle leaves states untaken."""
    indegree = np.zeros(num_states, dtype=np.int64)
    for a in range(dst.shape[0]):
        indegree[dst[a]] += 1
    level = np.full(num_states, -1, dtype=np.int64)
    depth = np.zeros(num_states, dtype=np.int64)
    queue = np.empty(num_states, dtype=np.int64)
    tail = 0
    for s in range(num_states):
        if indegree[s] == 0:
            queue[tail] = s
            tail += 1
    head = 0
    while head < tail:
        s = queue[head]
        head += 1
        level[s] = depth[s]
        for i in range(starts[s], starts[s + 1]):
            d = dst[order[i]]
            if depth[s] + 1 > depth[d]:
                depth[d] = depth[s] + 1
            indegree[d] -= 1
            if indegree[d] == 0:
                queue[tail] = d
                tail += 1
    return level


def reachable(num_states: int, seeds: np.ndarray, frm: np.ndarray, to: np.ndarray, levels: np.ndarray,
              backward: bool = False) -> np.ndarray:
    """bool ``(S,)``: the states reached from ``seeds`` (int64 state ids) along arcs ``frm -> to``.

    ``levels`` orders the pass: arcs are taken in increasing level of ``frm`` (decreasing with
    ``backward``, for arcs given reversed: ``frm = dst``, ``to = src``)."""
    mark = np.zeros(num_states, dtype=bool)
    mark[seeds] = True
    order, _ = level_order(frm, levels)
    _mark_along(mark, np.ascontiguousarray(frm, dtype=np.int64), np.ascontiguousarray(to, dtype=np.int64),
                order[::-1].copy() if backward else order)
    return mark


@compiled
def _mark_along(mark: np.ndarray, frm: np.ndarray, to: np.ndarray, order: np.ndarray) -> None:  # pragma: no cover
    """Marks ``to[a]`` for each arc ``a`` in ``order`` whose ``frm[a]`` is marked (in place)."""
    for a in order:
        if mark[frm[a]]:
            mark[to[a]] = True


def level_order(end: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Arc ids sorted by ``levels[end]`` (stable: arc id order within a level) and the offsets of
    each level's run (``L + 1`` ints): the arcs of the ``i``-th level that has any are
    ``order[offsets[i]:offsets[i + 1]]``."""
    key = levels[end]
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    return order, [0, *bounds.tolist(), int(order.shape[0])]
