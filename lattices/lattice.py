"""The tensor-backed word lattice.

A :class:`Lattice` is an acyclic weighted acceptor over words, stored as arc tensors in the
manner of k2's ``Fsa``. Scores are log-domain and *higher is better* (log-likelihoods and
log-probabilities, natural log); readers of formats that store costs (Kaldi, OpenFst) negate
them, writers negate them back.

Attributes (``A`` arcs, ``S`` states, ``F`` final states):
  key: str, the utterance id.
  num_states: int ``S``; states are ``0 .. S-1``.
  start: int, the start state.
  src: int64 ``(A,)``, source state of each arc.
  dst: int64 ``(A,)``, destination state of each arc.
  words: int64 ``(A,)``, word id of each arc in ``symbols``; ``0`` is epsilon (no word).
  acoustic: float64 ``(A,)``, acoustic log-likelihood of each arc (unscaled).
  graph: float64 ``(A,)``, graph / old-LM log-probability of each arc (unscaled; for Kaldi this
    is the whole graph score: LM, pronunciation and transition probabilities).
  finals: int64 ``(F,)``, the final states, each once.
  final_acoustic: float64 ``(F,)``, acoustic log-weight of leaving through each final state.
  final_graph: float64 ``(F,)``, graph log-weight of leaving through each final state.
  symbols: tuple[str, ...], ``symbols[i]`` is the spelling of word id ``i``; ``symbols[0]`` is
    ``"<eps>"``. Several lattices may share one table.
  meta: dict[str, Any], format facts a writer needs (``lmscale``, ``wdpenalty``, ``base``,
    the HTK header lines...). Never tensors.
  arc_extra: dict[str, Any], per-arc data kept for writing back (Kaldi transition-id strings,
    HTK pronunciation variants): each a tensor or tuple of length ``A``.
  state_extra: dict[str, Any], per-state data (HTK node times): each of length ``S``.
  final_extra: dict[str, Any], per-final-state data (Kaldi final transition ids): length ``F``.
  scores: dict[str, Tensor], named per-arc scores, each float64 ``(A,)`` (natural log, higher is
    better), for lattices whose first pass has scores other than acoustic and graph (an n-best
    list's ``decoder``, ``ctc``, ``lm``...). Empty for ordinary lattices.
  final_scores: dict[str, Tensor], the same names as ``scores``, each float64 ``(F,)``: the
    named log-weights of leaving through each final state.

Named scores (:meth:`Lattice.named_scores`): a lattice's first-pass scores by name. When
``scores`` is empty they are ``acoustic`` and ``graph`` (the arc tensors and final weights
above); a lattice that carries its own named scores uses those instead, and its ``acoustic`` and
``graph`` tensors (and final weights) are zeros. Subsets, trimming and ``to(device)`` keep them.

Operations return new lattices and never change their input.
"""

from __future__ import annotations

import json
import re

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lattices import topology

EPSILON = "<eps>"


#: a run of more than this many characters without a space in an error message is cut
MAX_QUOTED = 80
_LONG_RUN = re.compile(r"\S{%d,}" % (MAX_QUOTED + 1))


def shorten(text: str) -> str:
    """``text`` with every run of more than :data:`MAX_QUOTED` non-space characters cut to its
    start and its length (``'XXXX…' (1000000 characters)``): an error quotes at most a short
    excerpt of the input, however long the offending line."""
    return _LONG_RUN.sub(lambda m: f"{m.group()[:MAX_QUOTED // 2]}… ({len(m.group())} characters)", text)


def describe(value: Any) -> str:
    """What a JSON value is, for an error message: a short JSON excerpt of a scalar (``5``,
    ``"abc"``), ``an empty list`` / ``a list of 3 entries``, ``an object with keys a, b``."""
    if isinstance(value, list):
        return "an empty list" if not value else f"a list of {len(value)} {'entry' if len(value) == 1 else 'entries'}"
    if isinstance(value, dict):
        keys = ", ".join(str(k) for k in list(value)[:5]) + (", ..." if len(value) > 5 else "")
        return f"an object with keys {shorten(keys)}" if value else "an empty object"
    if isinstance(value, (int, float, str, bool, type(None))):
        text = json.dumps(value)
        return text if len(text) <= 40 else f"{text[:37]}..."
    return type(value).__name__


