"""Epsilon removal and (pruned) determinization on words, exact in a generalised tropical semiring.

A lattice's first-pass scores are ``C`` named components (:meth:`Lattice.named_scores`:
``acoustic`` and ``graph``, or an n-best list's ``decoder``, ``ctc``...). Both operations work in
the semiring of Kaldi's ``LatticeWeight`` generalised to ``C`` components: a weight is a float64
vector ``x`` ``(C,)``, the product of two weights is their sum, and their "sum" keeps the better
one, paths being ordered by ``w . x`` for the given ordering vector ``w`` ``(C,)`` (the request's
weights; higher is better, as every score in :mod:`lattices.lattice`), ties broken by the
components themselves in order (higher first), so that the choice is deterministic.

What is exact: for every word sequence of the input, the output holds that sequence once (no
state has two arcs with the same word, no epsilons), with the component vector of its best path
under ``w``. So the Viterbi best path and the n-best word sequences under ``w`` are exact, their
component vectors included, and with one component (PocketSphinx's acoustic-only lattices) they
are exact for *every* positive weight. The sums of the other paths of a sequence are lost: arc
posteriors and MBR need the log semiring (determinization with log-sum-exp "plus"), which is not
done here. "Exact" is up to floating-point rounding: two determinized states are merged when
their residual weights agree after rounding to ``delta`` (default ``1e-6``, like Kaldi's
``delta``), so a sequence's vector may be off by at most ``delta`` per word.

Symbols removed (treated as epsilon): id 0, the ``skip`` symbols (default
:data:`lattices.expand.DEFAULT_SKIP`: sentence boundaries, silence, noise) and Kaldi's
disambiguation symbols ``#0``, ``#1``... Per-arc and per-state extras (times, pronunciations,
transition ids) have no meaning on merged states and are dropped; ``key``, ``symbols`` and
``meta`` are kept, and the score components keep their names.

Pruned determinization (``beam``) follows Kaldi's ``lat/determinize-lattice-pruned.cc``:
transitions out of determinized states are processed best-first from a priority queue whose
priority is the score of the best complete path through the transition; transitions (and final
weights) whose priority is below ``best - beam`` are dropped (less a rounding tolerance of
``1e-9 * (1 + |best|)``). Guarantees, as Kaldi's: (a) every word sequence whose best pruning
score is within ``beam`` of the best is kept, with its exact best component vector; (b) every
kept arc and final weight lies on a kept path whose sequence is within the beam; (c) every kept
sequence is a sequence of the input, and some outside the beam may be kept, because
determinized states are shared. A subset also drops the elements (input states) through which
no path within the beam passes (Kaldi keeps them): states that differ only there merge, which
makes the result several times smaller and faster to build, and a kept sequence *outside* the
beam then carries the components of one of its paths, not necessarily its best; the input's arcs
through which no path comes within the beam are taken out before the epsilon closure (they
change nothing but the work: 85% of a PocketSphinx dev lattice's arcs at a beam of 10).

With ``max_states`` the queue stops before the state that would pass the limit, and
:class:`DeterminizationTooLarge` carries the partial result and the largest beam that fits (as
Kaldi's effective beam): best-first order makes the partial result hold every sequence within
that beam, and a second call with that beam stays within ``max_states``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch
from torch import Tensor

from lattices import topology
from lattices.compiled import compiled
from lattices.expand import DEFAULT_SKIP, is_disambiguation
from lattices.lattice import Lattice
from lattices.search import Dag, beam_tolerance

#: residual weights that agree after rounding to this many nats are taken as equal
DELTA = 1e-6

#: the determinizer drops rows that cannot matter before grouping them when a state has more rows
#: than this (below it, the grouping costs less than the test)
PREFILTER_ROWS = 32

Weights = Union[Mapping[str, float], Sequence[float], np.ndarray, Tensor]


class DeterminizationTooLarge(ValueError):
    """Determinization stopped at ``max_states`` states.

    Attributes: ``key``; ``max_states``; ``effective_beam`` (a beam that fits: determinizing
    again with it stays within ``max_states``, and every word sequence whose pruning score is
    within it of the best is in ``partial``; None when not even the best path fits);
    ``partial`` (the determinized lattice built so far, trimmed; None when it has no complete
    path yet).
    """

    def __init__(self, key: str, max_states: int, effective_beam: float | None, partial: Lattice | None) -> None:
        self.key, self.max_states, self.effective_beam, self.partial = key, max_states, effective_beam, partial
        fits = ("not even the best path fits" if effective_beam is None
                else f"a beam of {effective_beam:.4g} fits")
        super().__init__(f"lattice {key!r}: determinization reached max_states={max_states} states with "
                         f"transitions left within the beam; {fits}")


# ---------------------------------------------------------------------------------------- arrays
@dataclass(frozen=True)
class _Graph:
    """An acyclic weighted acceptor as numpy arrays (``S`` states, ``A`` arcs, ``F`` finals, ``C`` components).

    src, dst, word: int64 ``(A,)`` (``word`` 0 is epsilon); x: float64 ``(A, C)`` score
    components; p: float64 ``(A,)`` pruning score (``w . x``, summed along paths apart from
    ``x``); finals: int64 ``(F,)`` distinct; fx: float64 ``(F, C)``; fp: float64 ``(F,)``.
    """

    num_states: int
    start: int
    src: np.ndarray
    dst: np.ndarray
    word: np.ndarray
    x: np.ndarray
    p: np.ndarray
    finals: np.ndarray
    fx: np.ndarray
    fp: np.ndarray


def score_components(lattice: Lattice) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """The names of the lattice's score components and their values: float64 ``(A, C)`` per arc
    and ``(F, C)`` per final state (numpy, CPU), in :meth:`Lattice.named_scores` order."""
    named = lattice.named_scores()
    arcs = [values.detach().cpu().numpy().astype(np.float64) for values, _ in named.values()]
    finals = [values.detach().cpu().numpy().astype(np.float64) for _, values in named.values()]
    return (tuple(named), np.stack(arcs, axis=1).reshape(lattice.num_arcs, len(named)),
            np.stack(finals, axis=1).reshape(int(lattice.finals.shape[0]), len(named)))


def ordering_vector(weights: Weights, names: Sequence[str]) -> np.ndarray:
    """float64 ``(C,)``: the weight of each component in ``names``.

    ``weights`` is a mapping from component name to weight (every name needed; other keys, such
    as a new LM's weight, are ignored) or a sequence of ``C`` weights in ``names`` order. Raises
    ``ValueError`` for a missing name, a wrong length, a weight that is negative or not finite,
    or all weights zero."""
    if isinstance(weights, Mapping):
        missing = [name for name in names if name not in weights]
        if missing:
            raise ValueError(f"weights lack the score component(s) {missing}; the lattice has {list(names)}")
        w = np.array([float(weights[name]) for name in names], dtype=np.float64)
    else:
        values = weights.detach().cpu().numpy() if isinstance(weights, Tensor) else weights
        w = np.asarray(values, dtype=np.float64).reshape(-1)
        if w.shape != (len(names),):
            raise ValueError(f"{w.shape[0]} weights given for the {len(names)} score components {list(names)}")
    if not np.isfinite(w).all() or (w < 0).any() or not (w > 0).any():
        raise ValueError(f"weights must be finite, non-negative and not all zero, got {w.tolist()}")
    return w


def skipped_symbol_ids(symbols: Sequence[str], ids: Iterable[int], skip: Iterable[str] = DEFAULT_SKIP) -> np.ndarray:
    """int64: those of ``ids`` that are not words: 0, empty spellings, ``skip`` symbols and
    disambiguation symbols (``#0``, ``#1``...)."""
    skip = frozenset(skip)
    return np.array([i for i in ids if i == 0 or not symbols[i] or symbols[i] in skip or is_disambiguation(symbols[i])],
                    dtype=np.int64)


def epsilon_words(lattice: Lattice, skip: Iterable[str] = DEFAULT_SKIP) -> np.ndarray:
    """int64 ``(A,)``: the lattice's arc words as determinization sees them, each symbol it removes
    (:func:`skipped_symbol_ids`) as epsilon, 0."""
    words = lattice.words.cpu().numpy().astype(np.int64)
    return np.where(np.isin(words, skipped_symbol_ids(lattice.symbols, np.unique(words).tolist(), skip)), 0, words)


def _graph(lattice: Lattice, w: np.ndarray, skip: Iterable[str]) -> _Graph:
    _, x, fx = score_components(lattice)
    words = epsilon_words(lattice, skip)
    p, fp = x @ w, fx @ w
    return _Graph(lattice.num_states, lattice.start, lattice.src.cpu().numpy().astype(np.int64),
                  lattice.dst.cpu().numpy().astype(np.int64), words, x, p,
                  lattice.finals.cpu().numpy().astype(np.int64), fx, fp)


def build_lattice(template: Lattice, num_states: int, start: int, src: np.ndarray, dst: np.ndarray,
                  words: np.ndarray, x: np.ndarray, finals: np.ndarray, fx: np.ndarray) -> Lattice:
    """A lattice with ``template``'s key, symbols, meta, score names and device, and the given
    graph: int64 ``(A,)`` src/dst/words, float64 ``(A, C)`` components ``x``, int64 ``(F,)``
    finals and float64 ``(F, C)`` final components ``fx``. No extras (they belong to the old graph)."""
    device = template.device
    names = tuple(template.named_scores())

    def tensor(values: np.ndarray, dtype: torch.dtype) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(values)).to(device=device, dtype=dtype)

    a, f = len(src), len(finals)
    if template.scores:
        comps = {"acoustic": tensor(np.zeros(a), torch.float64), "graph": tensor(np.zeros(a), torch.float64),
                 "final_acoustic": tensor(np.zeros(f), torch.float64),
                 "final_graph": tensor(np.zeros(f), torch.float64),
                 "scores": {n: tensor(x[:, i], torch.float64) for i, n in enumerate(names)},
                 "final_scores": {n: tensor(fx[:, i], torch.float64) for i, n in enumerate(names)}}
    else:
        comps = {"acoustic": tensor(x[:, 0], torch.float64), "graph": tensor(x[:, 1], torch.float64),
                 "final_acoustic": tensor(fx[:, 0], torch.float64), "final_graph": tensor(fx[:, 1], torch.float64),
                 "scores": {}, "final_scores": {}}
    return Lattice(key=template.key, num_states=num_states, start=start, src=tensor(src, torch.int64),
                   dst=tensor(dst, torch.int64), words=tensor(words, torch.int64), finals=tensor(finals, torch.int64),
                   symbols=template.symbols, meta=dict(template.meta), **comps)


def best_of_groups(keys: Sequence[np.ndarray], x: np.ndarray, score: np.ndarray,
                   p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows grouped by equal ``keys`` (non-negative int64 ``(N,)`` columns, primary first):
    the index of each group's best row (highest ``score`` ``(N,)``, ties to the highest
    components ``x`` ``(N, C)`` in order, then the lowest index) and each group's highest ``p``
    ``(N,)``. Groups come in increasing key order. Returns int64 ``(G,)`` and float64 ``(G,)``.

    The keys packed into one int64, then one compiled pass (:func:`_best_in_groups`); keys too
    large to pack go through a sort on every component."""
    n = len(score)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    key, span = keys[0], 1
    for column in keys[1:]:
        size = int(column.max()) + 1
        span = (int(key.max()) + 1) * size
        if span >= 2 ** 62:
            return _best_of_groups_by_components(keys, x, score, p)
        key = key * size + column
    return _best_in_groups(np.ascontiguousarray(key, dtype=np.int64), np.ascontiguousarray(score, dtype=np.float64),
                           np.ascontiguousarray(x, dtype=np.float64), np.ascontiguousarray(p, dtype=np.float64))


@compiled
def _best_in_groups(key: np.ndarray, score: np.ndarray, x: np.ndarray, p: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover (compiled)
    """:func:`best_of_groups`'s rule for one int64 ``key`` ``(N,)``: the rows by key (a stable
    sort), each group's best the row of highest ``score``, then of highest components ``x`` ``(N,
    C)`` in order, then of lowest index; and each group's highest ``p``. Only comparisons: the
    values chosen are the caller's, bit for bit."""
    n = key.shape[0]
    order = np.argsort(key, kind="mergesort")
    best = np.empty(n, dtype=np.int64)
    top = np.empty(n)
    groups = -1
    previous = 0
    for i in range(n):
        r = order[i]
        if i == 0 or key[r] != previous:
            groups += 1
            best[groups] = r
            top[groups] = p[r]
            previous = key[r]
            continue
        if p[r] > top[groups]:
            top[groups] = p[r]
        if _better(score, x, r, best[groups]):
            best[groups] = r
    return best[:groups + 1].copy(), top[:groups + 1].copy()


