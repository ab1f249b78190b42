"""What a lattice still holds: oracle word errors against a reference, and per-stage reports.

:func:`oracle_errors` is the lowest word edit distance (substitutions + insertions + deletions)
between a reference and any word path of a lattice: a dynamic programme over the lattice's
states in topological order (one whole-array step per level) times the reference positions
(numpy rows). :func:`stage_report` records what a stage of lattice reduction (epsilon removal,
determinization, pruning, minimization) produced: states, arcs, seconds, the number of paths and,
with a reference, the oracle errors it kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lattices import topology
from lattices.determinize import skipped_symbol_ids
from lattices.expand import DEFAULT_SKIP
from lattices.lattice import Lattice

_DIAGONAL, _STAY, _DELETE, _NONE = 0, 1, 2, 3  # back-pointer operations


def oracle_errors(lattice: Lattice, reference_words: Sequence[str], skip: Iterable[str] = DEFAULT_SKIP,
                  case_insensitive: bool = True) -> tuple[int, list[str]]:
    """The oracle word errors of ``lattice`` against ``reference_words`` and the path that has them.

    Epsilon (id 0), ``skip`` symbols and disambiguation symbols are not words (they cost
    nothing); reference words in ``skip`` are dropped. Words are compared lower-cased when
    ``case_insensitive``. Scores play no part. Returns ``(errors, words)``: the minimum over the
    lattice's complete paths of the edit distance (substitutions, insertions and deletions, each
    costing 1) between the path's words and the reference, and the words of one path that reaches
    it (ties: the lowest arc ids along the back-pointers, the first final state).

    Cost: ``O((A + S) * (N + 1))`` for ``A`` arcs, ``S`` states and ``N`` reference words, in one
    numpy step per level of the lattice. Tables are int64 ``(S, N + 1)``.
    """
    skip = frozenset(skip)
    fold = str.lower if case_insensitive else (lambda word: word)
    reference = [fold(word) for word in reference_words if word not in skip]
    n, num_states = len(reference), lattice.num_states
    index = {word: i for i, word in enumerate(dict.fromkeys(reference))}
    ref_ids = np.array([index[word] for word in reference], dtype=np.int64)
    src, dst, words = (t.cpu().numpy().astype(np.int64) for t in (lattice.src, lattice.dst, lattice.words))
    used = np.unique(words)
    token = np.full(len(lattice.symbols), -1, dtype=np.int64)  # reference token of each symbol, -1: none
    token[used] = [index.get(fold(lattice.symbols[i]), -1) for i in used.tolist()]
    is_word = np.ones(len(lattice.symbols), dtype=bool)
    is_word[skipped_symbol_ids(lattice.symbols, used.tolist(), skip)] = False

    columns = np.arange(n + 1)
    big = n + num_states + 1  # more than any edit distance here (a path has fewer than S words)
    cost = np.full((num_states, n + 1), big, dtype=np.int64)
    back_arc = np.full((num_states, n + 1), -1, dtype=np.int64)
    back_op = np.full((num_states, n + 1), _NONE, dtype=np.int64)
    cost[lattice.start] = columns
    back_op[lattice.start, 1:] = _DELETE
    order, offsets = topology.level_order(dst, lattice.levels.cpu().numpy())
    for i in range(len(offsets) - 1):
        arcs = order[offsets[i]:offsets[i + 1]]
        arcs = arcs[np.argsort(dst[arcs], kind="stable")]
        m = len(arcs)
        before = cost[src[arcs]]  # (m, n + 1)
        word = is_word[words[arcs]][:, None]
        stay = np.minimum(before + word, big)  # an insertion, or a skipped symbol for free
        diagonal = np.full_like(before, big)
        mismatch = token[words[arcs]][:, None] != ref_ids[None, :]
        diagonal[:, 1:] = np.where(word, np.minimum(before[:, :-1] + mismatch, big), big)
        # candidate code: cost, then which arc and which operation (lowest wins ties)
        width = 2 * m
        local = 2 * np.arange(m)[:, None]
        code = np.minimum(stay * width + local + _STAY, diagonal * width + local + _DIAGONAL)
        starts = np.flatnonzero(np.r_[True, dst[arcs][1:] != dst[arcs][:-1]])
        best = np.minimum.reduceat(code, starts, axis=0)  # (states of this level, n + 1)
        into = dst[arcs][starts]
        value, which = best // width, best % width
        # deletions inside the state: value[j] = min(value[j], value[j - 1] + 1)
        closed = np.minimum.accumulate(value - columns, axis=1) + columns
        deleted = closed < value
        cost[into] = closed
        back_arc[into] = np.where(deleted, -1, arcs[which // 2])
        back_op[into] = np.where(deleted, _DELETE, which % 2)
    finals = lattice.finals.cpu().numpy()
    ends = cost[finals, n]
    state, j = int(finals[int(np.argmin(ends))]), n
    errors = int(cost[state, j])
    path: list[str] = []
    while back_op[state, j] != _NONE:
        op = int(back_op[state, j])
        if op == _DELETE:
            j -= 1
            continue
        arc = int(back_arc[state, j])
        if is_word[words[arc]]:
            path.append(lattice.symbols[int(words[arc])])
        j -= op == _DIAGONAL
        state = int(src[arc])
    return errors, path[::-1]


def count_paths(lattice: Lattice) -> int:
    """The number of complete paths (an exact Python int, however large): the number of distinct
    word sequences when the lattice is word-deterministic and epsilon-free."""
    counts = [0] * lattice.num_states
    counts[lattice.start] = 1
    src, dst = lattice.src.tolist(), lattice.dst.tolist()
    by_level = topology.level_order(lattice.src.cpu().numpy(), lattice.levels.cpu().numpy())[0].tolist()
    for arc in by_level:
        counts[dst[arc]] += counts[src[arc]]
    return sum(counts[s] for s in lattice.finals.tolist())


@dataclass(frozen=True)
class StageReport:
    """What one stage of lattice reduction produced.

    Attributes: ``stage`` (its name); ``states``, ``arcs`` (of its output); ``seconds`` (wall
    time of the stage); ``paths`` (complete paths of the output: distinct word sequences once it
    is deterministic; None if not counted); ``oracle_errors`` and ``reference_words`` (with a
    reference, else None).
    """

    stage: str
    states: int
    arcs: int
    seconds: float
    paths: int | None = None
    oracle_errors: int | None = None
    reference_words: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stage_report(stage: str, lattice: Lattice, seconds: float, reference: Sequence[str] | None = None,
                 skip: Iterable[str] = DEFAULT_SKIP, case_insensitive: bool = True,
                 paths: bool = True) -> StageReport:
    """The :class:`StageReport` of ``lattice``, the output of ``stage`` that took ``seconds``: its
    size, its path count (when ``paths``), and its oracle errors against ``reference`` if given."""
    errors = None
    if reference is not None:
        errors, _ = oracle_errors(lattice, reference, skip=skip, case_insensitive=case_insensitive)
    kept = frozenset(skip)
    return StageReport(stage, lattice.num_states, lattice.num_arcs, seconds,
                       count_paths(lattice) if paths else None, errors,
                       None if reference is None else sum(word not in kept for word in reference))


__all__ = ["StageReport", "count_paths", "oracle_errors", "stage_report"]
