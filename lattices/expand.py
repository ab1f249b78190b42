"""Exact expansion of a lattice to order rho+1.

Every expanded state is a pair (original state, history), the history being the last ``rho``
language-model tokens on the path so far, ``<s>`` included while the sentence start is within
reach. Two paths meet in an expanded state only if a rho-context model cannot tell their
futures apart, so every path of the original lattice is a path of the expanded one with the
same words and its exact LM probability is the sum of independent per-arc scores.

Symbols:
  * LM words: every lattice word the model scores (out-of-vocabulary words are scored as the
    model's ``<unk>``, like ``afp score`` does).
  * Skipped symbols carry the history unchanged and get no LM score: epsilon (id 0), ``!NULL``,
    the sentence boundaries written in the lattice (``<s>``/``</s>``, HTK's ``!SENT_START``/
    ``!SENT_END``: the model's own ``<s>`` starts every history and its ``</s>`` is scored at
    every final state, so a path's LM score is ``afp score`` of its words), non-speech tokens
    such as ``!SIL``, ``<sil>``, ``[noise]``, ``<SPOKEN_NOISE>``, ``!ENTER``/``!EXIT``
    (:data:`DEFAULT_SKIP`), and, whatever the skip list, Kaldi's disambiguation symbols ``#0``,
    ``#1``, ... (never words: :func:`is_disambiguation`).

The expansion runs level by level over the original states in topological order, on whole
arrays (no per-arc Python loop): each level takes the (state, history) pairs that arrive from
earlier levels, merges duplicates (``ops.unique_rows_np``) and emits the successors of the new
states. It runs in numpy on the CPU, as the design keeps expansion on CPU workers: a level of a
narrow lattice (a chain, a frame-level Kaldi lattice) holds a few arcs, where a numpy call's
fixed cost (about a microsecond) is a tenth of a small torch call's; the result comes back as
tensors on the lattice's device.

A lattice in which no state has two incoming arcs (a chain; the prefix tree of an n-best list)
has one history per state: its expansion is the lattice itself, and the histories come from
pointer jumping along the parent arcs in ``log2(depth)`` whole-array steps (``_expand_tree``),
not from a step per level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from lattices import topology
from lattices.compiled import compiled
from lattices.lattice import Lattice
from lattices.ops import check_deadline, unique_rows_np

PAD = -1

#: symbols that are not words for the language model (matched case-sensitively)
DEFAULT_SKIP = frozenset({
    "<eps>", "!NULL", "<s>", "</s>", "!SENT_START", "!SENT_END", "!ENTER", "!EXIT", "!SIL", "!sil", "<sil>", "<SIL>", "sil", "SIL",
    "[noise]", "[NOISE]", "<noise>", "<NOISE>", "[laughter]", "[LAUGHTER]", "<SPOKEN_NOISE>", "[vocalized-noise]",
    "<v-noise>", "[breath]", "[BREATH]", "#0",
})


class ExpansionTooLarge(ValueError):
    """The expanded lattice would exceed the arc budget."""

    def __init__(self, key: str, budget: int, reached: int, rho: int) -> None:
        self.key, self.budget, self.reached, self.rho = key, budget, reached, rho
        super().__init__(f"lattice {key!r}: expansion to order {rho + 1} exceeds the budget of {budget} arcs "
                         f"({reached} arcs and growing); prune the lattice or raise max_expanded_arcs")


@dataclass(frozen=True)
class Expansion:
    """A lattice expanded to order rho+1 (``E`` expanded states, ``X`` expanded arcs).

    Attributes:
      lattice: the original lattice.
      rho: history length.
      state_orig: int64 ``(E,)`` original state of each expanded state; state 0 is the start.
      state_history: int64 ``(E, rho)`` history of each state: model ids, right-aligned, ``PAD``
        (-1) on the left.
      src, dst: int64 ``(X,)`` expanded states of each arc, ``src`` in topological order.
      arc_orig: int64 ``(X,)`` original arc of each expanded arc.
      arc_lm_word: int64 ``(X,)`` model id the arc's word is scored as, ``PAD`` for skipped symbols.
      finals: int64 ``(G,)`` expanded states whose original state is final.
      final_orig: int64 ``(G,)`` index into ``lattice.finals`` of each.
      future, state_future: a two-sided expansion's (:func:`expand_two_sided`) right context:
        int64 ``(E, future)``, the next ``future`` LM tokens after each state in reading order,
        left-aligned, ``</s>``'s id where the sentence ends within reach, ``PAD`` after it (and
        everywhere for the start state, which no arc enters); None for a one-sided expansion.
    """

    lattice: Lattice
    rho: int
    state_orig: Tensor
    state_history: Tensor
    src: Tensor
    dst: Tensor
    arc_orig: Tensor
    arc_lm_word: Tensor
    finals: Tensor
    final_orig: Tensor
    future: int = 0
    state_future: Tensor | None = None

    @property
    def num_states(self) -> int:
        return int(self.state_orig.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.src.shape[0])


def is_disambiguation(symbol: str) -> bool:
    """Whether ``symbol`` is a Kaldi disambiguation symbol (``#0``, ``#1``, ...): an epsilon of
    the decoding graph, never a word."""
    return len(symbol) > 1 and symbol[0] == "#" and symbol[1:].isdigit()


def lm_symbol_ids(symbols: Sequence[str], ids: Iterable[int], skip: Iterable[str] = DEFAULT_SKIP) -> list[int]:
    """Those of the symbol ids ``ids`` that are LM words: not epsilon (id 0), not empty, not in
    ``skip``, not a disambiguation symbol (:func:`is_disambiguation`).

    Only ``symbols[i]`` for ``i`` in ``ids`` is read, so the cost is ``len(ids)``, not the table's size.
    """
    skip = skip if isinstance(skip, AbstractSet) else frozenset(skip)
    return [i for i in ids if i != 0 and symbols[i] and symbols[i] not in skip and not is_disambiguation(symbols[i])]


def word_map(symbols: Sequence[str], word_ids: Tensor, skip: Iterable[str] = DEFAULT_SKIP) -> Tensor:
    """int64 ``(len(symbols),)``: model id of each lattice symbol, ``PAD`` for skipped ones.

    ``word_ids`` holds the model's id for every symbol (from ``ContextScorer.word_ids``). This
    reads every symbol of the table; per lattice, :func:`lattice_word_map` reads only the used ones.
    """
    mapping = torch.full((len(symbols),), PAD, dtype=torch.int64, device=word_ids.device)
    words = torch.tensor(lm_symbol_ids(symbols, range(len(symbols)), skip), dtype=torch.int64, device=mapping.device)
    mapping[words] = word_ids.to(torch.int64)[words]
    return mapping


def lattice_word_map(lattice: Lattice, skip: Iterable[str] = DEFAULT_SKIP) -> Tensor:
    """int64 ``(len(lattice.symbols),)`` on the lattice's device: each symbol's own id where the
    lattice uses it as an LM word, ``PAD`` for skipped and unused symbols (an identity
    :func:`word_map` for this lattice).

    Only the symbols the lattice uses (``torch.unique(lattice.words)``) are read, so the Python
    work is proportional to them, not to the symbol table (a 200k-word ``words.txt`` costs one
    tensor fill, not 200k lookups).
    """
    used = torch.unique(lattice.words).tolist()
    mapping = torch.full((len(lattice.symbols),), PAD, dtype=torch.int64)
    words = torch.tensor(lm_symbol_ids(lattice.symbols, used, skip), dtype=torch.int64)
    mapping[words] = words
    return mapping.to(lattice.device)


def expand(lattice: Lattice, lm_word_of_symbol: Tensor, rho: int, bos_id: int,
           max_arcs: int | None = None, deadline: float | None = None) -> Expansion:
    """Expand ``lattice`` so that every state knows its last ``rho`` LM tokens.

    Args:
      lm_word_of_symbol: int64 ``(len(lattice.symbols),)`` from :func:`word_map` or
        :func:`lattice_word_map`.
      rho: the model's context size (>= 1).
      bos_id: the model's ``<s>`` id; every history starts with it.
      max_arcs: raise :class:`ExpansionTooLarge` once the expansion has more arcs than this.
      deadline: ``time.monotonic()`` seconds; past it, :class:`~lattices.ops.DeadlineExceeded`.
    """
    if rho < 1:
        raise ValueError(f"rho must be at least 1, got {rho}")
    lattice_dst = lattice.dst.cpu().numpy()
    arc_word = lm_word_of_symbol.cpu().numpy()[lattice.words.cpu().numpy()]
    if lattice.num_arcs and int(np.bincount(lattice_dst, minlength=lattice.num_states).max()) <= 1:
        check_deadline(deadline)
        if max_arcs is not None and lattice.num_arcs > max_arcs:
            raise ExpansionTooLarge(lattice.key, max_arcs, lattice.num_arcs, rho)
        return _expand_tree(lattice, arc_word, rho, bos_id)
    return _expand_levels(lattice, arc_word, rho, bos_id, max_arcs, deadline)


def _expand_levels(lattice: Lattice, arc_word: np.ndarray, rho: int, bos_id: int, max_arcs: int | None,
                   deadline: float | None) -> Expansion:
    """:func:`expand` of any lattice, level by level (the module docstring); ``arc_word`` int64
    ``(A,)``: the LM word of each arc, ``PAD`` for skipped symbols."""
    lattice_dst = lattice.dst.cpu().numpy()
    levels = lattice.levels.cpu().numpy()
    num_levels = int(levels.max()) + 1
    by_src, starts = topology.arcs_by_state(lattice.num_states, lattice.src.cpu().numpy())

    start_history = np.full((1, rho), PAD, dtype=np.int64)
    start_history[0, -1] = bos_id
    state_orig, state_history = [np.array([lattice.start], dtype=np.int64)], [start_history]
    src_parts, dst_parts, arc_parts = [], [], []
    # arcs waiting for their destination's level: per level, lists of (src id, orig arc, dst orig, history)
    pending: list[list[tuple[np.ndarray, ...]]] = [[] for _ in range(num_levels)]
    num_states, num_arcs = 1, 0

    def emit(ids: np.ndarray, orig: np.ndarray, history: np.ndarray) -> None:
        """Queue the successors of new expanded states ``ids`` (orig states ``orig``, ``history``)."""
        arcs = topology.gather(by_src, starts, orig)
        if arcs.size == 0:
            return
        owner = np.repeat(np.arange(orig.size), starts[orig + 1] - starts[orig])
        word = arc_word[arcs]
        new_history = history[owner]
        moved = word >= 0
        if moved.any():
            shifted = np.concatenate([new_history[:, 1:], word[:, None]], axis=1)
            new_history = np.where(moved[:, None], shifted, new_history)
        dst = lattice_dst[arcs]
        dst_level = levels[dst]
        if arcs.size == 1 or (dst_level == dst_level[0]).all():  # one destination level (a chain's case)
            pending[int(dst_level[0])].append((ids[owner], arcs, dst, new_history))
            return
        order = np.argsort(dst_level, kind="stable")
        bounds = np.flatnonzero(np.diff(dst_level[order])) + 1
        for chunk in np.split(order, bounds):
            pending[int(dst_level[chunk[0]])].append((ids[owner[chunk]], arcs[chunk], dst[chunk], new_history[chunk]))

    emit(np.zeros(1, dtype=np.int64), state_orig[0], start_history)
    for level in range(1, num_levels):
        check_deadline(deadline)
        if not pending[level]:
            continue
        parts = pending[level]
        src_ids, arcs, dst, history = parts[0] if len(parts) == 1 else (np.concatenate(p) for p in zip(*parts))
        pending[level] = []
        unique_keys, inverse = unique_rows_np(np.concatenate([dst[:, None], history], axis=1))
        new_ids = np.arange(num_states, num_states + unique_keys.shape[0])
        num_states += unique_keys.shape[0]
        src_parts.append(src_ids)
        dst_parts.append(new_ids[inverse])
        arc_parts.append(arcs)
        num_arcs += arcs.shape[0]
        if max_arcs is not None and num_arcs > max_arcs:
            raise ExpansionTooLarge(lattice.key, max_arcs, num_arcs, rho)
        state_orig.append(unique_keys[:, 0])
        state_history.append(unique_keys[:, 1:])
        emit(new_ids, unique_keys[:, 0], unique_keys[:, 1:])

    empty = np.zeros(0, dtype=np.int64)
    return _expansion(lattice, rho, arc_word, np.concatenate(state_orig), np.concatenate(state_history),
                      np.concatenate(src_parts) if src_parts else empty,
                      np.concatenate(dst_parts) if dst_parts else empty,
                      np.concatenate(arc_parts) if arc_parts else empty)


def _expand_tree(lattice: Lattice, arc_word: np.ndarray, rho: int, bos_id: int) -> Expansion:
    """:func:`expand` of a lattice in which no state has two incoming arcs (a chain, the prefix
    tree of an n-best list): each state has one path from the start, so one history, and the
    expansion is the lattice itself, its states in topological order.

    Each state's history comes from pointer jumping instead of a pass per level: ``nearest[s]`` is
    the closest state on the path to ``s`` (``s`` itself included) whose incoming arc carries an
    LM word (``S``, a sentinel, past the start), found by doubling ``log2(depth)`` times; the
    history is then read back ``rho`` words at a time, ``<s>`` once the start is passed. A
    100,000-arc chain takes a few dozen numpy calls instead of 100,000 level steps."""
    n = lattice.num_states
    src, dst = lattice.src.cpu().numpy(), lattice.dst.cpu().numpy()
    parent = np.full(n + 1, n, dtype=np.int64)  # index n: the sentinel before the start, its own parent
    parent[dst] = src
    word = np.full(n + 1, PAD, dtype=np.int64)  # the LM word of each state's incoming arc
    word[dst] = arc_word
    nearest = np.where(word >= 0, np.arange(n + 1), parent)
    nearest[n] = n
    while True:
        jumped = nearest[nearest]
        if np.array_equal(jumped, nearest):
            break
        nearest = jumped
    history = np.full((n, rho), PAD, dtype=np.int64)
    at, done = nearest[:n], np.zeros(n, dtype=bool)
    for column in range(rho - 1, -1, -1):  # the most recent word first
        history[:, column] = np.where(done, PAD, np.where(at < n, word[at], bos_id))
        done |= at == n  # <s> written: nothing before it
        at = nearest[parent[at]]
    order = np.argsort(lattice.levels.cpu().numpy(), kind="stable")  # the start first (the only level-0 state)
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    arcs = np.arange(lattice.num_arcs)
    return _expansion(lattice, rho, arc_word, order, history[order], new_id[src], new_id[dst], arcs)


def _expansion(lattice: Lattice, rho: int, arc_word: np.ndarray, state_orig: np.ndarray, state_history: np.ndarray,
               src: np.ndarray, dst: np.ndarray, arc_orig: np.ndarray) -> Expansion:
    """The :class:`Expansion` of expanded states (original state and history of each, in
    topological order) and arcs (expanded ends and original arc of each, any order): arcs
    grouped by source, finals found, tensors on the lattice's device."""
    order = np.argsort(src, kind="stable")  # arcs grouped by source, sources in topological order
    final_position = np.full(lattice.num_states, -1, dtype=np.int64)
    final_position[lattice.finals.cpu().numpy()] = np.arange(lattice.finals.shape[0])
    finals = np.flatnonzero(final_position[state_orig] >= 0)
    arc_orig = arc_orig[order]

    def tensor(values: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64)).to(lattice.device)

    return Expansion(
        lattice=lattice, rho=rho, state_orig=tensor(state_orig), state_history=tensor(state_history),
        src=tensor(src[order]), dst=tensor(dst[order]), arc_orig=tensor(arc_orig),
        arc_lm_word=tensor(arc_word[arc_orig]), finals=tensor(finals), final_orig=tensor(final_position[state_orig[finals]]))