@compiled
def _better(score: np.ndarray, x: np.ndarray, r: int, b: int) -> bool:  # pragma: no cover (compiled)
    """Whether row ``r`` beats row ``b`` (the determinizer's order): a higher ``score``, or an
    equal one and higher components ``x`` ``(N, C)`` in order; a full tie keeps ``b``."""
    if score[r] != score[b]:
        return score[r] > score[b]
    for c in range(x.shape[1]):
        if x[r, c] != x[b, c]:
            return x[r, c] > x[b, c]
    return False


def _best_of_groups_by_components(keys: Sequence[np.ndarray], x: np.ndarray, score: np.ndarray,
                                  p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`best_of_groups` with every component in the sort (for ties and huge keys)."""
    columns = [-x[:, c] for c in range(x.shape[1] - 1, -1, -1)]
    order = np.lexsort([*columns, -score, *reversed(keys)])
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for key in keys:
        k = key[order]
        new[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(new)
    return order[starts], np.maximum.reduceat(p[order], starts)


def _quantize(values: np.ndarray, delta: float) -> np.ndarray:
    """Bytes-ready canonical form of residual weights: rounded to ``delta`` (int64), or the
    float64 values with ``-0.0`` made ``0.0`` when ``delta`` is 0 (exact equality)."""
    if delta > 0:
        return np.rint(values / delta).astype(np.int64)
    return values + 0.0


def _dag(g: _Graph, levels: np.ndarray, p: np.ndarray | None = None, fp: np.ndarray | None = None) -> Dag:
    """``g`` as a :class:`lattices.search.Dag` on its pruning scores (or on ``p`` ``(A,)`` and
    ``fp`` ``(F,)``), for its forward and backward passes; ``levels`` as in :func:`_trim`."""
    scores = g.p if p is None else p
    finals = g.fp if fp is None else fp
    return Dag(g.num_states, g.start, torch.from_numpy(g.src), torch.from_numpy(g.dst), torch.from_numpy(scores),
               torch.from_numpy(g.finals), torch.from_numpy(finals), torch.from_numpy(levels))


def _trim(g: _Graph, levels: np.ndarray) -> tuple[_Graph, np.ndarray]:
    """``g`` without the states that are not on a start-to-final path, renumbered in order, and
    ``levels`` (int64 ``(S,)``, ``levels[dst] > levels[src]`` for every arc) of its states."""
    alive = topology.reachable(g.num_states, np.array([g.start]), g.src, g.dst, levels)
    alive &= topology.reachable(g.num_states, g.finals, g.dst, g.src, levels, backward=True)
    if alive.all():
        return g, levels
    new_id = np.cumsum(alive) - 1
    arcs = alive[g.src] & alive[g.dst]
    fin = alive[g.finals]
    return (_Graph(int(alive.sum()), int(new_id[g.start]), new_id[g.src[arcs]], new_id[g.dst[arcs]], g.word[arcs],
                   g.x[arcs], g.p[arcs], new_id[g.finals[fin]], g.fx[fin], g.fp[fin]), levels[alive])


def _segments(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs of ``counts`` ``(K,)`` items: each item's run (int64 ``(N,)``) and its position in the run."""
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts)), counts)
    return owner, np.arange(total) - (np.cumsum(counts) - counts)[owner]


