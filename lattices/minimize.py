"""Weight pushing and minimization of acyclic weighted acceptors (lattices), exactly.

Scores are component vectors (:mod:`lattices.determinize`: ``C`` named first-pass scores per
arc). :func:`minimize` pushes the weights towards the start and then merges equivalent states
bottom-up (Revuz's algorithm for acyclic automata: states grouped by height, the length of their
longest path to a state without arcs; a state's signature is its finality, its final weight and
its set of ``(word, weight vector, class of destination)``; equal signatures are merged).

Pushing uses the potential ``V(q)``: for each component, the highest value of that component
over the paths from ``q`` to the end. Any potential keeps every path's total (the arc weights
become ``x + V(dst) - V(src)``, final weights ``f - V(q)``, and the start keeps potential 0, so
its arcs carry the rest); this one depends only on the weighted right language of ``q`` and
moves with it by a constant, so two states whose futures differ by a constant weight get the same
pushed signature. Hence no ordering weights are needed, and:

* exact for any acyclic lattice: the same paths' word sequences and component totals (so the same
  best component vector per word sequence under every ordering), up to rounding: weights are
  compared after rounding to ``delta`` (:data:`lattices.determinize.DELTA`), so a total may move
  by at most ``delta`` per arc;
* minimal when the input is word-deterministic and epsilon-free (:func:`determinize`'s output):
  the fewest states of any deterministic acceptor with the same sequence -> vector function
  (Mohri: push, then minimize as an unweighted automaton); on unweighted input, the minimal DFA.

On a non-deterministic input the result is a path-preserving quotient, not necessarily minimal.
Extras (times, pronunciations) are dropped; ``key``, ``symbols``, ``meta`` and score names kept.
"""

from __future__ import annotations

import numpy as np

from lattices import topology
from lattices.determinize import DELTA, build_lattice, score_components
from lattices.lattice import Lattice