def expand_two_sided(lattice: Lattice, lm_word_of_symbol: Tensor, rho: int, future: int, bos_id: int,
                     eos_id: int, max_arcs: int | None = None, deadline: float | None = None) -> Expansion:
    """Expand ``lattice`` so that every state knows its last ``rho`` LM tokens *and* its next
    ``future`` ones: each word arc then has exactly one (left, word, right) window, as an acausal
    window model (:mod:`lm.window`) needs, and each path of the lattice is exactly one path here.

    The left expansion (:func:`expand`) gives each state its histories; the same expansion of the
    reversed lattice (a new start with an epsilon arc to every final state, ``eos_id`` starting
    every history) gives it its futures; their product, joined on the original arcs, gives the
    states ``(q, history, future)`` and, for every original arc ``q -> q'`` with word ``w``, one
    arc per (history at ``q``, future at ``q'``), from ``(q, h, w + f')`` to ``(q', h + w, f')``
    (a skipped symbol moves neither). The start state's future is left unset (no arc enters it,
    so nothing reads it): one start state. A state is final when its original state is final and
    its future is ``[</s>]``: the path ends there. ``max_arcs`` bounds the product's arcs
    (:class:`ExpansionTooLarge`, checked before they are built).

    Args and the other fields as :func:`expand`; ``future >= 1``.
    """
    if future < 1:
        raise ValueError(f"future must be at least 1, got {future}")
    # each side has at most as many arcs as the product (every arc on a complete path has a
    # history and a future), so the budget bounds them too
    left = expand(lattice, lm_word_of_symbol, rho, bos_id, max_arcs, deadline)
    right = expand(_reversed(lattice), lm_word_of_symbol, future, eos_id, max_arcs, deadline)
    n, a = lattice.num_states, lattice.num_arcs
    l_src, l_dst, l_orig = (t.cpu().numpy() for t in (left.src, left.dst, left.arc_orig))
    r_src, r_dst, r_orig = (t.cpu().numpy() for t in (right.src, right.dst, right.arc_orig))
    keep = r_orig < a  # the reversed lattice's own arcs (not the epsilons from its new start)
    r_src, r_dst, r_orig = r_src[keep], r_dst[keep], r_orig[keep]
    # join on the original arc: every L arc of arc a with every R arc of arc a
    l_order, r_order = np.argsort(l_orig, kind="stable"), np.argsort(r_orig, kind="stable")
    l_count = np.bincount(l_orig, minlength=a)
    r_count = np.bincount(r_orig, minlength=a)
    pairs_per_arc = l_count * r_count
    total = int(pairs_per_arc.sum())
    if max_arcs is not None and total > max_arcs:
        raise ExpansionTooLarge(lattice.key, max_arcs, total, rho)
    check_deadline(deadline)
    l_first = np.concatenate([[0], np.cumsum(l_count)[:-1]])
    r_first = np.concatenate([[0], np.cumsum(r_count)[:-1]])
    arc_of_pair = np.repeat(np.arange(a), pairs_per_arc)
    within = np.arange(total) - np.repeat(np.cumsum(pairs_per_arc) - pairs_per_arc, pairs_per_arc)
    r_width = r_count[arc_of_pair]
    li = l_order[l_first[arc_of_pair] + within // np.maximum(r_width, 1)]
    ri = r_order[r_first[arc_of_pair] + within % np.maximum(r_width, 1)]
    # the product arc: from (L src, R dst) to (L dst, R src); the start's R side is unset (-1)
    l_state_orig = left.state_orig.cpu().numpy()
    src_left, dst_left = l_src[li], l_dst[li]
    src_right = np.where(l_state_orig[src_left] == lattice.start, -1, r_dst[ri])
    dst_right = r_src[ri]
    keys = np.concatenate([np.stack([src_left, src_right], 1), np.stack([dst_left, dst_right], 1),
                           np.array([[0, -1]], dtype=np.int64)])  # left state 0 is the start
    states, inverse = unique_rows_np(keys)
    # states in topological order: by their original state's level, the start first
    levels = lattice.levels.cpu().numpy()
    level = levels[l_state_orig[states[:, 0]]]
    order = np.lexsort((states[:, 1], states[:, 0], level))
    rank = np.empty(states.shape[0], dtype=np.int64)
    rank[order] = np.arange(states.shape[0])
    states = states[order]
    src, dst = rank[inverse[:total]], rank[inverse[total: 2 * total]]
    state_orig = l_state_orig[states[:, 0]]
    history = left.state_history.cpu().numpy()[states[:, 0]]
    r_history = right.state_history.cpu().numpy()
    future_rows = np.full((states.shape[0], future), PAD, dtype=np.int64)
    has = states[:, 1] >= 0
    future_rows[has] = r_history[states[has, 1]][:, ::-1]  # right-aligned, nearest last: reversed, left-aligned
    arc_word = lm_word_of_symbol.cpu().numpy()[lattice.words.cpu().numpy()]
    expansion = _expansion(lattice, rho, arc_word, state_orig, history, src, dst, arc_of_pair)
    ends = np.zeros(states.shape[0], dtype=bool)
    ends[expansion.finals.cpu().numpy()] = True
    ended = (future_rows[:, 0] == eos_id) & ((future_rows[:, 1:] == PAD).all(axis=1) if future > 1 else True)
    finals = np.flatnonzero(ends & (ended | ~has))
    final_position = np.full(n, -1, dtype=np.int64)
    final_position[lattice.finals.cpu().numpy()] = np.arange(lattice.finals.shape[0])
    device = lattice.device

    def tensor(values: np.ndarray) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64)).to(device)

    return dataclasses.replace(expansion, finals=tensor(finals), final_orig=tensor(final_position[state_orig[finals]]),
                               future=future, state_future=tensor(future_rows))