# ------------------------------------------------------------------------------ epsilon removal
class _Pairs:
    """A growing table of epsilon-closure pairs ``(q, r, x, p)`` (int64, int64, float64 ``(C,)``,
    float64), appended in chunks at amortised constant cost per pair; the properties are views
    of the ``size`` rows filled so far."""

    def __init__(self, components: int) -> None:
        self.size = 0
        self._q, self._r = np.zeros(16, np.int64), np.zeros(16, np.int64)
        self._x, self._p = np.zeros((16, components)), np.zeros(16)

    def append(self, q: np.ndarray, r: np.ndarray, x: np.ndarray, p: np.ndarray) -> None:
        end = self.size + len(q)
        if end > len(self._q):
            grow = max(end, 2 * len(self._q))
            self._q, self._r = np.resize(self._q, grow), np.resize(self._r, grow)
            self._x, self._p = np.resize(self._x, (grow, self._x.shape[1])), np.resize(self._p, grow)
        self._q[self.size:end], self._r[self.size:end], self._x[self.size:end], self._p[self.size:end] = q, r, x, p
        self.size = end

    q = property(lambda self: self._q[:self.size])
    r = property(lambda self: self._r[:self.size])
    x = property(lambda self: self._x[:self.size])
    p = property(lambda self: self._p[:self.size])