def push_potentials(num_states: int, src: np.ndarray, dst: np.ndarray, x: np.ndarray, finals: np.ndarray,
                    fx: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """float64 ``(S, C)``: for each state and component, the highest total of that component over
    the paths from the state to the end (final weight included), one whole-array step per level.

    ``src``, ``dst`` int64 ``(A,)``; ``x`` float64 ``(A, C)``; ``finals`` int64 ``(F,)``;
    ``fx`` float64 ``(F, C)``; ``levels`` int64 ``(S,)`` with every arc going deeper."""
    potential = np.full((num_states, x.shape[1]), -np.inf)
    potential[finals] = fx
    order, offsets = topology.level_order(src, levels)
    for i in range(len(offsets) - 2, -1, -1):
        part = order[offsets[i]:offsets[i + 1]]
        np.maximum.at(potential, src[part], potential[dst[part]] + x[part])
    return potential


def push(lattice: Lattice) -> Lattice:
    """The lattice with its weights pushed towards the start (module docstring): every path keeps
    its component totals; at every state but the start, the best value of each component over the
    ways to the end is 0. Same graph, same arcs order. Returns a new lattice."""
    _, x, fx = score_components(lattice)
    src, dst, finals = (t.cpu().numpy().astype(np.int64) for t in (lattice.src, lattice.dst, lattice.finals))
    potential = push_potentials(lattice.num_states, src, dst, x, finals, fx, lattice.levels.cpu().numpy())
    potential[lattice.start] = 0.0
    return build_lattice(lattice, lattice.num_states, lattice.start, src, dst, lattice.words.cpu().numpy(),
                         x + potential[dst] - potential[src], finals, fx - potential[finals])


def minimize(lattice: Lattice, delta: float = DELTA) -> Lattice:
    """The minimized lattice (module docstring): weights pushed, equivalent states merged.

    Args:
      lattice: an acyclic lattice, best word-deterministic (:func:`lattices.determinize.determinize`).
      delta: weights are compared after rounding to this many nats (0: bit equality).

    Returns a new lattice with at most ``lattice.num_states`` states, numbered in a topological
    order (start 0); every path's word sequence and component totals kept (up to ``delta`` per
    arc). ``lattice`` is not changed.
    """
    _, x, fx = score_components(lattice)
    n, c = lattice.num_states, x.shape[1]
    src, dst, words, finals = (t.cpu().numpy().astype(np.int64) for t in
                               (lattice.src, lattice.dst, lattice.words, lattice.finals))
    potential = push_potentials(n, src, dst, x, finals, fx, lattice.levels.cpu().numpy())
    potential[lattice.start] = 0.0
    px = x + potential[dst] - potential[src]
    pfx = np.zeros((n, c))
    pfx[finals] = fx - potential[finals]
    is_final = np.zeros(n, dtype=bool)
    is_final[finals] = True

    def rounded(values: np.ndarray) -> np.ndarray:
        return np.rint(values / delta).astype(np.int64) if delta > 0 else (values + 0.0).view(np.int64)

    qx, qf = rounded(px), rounded(pfx)
    height = topology.longest_path_levels(n, dst, src)  # longest path to a state without arcs
    by_height = np.argsort(height, kind="stable")
    state_bounds = np.r_[0, np.flatnonzero(np.diff(height[by_height])) + 1, n]
    arc_order, arc_bounds = topology.level_order(src, height)  # arcs by the height of their source
    arc_heights = height[src[arc_order]]
    cls = np.full(n, -1, dtype=np.int64)
    table: dict[bytes, int] = {}
    representative: list[int] = []
    j = 0
    for lo, hi in zip(state_bounds[:-1], state_bounds[1:]):
        states = by_height[lo:hi]
        has_arcs = j < len(arc_bounds) - 1 and arc_bounds[j] < len(arc_order)
        if has_arcs and arc_heights[arc_bounds[j]] == height[states[0]]:
            arcs = arc_order[arc_bounds[j]:arc_bounds[j + 1]]
            j += 1
        else:
            arcs = arc_order[:0]
        rows = np.column_stack([src[arcs], words[arcs], cls[dst[arcs]], qx[arcs]])
        if len(rows):
            rows = rows[np.lexsort(rows.T[::-1])]
            keep = np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)]  # a repeated (word, weight, class)
            rows = rows[keep]
        begin = np.searchsorted(rows[:, 0], states, side="left") if len(rows) else np.zeros(len(states), np.int64)
        end = np.searchsorted(rows[:, 0], states, side="right") if len(rows) else begin
        body = np.ascontiguousarray(rows[:, 1:])
        for state, b, e in zip(states.tolist(), begin.tolist(), end.tolist()):
            head = b"S" if state == lattice.start else (b"F" + qf[state].tobytes() if is_final[state] else b"N")
            key = head + body[b:e].tobytes()
            found = table.get(key)
            if found is None:
                found = table[key] = len(representative)
                representative.append(state)
            cls[state] = found
    reps = np.array(representative, dtype=np.int64)
    # number classes by decreasing height (a topological order; the start is the only state of its height)
    rank = np.argsort(-height[reps], kind="stable")
    new_id = np.empty(len(reps), dtype=np.int64)
    new_id[rank] = np.arange(len(reps))
    keep_state = np.zeros(n, dtype=bool)
    keep_state[reps] = True
    arcs = np.flatnonzero(keep_state[src])
    arc_key = np.column_stack([new_id[cls[src[arcs]]], words[arcs], new_id[cls[dst[arcs]]], qx[arcs]])
    _, first = np.unique(arc_key, axis=0, return_index=True)  # drop repeated (word, weight, class) arcs
    arcs = arcs[np.sort(first)]
    arcs = arcs[np.lexsort((words[arcs], new_id[cls[src[arcs]]]))]
    fin = reps[is_final[reps]]
    fin = fin[np.argsort(new_id[cls[fin]])]
    return build_lattice(lattice, len(reps), int(new_id[cls[lattice.start]]), new_id[cls[src[arcs]]],
                         new_id[cls[dst[arcs]]], words[arcs], px[arcs], new_id[cls[fin]], pfx[fin])


__all__ = ["minimize", "push", "push_potentials"]