def _reversed(lattice: Lattice) -> Lattice:
    """The lattice read backwards, for :func:`expand_two_sided`: arc ``i`` from ``dst[i]`` to
    ``src[i]`` with the same word, then from a new start (state ``num_states``) an epsilon arc
    to every final state; the one final state is the old start. Scores are zero (unused)."""
    n, a = lattice.num_states, lattice.num_arcs
    finals = lattice.finals.cpu()
    f = finals.shape[0]
    src = torch.cat([lattice.dst.cpu(), torch.full((f,), n, dtype=torch.int64)])
    dst = torch.cat([lattice.src.cpu(), finals])
    words = torch.cat([lattice.words.cpu(), torch.zeros(f, dtype=torch.int64)])
    zeros = torch.zeros(a + f, dtype=torch.float64)
    return Lattice(key=lattice.key, num_states=n + 1, start=n, src=src, dst=dst, words=words, acoustic=zeros,
                   graph=zeros, finals=torch.tensor([lattice.start], dtype=torch.int64),
                   final_acoustic=torch.zeros(1, dtype=torch.float64), final_graph=torch.zeros(1, dtype=torch.float64),
                   symbols=lattice.symbols)


def expansion_bound(lattice: Lattice, rho: int, skip: Iterable[str] = DEFAULT_SKIP,
                    keep: np.ndarray | None = None) -> float:
    """An upper bound on the arcs of :func:`expand` of ``lattice`` to ``rho`` (the exact count
    takes the expansion itself), in one compiled pass over the arcs (:mod:`lattices.compiled`):
    well under a millisecond for a PocketSphinx lattice, where a too-large expansion takes
    seconds before it fails, so a budget can be met by choosing a
    pruning beam before expanding (:mod:`lattices.reduce`).

    An expanded state is ``(s, h)`` with ``h`` the last ``rho`` LM words of some path to ``s``
    (fewer, after ``<s>``, near the start). Each such ``h`` is the word sequence of at least one
    *suffix*: a path ending at ``s`` that starts with a word arc and holds exactly ``rho`` words,
    or a whole path from the start holding fewer. So the number of histories of ``s``, ``H(s)``,
    is at most the number of such suffixes ``U(s)``, counted by dynamic programming over the
    arcs in topological order, and the expansion's arcs, ``sum over arcs a of H(src a)``, are at
    most ``sum over arcs a of U(src a)``. The bound is tight where different suffixes carry
    different words (a deterministic lattice far from its start), loose where paths differ only
    by skipped symbols. Returned as a float (counts of dense lattices pass 2**63). A tree (no
    state entered twice: a chain, an n-best list's prefix tree) is its own expansion: its arcs,
    counted without the pass.

    ``keep``: bool ``(A,)``, the bound of the lattice with only those arcs, as if it were
    ``lattice.subset(keep)`` when every kept arc lies on a kept start-to-final path (a beam's cut:
    :func:`lattices.reduce.prune`), without building it."""
    if rho < 1:
        raise ValueError(f"rho must be at least 1, got {rho}")
    if not lattice.num_arcs:
        return 0.0
    src, dst = lattice.src.cpu().numpy(), lattice.dst.cpu().numpy()
    if keep is not None and keep.shape != (lattice.num_arcs,):
        raise ValueError(f"keep must have one entry per arc ({lattice.num_arcs}), got shape {keep.shape}")
    if int(np.bincount(dst if keep is None else dst[keep], minlength=lattice.num_states).max(initial=0)) <= 1:
        return float(lattice.num_arcs if keep is None else keep.sum())  # a tree (a chain, an n-best list): exact
    is_word = lattice_word_map(lattice, skip).cpu().numpy()[lattice.words.cpu().numpy()] != PAD
    order, _ = topology.level_order(dst, lattice.levels.cpu().numpy())
    everything = np.ones(lattice.num_arcs, dtype=bool) if keep is None else np.ascontiguousarray(keep, dtype=bool)
    return float(_history_bound(lattice.num_states, lattice.start, np.ascontiguousarray(src, dtype=np.int64),
                                np.ascontiguousarray(dst, dtype=np.int64), is_word, order.astype(np.int64),
                                everything, rho))