def _remove_epsilons(g: _Graph, w: np.ndarray, levels: np.ndarray) -> tuple[_Graph, np.ndarray]:
    """``g`` without epsilon arcs (word 0), trimmed, and the ``levels`` of its states.

    ``levels``: int64 ``(S,)`` with ``levels[dst] > levels[src]`` for every arc of ``g`` (its
    longest-path depths, or those of a graph it is part of); they hold for the result too (a
    closure state's copy of an arc leaves a state no deeper than the arc's source).

    Each state ``q`` gets the epsilon closure ``{(r, best epsilon path q -> r)}`` (computed level
    by level from the deepest, on whole arrays), a copy of every word arc of each ``r`` with the
    epsilon path's weight added in front, and the best final weight through it. Parallel arcs
    (same source, word and destination) are merged into the best one (highest ``p`` for the
    pruning score)."""
    eps = g.word == 0
    if not eps.any():
        return g, levels
    n, c = g.num_states, g.x.shape[1]
    e = np.flatnonzero(eps)
    e = e[np.argsort(-levels[g.src[e]], kind="stable")]
    bounds = [0, *(np.flatnonzero(np.diff(levels[g.src[e]])) + 1).tolist(), len(e)]
    first, count = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    pairs = _Pairs(c)  # (q, r, x, p): the best epsilon path q -> r, each q's pairs together
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # deepest level first: closures of destinations are done
        arcs = e[lo:hi]
        q, r, x, p = g.src[arcs], g.dst[arcs], g.x[arcs], g.p[arcs]
        owner, offset = _segments(count[r])
        pos = first[r][owner] + offset
        q = np.concatenate([q, q[owner]])
        r = np.concatenate([r, pairs.r[pos]])
        x = np.concatenate([x, x[owner] + pairs.x[pos]])
        p = np.concatenate([p, p[owner] + pairs.p[pos]])
        best, p = best_of_groups([q, r], x, x @ w, p)
        q, r, x = q[best], r[best], x[best]
        starts = np.flatnonzero(np.concatenate([[True], q[1:] != q[:-1]]))
        first[q[starts]] = pairs.size + starts
        count[q[starts]] = np.diff(np.append(starts, len(q)))
        pairs.append(q, r, x, p)
    pair_q, pair_r, pair_x, pair_p = pairs.q, pairs.r, pairs.x, pairs.p
    words = np.flatnonzero(~eps)
    order, starts = topology.arcs_by_state(n, g.src[words])
    owner, offset = _segments(starts[pair_r + 1] - starts[pair_r])
    arc = words[order[starts[pair_r][owner] + offset]]  # word arcs leaving each closure state
    src = np.concatenate([g.src[words], pair_q[owner]])
    dst = np.concatenate([g.dst[words], g.dst[arc]])
    word = np.concatenate([g.word[words], g.word[arc]])
    x = np.concatenate([g.x[words], pair_x[owner] + g.x[arc]])
    p = np.concatenate([g.p[words], pair_p[owner] + g.p[arc]])
    best, p = best_of_groups([src, word, dst], x, x @ w, p)
    final_pos = np.full(n, -1, dtype=np.int64)
    final_pos[g.finals] = np.arange(len(g.finals))
    via = final_pos[pair_r] >= 0
    fin = np.concatenate([g.finals, pair_q[via]])
    fx = np.concatenate([g.fx, pair_x[via] + g.fx[final_pos[pair_r[via]]]])
    fp = np.concatenate([g.fp, pair_p[via] + g.fp[final_pos[pair_r[via]]]])
    fbest, fp = best_of_groups([fin], fx, fx @ w, fp)
    out = _Graph(n, g.start, src[best], dst[best], word[best], x[best], p, fin[fbest], fx[fbest], fp)
    return _trim(out, levels)


