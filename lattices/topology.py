"""Levels and reachability of a lattice's graph, on the CPU in numpy.

These passes go level by level (Kahn's algorithm), so their cost is the number of arcs plus a
fixed cost per level. A level of a narrow lattice (a chain, a frame-level Kaldi ``Lattice``)
holds a few arcs, and there the fixed cost is all that counts: a numpy call costs about a
microsecond and a small torch call about ten, so these passes run in numpy (about 15 us per
level instead of 150 us: a 100-level lattice is checked in 2 ms) and hand torch tensors back.

Arrays: ``src``, ``dst`` int64 ``(A,)`` state ids in ``0..S-1``; ``levels`` int64 ``(S,)``.
"""

from __future__ import annotations

import numpy as np


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
    indegree = np.bincount(dst, minlength=num_states)
    level = np.full(num_states, -1, dtype=np.int64)
    order, starts = arcs_by_state(num_states, src)
    frontier = np.flatnonzero(indegree == 0)
    depth = done = 0
    while frontier.size:
        level[frontier] = depth
        done += frontier.size
        targets = dst[gather(order, starts, frontier)]
        np.subtract.at(indegree, targets, 1)
        ready = targets[indegree[targets] == 0]  # a state with several arcs from this level is there as often
        frontier = np.unique(ready) if ready.size > 1 else ready
        depth += 1
    return level if done == num_states else None


def reachable(num_states: int, seeds: np.ndarray, frm: np.ndarray, to: np.ndarray, levels: np.ndarray,
              backward: bool = False) -> np.ndarray:
    """bool ``(S,)``: the states reached from ``seeds`` (int64 state ids) along arcs ``frm -> to``.

    ``levels`` orders the passes: arcs are taken in increasing level of ``frm`` (decreasing with
    ``backward``, for arcs given reversed: ``frm = dst``, ``to = src``), one level at a time."""
    mark = np.zeros(num_states, dtype=bool)
    mark[seeds] = True
    order, offsets = level_order(frm, levels)
    passes = range(len(offsets) - 2, -1, -1) if backward else range(len(offsets) - 1)
    for i in passes:
        arcs = order[offsets[i]:offsets[i + 1]]
        reached = arcs[mark[frm[arcs]]]
        mark[to[reached]] = True
    return mark


def level_order(end: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Arc ids sorted by ``levels[end]`` (stable: arc id order within a level) and the offsets of
    each level's run (``L + 1`` ints): the arcs of the ``i``-th level that has any are
    ``order[offsets[i]:offsets[i + 1]]``."""
    key = levels[end]
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    return order, [0, *bounds.tolist(), int(order.shape[0])]