@compiled
def _history_bound(num_states: int, start: int, src: np.ndarray, dst: np.ndarray, is_word: np.ndarray,
                   order: np.ndarray, keep: np.ndarray, rho: int) -> float:  # pragma: no cover (compiled)
    """:func:`expansion_bound`'s count, one pass over the kept arcs in ``order`` (every arc after
    the arcs into its source): ``suffix[s, k]`` paths into ``s`` that start with a word arc and
    hold ``k`` words, ``whole[s, k]`` paths from the start into ``s`` with ``k`` words; the bound
    is the sum over kept arcs of their source's ``suffix[., rho] + whole[., :rho]``."""
    suffix = np.zeros((num_states, rho + 1))
    whole = np.zeros((num_states, rho + 1))
    whole[start, 0] = 1.0
    for a in order:
        if not keep[a]:
            continue
        s, d = src[a], dst[a]
        if is_word[a]:
            for k in range(1, rho + 1):
                suffix[d, k] += suffix[s, k - 1]
                whole[d, k] += whole[s, k - 1]
            suffix[d, 1] += 1.0  # the suffix that starts with this word arc
        else:
            for k in range(rho + 1):
                suffix[d, k] += suffix[s, k]
                whole[d, k] += whole[s, k]
    total = 0.0
    for a in range(src.shape[0]):
        if keep[a]:
            s = src[a]
            total += suffix[s, rho]
            for k in range(rho):
                total += whole[s, k]
    return total