# ------------------------------------------------------------------------------ determinization
def determinize(lattice: Lattice, weights: Weights, beam: float | None = None, max_states: int | None = None, *,
                skip: Iterable[str] = DEFAULT_SKIP, delta: float = DELTA, report: dict | None = None) -> Lattice:
    """The word-deterministic lattice of ``lattice`` (epsilons and ``skip`` symbols removed first).

    Args:
      lattice: an acyclic lattice (``A`` arcs, ``F`` final states, ``C`` score components).
      weights: the ordering vector ``w``: component name -> weight, or ``C`` weights
        (:func:`ordering_vector`). Paths are compared by ``w . x``.
      beam: None for exact determinization; else prune as Kaldi's
        ``lattice-determinize-pruned`` (module docstring): keep only transitions and final
        weights on paths whose score ``w . x`` is within ``beam`` of the best.
      max_states: stop before creating more determinized states than this, raising
        :class:`DeterminizationTooLarge` (with the partial result and the beam it reached).
      skip: symbols removed like epsilon.
      delta: residual weights equal after rounding to ``delta`` are merged (0: bit equality).
      report: a dict that gets ``cut``: whether the beam took anything out: an arc of the input
        on no path within it, a transition, a final weight or an element (False: every path was
        within the beam, and the result is the exact determinization), also when
        :class:`DeterminizationTooLarge` is raised.

    Returns a new lattice: start state 0, states numbered in creation order (best first), no
    epsilon arcs and no state with two arcs of the same word, each word sequence with the
    components of its best path (module docstring), trimmed. Raises ``ValueError`` for bad
    weights, a negative beam, or ``max_states < 1``.
    """
    if beam is not None and not beam >= 0:
        raise ValueError(f"beam must be a non-negative number, got {beam}")
    if max_states is not None and max_states < 1:
        raise ValueError(f"max_states must be at least 1, got {max_states}")
    names, _, _ = score_components(lattice)
    w = ordering_vector(weights, names)
    g = _graph(lattice, w, skip)
    levels = lattice.levels.cpu().numpy()
    cut = False
    if beam is not None and len(g.src):
        g, cut = _within_beam(g, w, beam, levels)
    g, levels = _remove_epsilons(g, w, levels)  # the input's levels: the margins are wider, the results the same
    beta = _dag(g, levels).backward().numpy()  # the best pruning score from each state to the end
    best = float(beta[g.start])
    cutoff = -math.inf if beam is None else best - beam - beam_tolerance(best)
    margin = _rounding_margin(g, w, levels, best) if cutoff > -math.inf and len(g.src) else math.inf
    determinizer = _Determinizer(g, w, beta, cutoff, max_states, delta, margin)
    determinizer.cut = cut
    out, stopped = determinizer.run()
    if report is not None:
        report["cut"] = determinizer.cut
    num_states, src, dst, word, x, finals, fx = out
    result = build_lattice(lattice, num_states, 0, src, dst, word, x, finals, fx) if len(finals) else None
    if result is not None and (beam is not None or stopped is not None):
        result = result.subset(torch.ones(result.num_arcs, dtype=torch.bool, device=result.device))
    if stopped is not None:
        fits = best - stopped - 2 * beam_tolerance(best)  # a beam whose cutoff is above the task it stopped at
        raise DeterminizationTooLarge(lattice.key, max_states or 0, fits if fits >= 0 else None, result)
    assert result is not None, f"no final state in the determinized {lattice.key!r}"
    return result


def _rounding_margin(g: _Graph, w: np.ndarray, levels: np.ndarray, best: float) -> float:
    """A bound, times a wide safety factor, on how far rounding can take a path's pruning score
    summed in one order from the same path's summed in another (a row's pruning residual from its
    ``w . x``, see :class:`_Determinizer`): from the largest sum of ``|w_c x_c|`` along a path and
    the longest path of ``g``."""
    size = float(_dag(g, levels, np.abs(g.x) @ w, np.abs(g.fx) @ w).backward()[g.start])
    return 1e-12 * (int(levels.max()) + 2) * (len(w) + 2) * (abs(size) + abs(best) + 1.0)