class LatticeFormatError(ValueError):
    """Malformed lattice input. The message names the source, lattice key, line and field where known.

    Attributes ``source``, ``key``, ``line``, ``field`` hold the same facts for programs. Quoted
    input (the message, a key) is cut to short excerpts (:func:`shorten`).
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None,
                 line: int | None = None, field: str | None = None) -> None:
        message, key = shorten(message), None if key is None else shorten(key)
        self.reason, self.source, self.key, self.line, self.field = message, source, key, line, field
        where = []
        if source:
            where.append(str(source) + (f":{line}" if line is not None else ""))
        elif line is not None:
            where.append(f"line {line}")
        if key is not None:
            where.append(f"lattice {key!r}")
        if field:
            where.append(f"field {field}")
        super().__init__(": ".join([*where, message]) if where else message)

    def located(self, *, source: str | None = None, key: str | None = None) -> LatticeFormatError:
        """The same error with a source file and/or lattice key filled in where missing."""
        return LatticeFormatError(self.reason, source=self.source or source, key=self.key if self.key is not None else key,
                                  line=self.line, field=self.field)


def _tensor_field(dtype: torch.dtype) -> Any:
    return field(default_factory=lambda: torch.zeros(0, dtype=dtype))


@dataclass(frozen=True, eq=False)
class Lattice:
    """An acyclic word lattice; see the module docstring for every attribute."""

    key: str
    num_states: int
    start: int
    src: Tensor = _tensor_field(torch.int64)
    dst: Tensor = _tensor_field(torch.int64)
    words: Tensor = _tensor_field(torch.int64)
    acoustic: Tensor = _tensor_field(torch.float64)
    graph: Tensor = _tensor_field(torch.float64)
    finals: Tensor = _tensor_field(torch.int64)
    final_acoustic: Tensor = _tensor_field(torch.float64)
    final_graph: Tensor = _tensor_field(torch.float64)
    symbols: tuple[str, ...] = (EPSILON,)
    meta: dict[str, Any] = field(default_factory=dict)
    arc_extra: dict[str, Any] = field(default_factory=dict)
    state_extra: dict[str, Any] = field(default_factory=dict)
    final_extra: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Tensor] = field(default_factory=dict)
    final_scores: dict[str, Tensor] = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arcs(cls, key: str, arcs: list[tuple[int, int, int, float, float]], finals: dict[int, tuple[float, float]],
                  symbols: tuple[str, ...], start: int = 0, num_states: int | None = None, **extra: Any) -> Lattice:
        """Build from python lists: ``arcs`` of ``(src, dst, word, acoustic, graph)`` and
        ``finals`` mapping state -> ``(acoustic, graph)``. Validates the result."""
        states = [start, *finals] + [s for a in arcs for s in a[:2]]
        n = num_states if num_states is not None else (max(states) + 1 if states else 1)
        columns = list(zip(*arcs)) if arcs else [(), (), (), (), ()]
        final_ids = sorted(finals)
        lattice = cls(
            key=key, num_states=n, start=start,
            src=torch.tensor(columns[0], dtype=torch.int64), dst=torch.tensor(columns[1], dtype=torch.int64),
            words=torch.tensor(columns[2], dtype=torch.int64),
            acoustic=torch.tensor(columns[3], dtype=torch.float64), graph=torch.tensor(columns[4], dtype=torch.float64),
            finals=torch.tensor(final_ids, dtype=torch.int64),
            final_acoustic=torch.tensor([finals[s][0] for s in final_ids], dtype=torch.float64),
            final_graph=torch.tensor([finals[s][1] for s in final_ids], dtype=torch.float64),
            symbols=tuple(symbols), **extra)
        lattice.validate()
        return lattice

    def replace(self, **changes: Any) -> Lattice:
        """A copy with some attributes replaced (tensors are shared, not copied: never mutate them)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ basic facts
    @property
    def num_arcs(self) -> int:
        return int(self.src.shape[0])

    @property
    def device(self) -> torch.device:
        return self.src.device

    def to(self, device: torch.device | str) -> Lattice:
        """The same lattice with its tensors on ``device`` (itself when they are there already)."""
        if torch.device(device) == self.device or (torch.device(device).type == self.device.type == "cpu"):
            return self
        names = ("src", "dst", "words", "acoustic", "graph", "finals", "final_acoustic", "final_graph")
        return self.replace(**{n: getattr(self, n).to(device) for n in names},
                            scores={k: v.to(device) for k, v in self.scores.items()},
                            final_scores={k: v.to(device) for k, v in self.final_scores.items()})

    def named_scores(self) -> dict[str, tuple[Tensor, Tensor]]:
        """The first-pass scores by name: name -> (float64 per-arc ``(A,)``, float64 per-final ``(F,)``).

        ``scores``/``final_scores`` when the lattice carries named scores, else ``acoustic`` and
        ``graph`` (see the module docstring)."""
        if self.scores:
            return {name: (values, self.final_scores[name]) for name, values in self.scores.items()}
        return {"acoustic": (self.acoustic, self.final_acoustic), "graph": (self.graph, self.final_graph)}

    def word(self, arc: int) -> str:
        return self.symbols[int(self.words[arc])]

    def __repr__(self) -> str:
        return (f"Lattice(key={self.key!r}, num_states={self.num_states}, num_arcs={self.num_arcs}, "
                f"start={self.start}, finals={self.finals.tolist()[:8]}{'...' if len(self.finals) > 8 else ''})")

    # ------------------------------------------------------------------ validation
    def validate(self) -> Lattice:
        """Check the structure; raise :class:`LatticeFormatError` naming the problem. Returns self.

        Checked: shapes and dtypes agree; state ids in range; at least one final state, each once;
        ``scores`` and ``final_scores`` have the same names and lengths ``A`` and ``F``; weights
        finite; word ids inside ``symbols``; no cycles; every state reachable from the start and
        able to reach a final state (no unreachable or dead states).
        """
        def fail(message: str, field: str | None = None) -> None:
            raise LatticeFormatError(message, key=self.key, field=field)

        if self.num_states < 1:
            fail(f"a lattice needs at least one state, got {self.num_states}")
        if not 0 <= self.start < self.num_states:
            fail(f"start state {self.start} is not in 0..{self.num_states - 1}", "start")
        a = self.num_arcs
        for name in ("dst", "words", "acoustic", "graph"):
            if getattr(self, name).shape != (a,):
                fail(f"has shape {tuple(getattr(self, name).shape)}, expected ({a},)", name)
        for name, values in self.arc_extra.items():
            if len(values) != a:
                fail(f"has {len(values)} entries for {a} arcs", f"arc_extra[{name!r}]")
        for name, values in self.state_extra.items():
            if len(values) != self.num_states:
                fail(f"has {len(values)} entries for {self.num_states} states", f"state_extra[{name!r}]")
        f = int(self.finals.shape[0])
        if f == 0:
            fail("has no final state", "finals")
        for name in ("final_acoustic", "final_graph"):
            if getattr(self, name).shape != (f,):
                fail(f"has shape {tuple(getattr(self, name).shape)}, expected ({f},)", name)
        for name, values in self.final_extra.items():
            if len(values) != f:
                fail(f"has {len(values)} entries for {f} final states", f"final_extra[{name!r}]")
        for name in ("src", "dst", "finals"):
            values = getattr(self, name)
            if values.numel() and (int(values.min()) < 0 or int(values.max()) >= self.num_states):
                bad = values[(values < 0) | (values >= self.num_states)][0]
                fail(f"state {int(bad)} is not in 0..{self.num_states - 1}", name)
        if torch.unique(self.finals).numel() != f:
            fail("a final state is listed twice", "finals")
        if a and (int(self.words.min()) < 0 or int(self.words.max()) >= len(self.symbols)):
            fail(f"word id outside the symbol table of {len(self.symbols)} entries", "words")
        if set(self.scores) != set(self.final_scores):
            fail(f"names {sorted(self.scores)} differ from final_scores' {sorted(self.final_scores)}", "scores")
        named = [*((f"scores[{k!r}]", v, a) for k, v in self.scores.items()),
                 *((f"final_scores[{k!r}]", v, f) for k, v in self.final_scores.items())]
        for name, values, length in named:
            if not isinstance(values, Tensor) or values.shape != (length,):
                shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
                fail(f"has shape {shape}, expected ({length},)", name)
        weights = [(name, getattr(self, name)) for name in ("acoustic", "graph", "final_acoustic", "final_graph")]
        for name, values in [*weights, *((name, values) for name, values, _ in named)]:
            if values.numel() and not bool(torch.isfinite(values).all()):
                index = int((~torch.isfinite(values)).nonzero()[0])
                fail(f"entry {index} is {float(values[index])}, weights must be finite", name)
        levels = self.__dict__.get("levels")
        levels = self._compute_levels() if levels is None else levels
        if levels is None:
            fail("has a cycle; lattices must be acyclic")
        self.__dict__["levels"] = levels  # the cached property, computed once
        reach = self._reachable(forward=True, levels=levels)
        if not bool(reach.all()):
            fail(f"state {int((~reach).nonzero()[0])} is unreachable from the start state {self.start}")
        coreach = self._reachable(forward=False, levels=levels)
        if not bool(coreach.all()):
            fail(f"state {int((~coreach).nonzero()[0])} is dead: no path from it reaches a final state")
        return self

    def _reachable(self, forward: bool, levels: Tensor | None = None) -> Tensor:
        """bool ``(S,)``: states reachable from the start (or reaching a final state when not ``forward``).

        One step per level of an acyclic lattice, each over that level's arcs only (in numpy:
        :mod:`lattices.topology`)."""
        levels = self.levels if levels is None else levels
        src, dst = self.src.cpu().numpy(), self.dst.cpu().numpy()
        if forward:
            seeds, frm, to = np.array([self.start]), src, dst
        else:
            seeds, frm, to = self.finals.cpu().numpy(), dst, src
        mark = topology.reachable(self.num_states, seeds, frm, to, levels.cpu().numpy(), backward=not forward)
        return torch.from_numpy(mark).to(self.device)

    # ------------------------------------------------------------------ topology
    def _compute_levels(self) -> Tensor | None:
        """Longest-path depth of every state from the sources (in-degree 0); None on a cycle.

        Computed level by level (Kahn's algorithm, :func:`lattices.topology.longest_path_levels`)."""
        levels = topology.longest_path_levels(self.num_states, self.src.cpu().numpy(), self.dst.cpu().numpy())
        return None if levels is None else torch.from_numpy(levels).to(self.device)

    @cached_property
    def levels(self) -> Tensor:
        """int64 ``(S,)``: each state's longest-path depth; arcs always go to a deeper level."""
        levels = self._compute_levels()
        if levels is None:
            raise LatticeFormatError("has a cycle; lattices must be acyclic", key=self.key)
        return levels

    # ------------------------------------------------------------------ derived lattices
    def subset(self, keep_arcs: Tensor) -> Lattice:
        """The lattice with only the arcs where ``keep_arcs`` (bool ``(A,)``) is True, then trimmed:
        states no longer on a start-to-final path are removed and the rest renumbered.
        Raises :class:`LatticeFormatError` if no complete path is left."""
        kept = self._select_arcs(keep_arcs.nonzero().squeeze(1))
        return kept._trim()

    def _select_arcs(self, index: Tensor) -> Lattice:
        extra = {k: take_extra(v, index) for k, v in self.arc_extra.items()}
        return self.replace(src=self.src[index], dst=self.dst[index], words=self.words[index],
                            acoustic=self.acoustic[index], graph=self.graph[index], arc_extra=extra,
                            scores={k: v[index] for k, v in self.scores.items()})

    def _trim(self) -> Lattice:
        alive = self._reachable(True) & self._reachable(False)
        if not bool(alive[self.start]):
            raise LatticeFormatError("no path from the start state to a final state is left", key=self.key)
        new_id = torch.cumsum(alive.to(torch.int64), 0) - 1
        keep_arc = alive[self.src] & alive[self.dst]
        keep_final = alive[self.finals]
        trimmed = self._select_arcs(keep_arc.nonzero().squeeze(1))
        state_index = alive.nonzero().squeeze(1)
        final_index = keep_final.nonzero().squeeze(1)
        return trimmed.replace(
            num_states=int(alive.sum()), start=int(new_id[self.start]),
            src=new_id[trimmed.src], dst=new_id[trimmed.dst], finals=new_id[self.finals[final_index]],
            final_acoustic=self.final_acoustic[final_index], final_graph=self.final_graph[final_index],
            state_extra={k: take_extra(v, state_index) for k, v in self.state_extra.items()},
            final_extra={k: take_extra(v, final_index) for k, v in self.final_extra.items()},
            final_scores={k: v[final_index] for k, v in self.final_scores.items()})

    def final_weights(self) -> tuple[Tensor, Tensor]:
        """Per-state final weights: float64 ``(S,)`` acoustic and graph, ``-inf`` at non-final states."""
        acoustic = torch.full((self.num_states,), -math.inf, dtype=torch.float64, device=self.device)
        graph = acoustic.clone()
        acoustic[self.finals] = self.final_acoustic
        graph[self.finals] = self.final_graph
        return acoustic, graph


def take_extra(values: Any, index: Tensor) -> Any:
    """Entries ``index`` of a per-arc/per-state extra (a tensor or a tuple)."""
    if isinstance(values, Tensor):
        return values[index.to(values.device)]
    return tuple(values[i] for i in index.tolist())