def _within_beam(g: _Graph, w: np.ndarray, beam: float, levels: np.ndarray) -> tuple[_Graph, bool]:
    """``g`` without the arcs through which no complete path comes within ``beam`` of the best
    (less the tolerance and :func:`_rounding_margin`), and whether any went.

    The subset construction never builds on such an arc: its rows score at most the best path
    through the arc, so the prefilter of :class:`_Determinizer` drops them, and without the
    prefilter they are neither a group's best nor its highest ``p``. Taking them out first keeps
    them out of the epsilon closure, which copies every word arc to each state that reaches it
    through epsilons: on PocketSphinx dev lattices 15% of the arcs are within a beam of 10.
    ``levels``: the longest-path depths of ``g``'s states."""
    dag = _dag(g, levels)
    alpha, beta = dag.forward().numpy(), dag.backward().numpy()
    best = float(beta[g.start])
    if not math.isfinite(best):
        return g, False
    threshold = best - beam - beam_tolerance(best) - _rounding_margin(g, w, levels, best)
    keep = alpha[g.src] + g.p + beta[g.dst] >= threshold
    if keep.all():
        return g, False
    return _Graph(g.num_states, g.start, g.src[keep], g.dst[keep], g.word[keep], g.x[keep], g.p[keep], g.finals,
                  g.fx, g.fp), True


class _Determinizer:
    """The subset construction of :func:`determinize` on an epsilon-free :class:`_Graph`.

    A determinized state is a subset of input states with residual weights: int64 ``(k,)``
    sorted states, float64 ``(k, C)`` component residuals (the best element's is 0) and float64
    ``(k,)`` pruning residuals, plus ``forward``, the best pruning score of reaching it (fixed at
    creation: the queue is processed in decreasing priority, so the first prefix that creates a
    state is its best). Creating a state computes its final weight and, on whole arrays, one
    transition per word leaving it (the destination subset, the arc's components, the priority);
    each becomes a task, found again by ``(state, index)``. Tasks are taken best first from a
    heap when there is a beam or a state limit, else in creation order.

    ``margin``: a bound, with a wide safety factor, on how far a row's pruning residual and its
    ``w . x`` can drift apart by rounding. Rows whose best way to the end is more than ``margin``
    below the cutoff are dropped before the ``(word, destination)`` grouping: such a row is never
    its group's best (a row within the beam beats it by more than the rounding) nor its highest
    ``p``, and a group with no row left is one the beam drops, so the result is the same as
    grouping every row, at the cost of the rows kept."""

    def __init__(self, g: _Graph, w: np.ndarray, beta: np.ndarray, cutoff: float, max_states: int | None,
                 delta: float, margin: float = math.inf) -> None:
        self.g, self.w, self.beta, self.cutoff, self.max_states = g, w, beta, cutoff, max_states
        self.delta = delta
        self.best_first = cutoff > -math.inf or max_states is not None
        # each path's pruning score is its ordering score: an element whose best way to the end
        # is outside the beam carries no best path of a sequence within the beam
        self.prune_elements = cutoff > -math.inf
        self.prefilter = self.prune_elements and math.isfinite(margin)
        self.threshold = cutoff - margin  # rows below it (less the forward score) cannot matter
        order = np.lexsort((g.dst, g.word, g.src))  # arcs by (source, word, destination)
        _, self.starts = topology.arcs_by_state(g.num_states, g.src)
        self.word, self.dst, self.x, self.p = g.word[order], g.dst[order], g.x[order], g.p[order]
        self.beta_dst = beta[self.dst]
        # the (word, destination) of each arc as one int64 key, ranked in (word, destination) order
        by_pair = np.lexsort((self.dst, self.word))
        fresh = np.ones(len(by_pair), dtype=bool)
        fresh[1:] = (self.word[by_pair][1:] != self.word[by_pair][:-1]) | (self.dst[by_pair][1:] != self.dst[by_pair][:-1])
        self.pair = np.empty(len(by_pair), dtype=np.int64)
        self.pair[by_pair] = np.cumsum(fresh) - 1
        self.seen = np.zeros(int(fresh.sum()), dtype=bool)  # scratch: pairs kept by the prefilter
        self.final_pos = np.full(g.num_states, -1, dtype=np.int64)
        self.final_pos[g.finals] = np.arange(len(g.finals))
        self.forward: list[float] = []
        self.transitions: list[tuple] = []  # per state: its transitions' arrays (see _create)
        self.tasks: list = []  # a heap of (-priority, count, state, index), or a list of (state, index)
        self.pushed = 0
        self.finals: list[int] = []
        self.final_x: list[np.ndarray] = []
        self.cut = False  # whether the beam dropped anything

    def run(self) -> tuple[tuple, float | None]:
        """Determinize. Returns ``(num_states, src, dst, word, x, finals, fx)`` arrays and the
        priority of the task it stopped at (None when the tasks ran out)."""
        c = self.g.x.shape[1]
        self._create(np.array([self.g.start]), np.zeros((1, c)), np.zeros(1), 0.0)
        table: dict[bytes, int] = {}
        arc_src: list[int] = []
        arc_index: list[int] = []
        arc_dst: list[int] = []
        stopped, done, tasks, transitions, forward = None, 0, self.tasks, self.transitions, self.forward
        best_first, max_states, pop = self.best_first, self.max_states, heapq.heappop
        while (done < len(tasks)) if not best_first else tasks:
            if best_first:
                negative, _, state, i = pop(tasks)
            else:
                (state, i), negative = tasks[done], 0.0
                done += 1
            dst, x_res, p_res, keys, bounds, _, _, arc_p, _ = transitions[state]
            lo, hi = bounds[i], bounds[i + 1]
            key = keys(lo, hi)
            target = table.get(key)
            if target is None:
                if max_states is not None and len(forward) >= max_states:
                    stopped = -negative
                    break
                target = table[key] = self._create(dst[lo:hi], x_res[lo:hi], p_res[lo:hi], forward[state] + arc_p[i])
            arc_src.append(state)
            arc_index.append(i)
            arc_dst.append(target)
        src, index = np.array(arc_src, dtype=np.int64), np.array(arc_index, dtype=np.int64)
        offsets = np.cumsum([0] + [len(t[6]) for t in transitions])
        words = np.concatenate([t[6] for t in transitions])
        all_x = np.concatenate([t[5] for t in transitions])
        flat = offsets[src] + index
        fx = np.stack(self.final_x) if self.final_x else np.zeros((0, c))
        out = (len(self.forward), src, np.array(arc_dst, dtype=np.int64), words[flat], all_x[flat],
               np.array(self.finals, dtype=np.int64), fx)
        return out, stopped

    def _create(self, states: np.ndarray, xres: np.ndarray, pres: np.ndarray, forward: float) -> int:
        """Add the determinized state of subset ``(states, xres, pres)`` reached with pruning
        score ``forward``: its final weight and its transitions, queued. Returns its id.

        The transitions (``T`` words, ``K`` destination elements in all) are kept as
        ``(dst (K,), x_res (K, C), p_res (K,), keys, bounds (T + 1,) list, arc_x (T, C), words (T,),
        arc_p (T,) list, priority (T,))``: transition ``i``'s subset is rows ``bounds[i]:bounds[i + 1]``
        and ``keys(lo, hi)`` its bytes in the table of subsets (destinations and quantized residuals)."""
        g, w, state = self.g, self.w, len(self.forward)
        self.forward.append(forward)
        fpos = self.final_pos[states]
        is_final = fpos >= 0
        if is_final.any():
            cand_x, cand_p = xres[is_final] + g.fx[fpos[is_final]], pres[is_final] + g.fp[fpos[is_final]]
            if forward + cand_p.max() >= self.cutoff:
                if len(cand_p) > 1:  # best_of_groups with one group: the first best, unless tied ones differ
                    score = cand_x @ w
                    i = int(score.argmax())
                    tied = score == score[i]
                    if int(tied.sum()) > 1 and (cand_x[tied] != cand_x[i]).any():
                        i = int(_best_of_groups_by_components([np.zeros(len(cand_p), np.int64)], cand_x, score,
                                                              cand_p)[0][0])
                    cand_x = cand_x[i:i + 1]
                self.finals.append(state)
                self.final_x.append(cand_x[0])
            else:
                self.cut = True
        # every arc of every element, elements in order, each's arcs by (word, destination); the
        # rows that cannot matter dropped (class docstring)
        pos, element, p, self.cut = _subset_rows(states, pres, forward, self.starts, self.p, self.beta_dst, self.pair,
                                                 self.seen, self.prefilter, PREFILTER_ROWS, self.threshold, self.cut)
        x = xres[element] + self.x[pos]
        # one element per (word, destination), then per word its best element's weight as the arc's
        dst, x_res, p_res, starts, arc_x, words, arc_p, priority, pruned = _word_arcs(
            self.pair[pos], x, x @ w, p, pos, self.word, self.dst, self.beta_dst, forward, self.prune_elements,
            self.cutoff)
        self.cut = self.cut or pruned
        bounds = starts.tolist()
        bounds.append(len(dst))
        qx = _quantize(x_res, self.delta).tobytes()
        size = 8 * x_res.shape[1]
        dst_bytes = dst.tobytes()

        def keys(lo: int, hi: int) -> bytes:
            return dst_bytes[8 * lo:8 * hi] + qx[size * lo:size * hi]
        self.transitions.append((dst, x_res, p_res, keys, bounds, arc_x, words, arc_p.tolist(), priority))
        cutoff, tasks = self.cutoff, self.tasks
        if self.best_first:
            push, pushed = heapq.heappush, self.pushed
            for i, value in enumerate(priority.tolist()):
                if value >= cutoff:
                    push(tasks, (-value, pushed, state, i))  # ties: first pushed first
                    pushed += 1
                else:
                    self.cut = True
            self.pushed = pushed
        else:
            for i, value in enumerate(priority.tolist()):
                if value >= cutoff:
                    tasks.append((state, i))
                else:
                    self.cut = True
        return state


@compiled
def _subset_rows(states: np.ndarray, pres: np.ndarray, forward: float, starts: np.ndarray, arc_p: np.ndarray,
                 beta_dst: np.ndarray, pair: np.ndarray, seen: np.ndarray, prefilter: bool, prefilter_rows: int,
                 threshold: float, cut: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:  # pragma: no cover
    """The rows of a subset (:meth:`_Determinizer._create`): every arc of every element, elements
    in order, each's arcs in the determinizer's (source, word, destination) order: the arcs' ids
    ``pos`` and elements ``element`` (int64) and pruning scores ``p = pres[element] +
    arc_p[pos]``. With ``prefilter`` and more than ``prefilter_rows`` rows, those whose ``p +
    beta_dst`` falls below ``threshold - forward`` are dropped, and ``cut`` becomes true when a
    (word, destination) ``pair`` keeps no row (``seen``: scratch, all false, left so)."""
    total = 0
    for k in range(states.shape[0]):
        total += starts[states[k] + 1] - starts[states[k]]
    pos = np.empty(total, dtype=np.int64)
    element = np.empty(total, dtype=np.int64)
    p = np.empty(total)
    j = 0
    for k in range(states.shape[0]):
        for i in range(starts[states[k]], starts[states[k] + 1]):
            pos[j] = i
            element[j] = k
            p[j] = pres[k] + arc_p[i]
            j += 1
    if not prefilter or total <= prefilter_rows:
        return pos, element, p, cut
    limit = threshold - forward
    near = np.empty(total, dtype=np.bool_)
    kept = 0
    for j in range(total):
        near[j] = p[j] + beta_dst[pos[j]] >= limit
        kept += near[j]
    if kept == total:
        return pos, element, p, cut
    if not cut:  # a (word, destination) with no row left is cut by the beam
        for j in range(total):
            if near[j]:
                seen[pair[pos[j]]] = True
        for j in range(total):
            if not near[j] and not seen[pair[pos[j]]]:
                cut = True
                break
        for j in range(total):
            if near[j]:
                seen[pair[pos[j]]] = False
    out = 0
    for j in range(total):
        if near[j]:
            pos[out], element[out], p[out] = pos[j], element[j], p[j]
            out += 1
    return pos[:out].copy(), element[:out].copy(), p[:out].copy(), cut


@compiled
def _word_arcs(pair: np.ndarray, x: np.ndarray, score: np.ndarray, p: np.ndarray, pos: np.ndarray, arc_word: np.ndarray,
               arc_dst: np.ndarray, beta_dst: np.ndarray, forward: float, prune: bool, cutoff: float
               ) -> tuple:  # pragma: no cover (compiled)
    """A subset's transitions from its rows (:meth:`_Determinizer._create`; ``pair (N,)`` each
    row's ranked (word, destination), ``x (N, C)``, ``score (N,)``, ``p (N,)``, ``pos (N,)`` its
    arc): each pair's best row (:func:`_best_in_groups`' rule) with the pair's highest ``p``;
    with ``prune``, the pairs whose ``forward + p + beta`` falls below ``cutoff`` dropped; then per
    word (pairs come in (word, destination) order) its best pair's components as the arc's
    weight, the highest ``p`` as the arc's, the priority ``forward + max(p + beta)``.

    Returns the kept pairs' destinations ``(K,)``, residual components ``(K, C)`` and pruning
    scores ``(K,)``; each word's first pair ``(T,)``, arc components ``(T, C)``, word ``(T,)``,
    pruning score ``(T,)`` and priority ``(T,)``; whether the pruning dropped a pair. The
    arithmetic is numpy's, operation for operation."""
    best, top = _best_in_groups(pair, score, x, p)
    groups = best.shape[0]
    at = pos[best]
    keep = np.ones(groups, dtype=np.bool_)
    pruned = False
    if prune:
        for g in range(groups):
            keep[g] = forward + top[g] + beta_dst[at[g]] >= cutoff
            pruned = pruned or not keep[g]
    kept = np.flatnonzero(keep)
    n, c = kept.shape[0], x.shape[1]
    dst = np.empty(n, dtype=np.int64)
    word = np.empty(n, dtype=np.int64)
    for k in range(n):
        dst[k] = arc_dst[at[kept[k]]]
        word[k] = arc_word[at[kept[k]]]
    starts = np.empty(n, dtype=np.int64)
    group = np.empty(n, dtype=np.int64)
    t = -1
    for k in range(n):
        if k == 0 or word[k] != word[k - 1]:
            t += 1
            starts[t] = k
        group[k] = t
    words = t + 1
    arc_x = np.empty((words, c))
    arc_p = np.empty(words)
    priority = np.empty(words)
    chosen = np.empty(words, dtype=np.int64)  # each word's best kept pair
    for k in range(n):
        g, r = group[k], best[kept[k]]
        through = top[kept[k]] + beta_dst[at[kept[k]]]
        if k == starts[g]:
            chosen[g], arc_p[g], priority[g] = k, top[kept[k]], through
            continue
        arc_p[g] = max(arc_p[g], top[kept[k]])
        priority[g] = max(priority[g], through)
        if _better(score, x, r, best[kept[chosen[g]]]):
            chosen[g] = k
    x_res = np.empty((n, c))
    p_res = np.empty(n)
    for g in range(words):
        priority[g] = forward + priority[g]
        arc_x[g] = x[best[kept[chosen[g]]]]
    for k in range(n):
        g = group[k]
        for i in range(c):
            x_res[k, i] = x[best[kept[k]], i] - arc_x[g, i]
        p_res[k] = top[kept[k]] - arc_p[g]
    return dst, x_res, p_res, starts[:words].copy(), arc_x, word[starts[:words]], arc_p, priority, pruned


__all__ = ["DELTA", "DeterminizationTooLarge", "build_lattice", "best_of_groups", "determinize", "ordering_vector",
           "epsilon_words", "score_components", "skipped_symbol_ids"]
