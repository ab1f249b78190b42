"""A lattice expanded and scored once, as score components that any weight setting recombines.

How scores combine (the one place this is defined)
--------------------------------------------------
Every path's total score is a weighted sum of components, each summed over the path's arcs and
its final state, in language-model units (natural log, higher is better)::

    total = sum_k w_k * s_k                                  named first-pass scores
          + old_lm_weight * old_lm                           the first-pass LM
          + lm_weight * (new_lm + unk_penalty * unk)         the new LM
          + word_penalty * words

* ``s_k``: the input's named scores (:meth:`Lattice.named_scores`): a lattice's ``acoustic``
  and ``graph``, or an n-best list's own names (``decoder``, ``ctc``, ``lm``, ``acoustic``...),
  except the one that is the old LM. ``w_k`` is ``score_weights[k]``; where unset, a score named
  ``acoustic`` gets ``acoustic_scale`` (default ``1/lmscale`` from an HTK header, else 0.1) and
  every other name 1.
* ``old_lm``: the named score ``old_lm_score`` (default: ``lm`` when the input has one, else
  ``graph``). With an old-LM scorer (``afp rescore --old-lm ARPA``, the n-gram that built the
  decoding graph) it is instead that model's exact log-probability of the path's words and
  ``</s>``, computed on the same expansion, and the graph score's rest (``graph - old_lm``:
  pronunciation and transition log-probabilities) stays among the ``s_k`` at weight 1, as
  Kaldi's ``lmrescore`` does. ``old_lm_weight`` 0 replaces the old LM, 1 keeps it in full.
* ``new_lm``: the rescoring model's log-probability of the path's words and ``</s>``.
* ``unk``: how many of the path's words the new model does not know (it scores them as its
  ``<unk>``); ``unk_penalty`` is a log-probability added to each, as TheanoLM's and SRILM's
  unknown-word penalties are.
* ``words``: how many words the LM scores (skipped symbols such as ``!SIL`` do not count).

The first-pass score of a path is the same sum with ``lm_weight = 0`` and ``old_lm_weight = 1``.

A :class:`ScoredLattice` holds these components per expanded arc as one ``(X, C)`` matrix, so a
weight setting is a matrix-vector product and a search: this is how several LM weights, and
``afp tune``'s whole grid, share one expansion and one LM pass.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from lattices.case import model_spellings
from lattices.expand import DEFAULT_SKIP, PAD, Expansion, expand, expand_two_sided, lattice_word_map
from lattices.lattice import Lattice, LatticeFormatError
from lattices.ops import unique_rows
from lattices.scorer import ContextScorer, WindowScorer
from lattices.search import Dag

DEFAULT_ACOUSTIC_SCALE = 0.1
#: the components after the named scores, in this order
TAIL = ("old_lm", "new_lm", "unk", "words")


def default_acoustic_scale(lattice: Lattice) -> float:
    """The weight of a lattice's ``acoustic`` score when none is given, by where it came from:

    ===========================  =============================================================
    HTK SLF with ``lmscale=S``   ``1/S`` (the header's own scale)
    k2 (icefall)                 1.0: icefall's lattice scores are already scaled
    everything else              0.1 (:data:`DEFAULT_ACOUSTIC_SCALE`: Kaldi's usual 1/LMWT with
                                 LMWT 10; HTK without ``lmscale``, OpenFst, JSON, n-best lists)
    ===========================  =============================================================
    """
    lmscale = lattice.meta.get("lmscale")
    if lmscale:
        return 1.0 / float(lmscale)
    if any(str(name).startswith("k2") for name in lattice.meta):
        return 1.0
    return DEFAULT_ACOUSTIC_SCALE


class WeightError(ValueError):
    """A weight setting that cannot be used; ``field`` is the option at fault (``lm_weight``,
    ``score_weights``...)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class ScoreNameError(WeightError):
    """A weight names a score the input does not carry."""


#: the option that sets each weight of :data:`TAIL` (named scores: ``score_weights``)
TAIL_OPTIONS = {"old_lm": "old_lm_weight", "new_lm": "lm_weight", "unk": "unk_penalty", "words": "word_penalty"}


def check_totals(parts: Tensor, vector: Tensor, names: tuple[str, ...], totals: Tensor, where: str = "") -> None:
    """Raise :class:`WeightError` when the weighted ``totals`` (float64 ``(X,)`` = ``parts @ vector``,
    ``parts`` ``(X, C)``) are not all finite: a weight so large that the sum overflows. The
    error names the weight whose product overflowed first."""
    if bool(torch.isfinite(totals).all()):
        return
    largest = parts.abs().amax(dim=0) if parts.shape[0] else torch.zeros_like(vector)
    product = largest * vector.abs()
    culprit = int(torch.argmax(torch.where(torch.isfinite(product), product, torch.inf)))
    name = names[culprit]
    option = TAIL_OPTIONS.get(name, "acoustic_scale" if name == "acoustic" else "score_weights")
    raise WeightError(f"{where}the weighted scores overflow: {option} = {float(vector[culprit]):g} times the "
                      f"{name} scores (up to {float(largest[culprit]):g}) is not a finite number; use a "
                      f"smaller weight", option)


@dataclass(frozen=True)
class Weights:
    """One resolved weight setting (see the module docstring): every number the combination uses,
    nothing left to a default. Not an options type: :class:`lattices.rescore.RescoreOptions` is
    the one options type, and its :meth:`~lattices.rescore.RescoreOptions.weights` resolves it
    into this for one lattice. ``score_weights`` maps names to ``w_k`` (a name left out weighs
    1, ``acoustic`` the default acoustic scale)."""

    lm_weight: float
    old_lm_weight: float
    word_penalty: float
    unk_penalty: float
    score_weights: Mapping[str, float] = field(default_factory=dict)


#: the weight coordinates of a search point (:func:`point_weights`); named scores are ``score:NAME``
POINT_WEIGHTS = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")
SCORE_PREFIX = "score:"


def point_weights(point: Mapping[str, float], named: Mapping[str, float] | None = None) -> Weights:
    """The weights of a point of ``afp tune``'s search: its :data:`POINT_WEIGHTS` (0 where absent)
    and its ``score:NAME`` entries as named score weights, over ``named``. The one reading of a
    search point (the tuner, its line searches and the weights file it saves all use it)."""
    scores = {**(named or {}), **{k[len(SCORE_PREFIX):]: float(v) for k, v in point.items()
                                  if k.startswith(SCORE_PREFIX)}}
    return Weights(**{name: float(point.get(name, 0.0)) for name in POINT_WEIGHTS}, score_weights=scores)


def component_vector(names: tuple[str, ...], weights: Weights, default_acoustic_scale: float,
                     where: str = "") -> Tensor:
    """float64 ``(C,)``: the weight of each component ``names`` (named scores, then :data:`TAIL`)
    under ``weights``; the one implementation of the combination rule of the module docstring."""
    named_names = names[: -len(TAIL)]
    unknown = sorted(set(weights.score_weights) - set(named_names))
    if unknown:
        raise ScoreNameError(f"{where}no score named {', '.join(unknown)}; the scores are "
                             f"{', '.join(named_names) or 'none'} (and the old LM)", "score_weights")
    named = [weights.score_weights.get(n, default_acoustic_scale if n == "acoustic" else 1.0) for n in named_names]
    tail = [weights.old_lm_weight, weights.lm_weight, weights.lm_weight * weights.unk_penalty, weights.word_penalty]
    return torch.tensor(named + tail, dtype=torch.float64)


def old_lm_name(names: tuple[str, ...], requested: str | None, key: str = "") -> str | None:
    """Which named score is the old LM: ``requested``, else ``lm`` if present, else ``graph``."""
    if requested is not None:
        if requested not in names:
            raise ScoreNameError(f"lattice {key!r}: the old-LM score {requested!r} is not among its scores "
                                 f"{', '.join(names)}", "old_lm_score")
        return requested
    return "lm" if "lm" in names else ("graph" if "graph" in names else None)


@dataclass(frozen=True)
class ScoredLattice:
    """A lattice expanded to its scorers' order and scored (``X`` expanded arcs, ``G`` expanded
    final states, ``C`` components).

    Attributes:
      lattice: the (possibly pruned) input lattice.
      expansion: its expansion; expansion histories hold lattice symbol ids, ``<s>`` being
        ``len(lattice.symbols)``.
      names: ``C`` component names: the named scores other than the old LM, then :data:`TAIL`.
      arc_parts: float64 ``(X, C)`` components of every expanded arc.
      final_parts: float64 ``(G, C)`` components of leaving through every expanded final state.
      default_acoustic_scale, default_word_penalty: from the options or the lattice header.
      stats: counts (expanded states and arcs, contexts, OOV words...).
      timing: seconds spent expanding and scoring.
    """

    lattice: Lattice
    expansion: Expansion
    names: tuple[str, ...]
    arc_parts: Tensor
    final_parts: Tensor
    default_acoustic_scale: float
    default_word_penalty: float
    stats: dict[str, Any]
    pruned: dict[str, Any] | None = None
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def named(self) -> tuple[str, ...]:
        """The named first-pass scores that are weighted by ``w_k``."""
        return self.names[: -len(TAIL)]

    def vector(self, weights: Weights) -> Tensor:
        """float64 ``(C,)``: the weight of every component under ``weights``."""
        return component_vector(self.names, weights, self.default_acoustic_scale,
                                f"lattice {self.lattice.key!r}: ").to(self.arc_parts.device)

    @cached_property
    def _graph(self) -> Dag:
        """The expanded lattice's graph, grouped once for every weight setting (scores unset)."""
        e = self.expansion
        level = self.lattice.levels[e.state_orig]
        none = torch.empty(0, dtype=torch.float64)
        return Dag(e.num_states, 0, e.src, e.dst, none, e.finals, none, level)

    def dag(self, vector: Tensor, deadline: float | None = None) -> Dag:
        """The expanded lattice as a :class:`Dag` with the totals under a weight ``vector`` (float64
        ``(C,)``); every call shares one graph and its cached level groupings."""
        arcs, finals = self.arc_parts @ vector, self.final_parts @ vector
        where = f"lattice {self.lattice.key!r}: "
        check_totals(self.arc_parts, vector, self.names, arcs, where)
        check_totals(self.final_parts, vector, self.names, finals, where)
        return self._graph.with_scores(arcs, finals, deadline)

    def recogniser_weights(self) -> tuple[dict[str, float], float | None]:
        """The recogniser's own weights where the input tells them (``meta["first_pass_weights"]``,
        recovered from an n-best list's totals): those of the named scores here, and that of
        the old LM (None when unknown)."""
        recovered = dict(self.lattice.meta.get("first_pass_weights") or {})
        old = recovered.pop(self.stats.get("old_lm_score"), None)
        return {k: v for k, v in recovered.items() if k in self.named}, old

    def first_pass_weights(self, weights: Weights) -> Weights:
        """The first-pass setting: no new LM, and the recogniser's own combination where the input
        tells it (penalty 0); else the same named weights and penalty with the old LM in full."""
        named, old = self.recogniser_weights()
        off = {name: 0.0 for name in self.stats.get("features", ())}  # the features are not the first pass's
        if old is not None and set(named) | set(off) == set(self.named):
            return Weights(lm_weight=0.0, old_lm_weight=old, word_penalty=0.0, unk_penalty=0.0,
                           score_weights={**named, **off})
        return Weights(lm_weight=0.0, old_lm_weight=1.0, word_penalty=weights.word_penalty, unk_penalty=0.0,
                       score_weights={**weights.score_weights, **off})

    def column(self, name: str) -> int:
        return self.names.index(name)


def _model_ids(symbols: tuple[str, ...], used: Tensor, scorer: ContextScorer | WindowScorer, device: torch.device,
               match_case: bool = True) -> tuple[Tensor, list[tuple[str, str]]]:
    """int64 ``(len(symbols) + 1,)``: the scorer's id of each used lattice symbol (PAD for unused
    ones) and, last, of ``<s>``; and the ``(symbol, form)`` pairs looked up in another case
    (:func:`lattices.case.model_spellings`). Only the symbols the lattice uses are looked up."""
    table = torch.full((len(symbols) + 1,), PAD, dtype=torch.int64)
    ids = used.tolist()
    mapped: list[tuple[str, str]] = []
    if ids:
        spelled, mapped = model_spellings([symbols[i] for i in ids], scorer.known, match_case)
        table[used.cpu()] = scorer.word_ids(spelled).to(torch.int64)
    table[-1] = scorer.bos_id
    return table.to(device), mapped


def lm_scores(expansion: Expansion, scorer: ContextScorer, model_ids: Tensor) -> tuple[Tensor, Tensor, dict[str, int]]:
    """A scorer's log-probabilities of every expanded arc's word (0 for skipped symbols) and of
    ``</s>`` at every expanded final state; each distinct (context, word) pair, in the scorer's
    own ids, is scored once.

    Args:
      model_ids: from :func:`_model_ids`: maps the expansion's symbol ids to the scorer's ids.
    Returns float64 ``(X,)``, float64 ``(G,)`` and counts (unique contexts, scored pairs).
    """
    device = expansion.src.device
    scored = (expansion.arc_lm_word != PAD).nonzero().squeeze(1)
    pair_state = torch.cat([expansion.src[scored], expansion.finals])
    words = model_ids[expansion.arc_lm_word[scored]]
    pair_word = torch.cat([words, torch.full_like(expansion.finals, scorer.eos_id)])
    history = expansion.state_history
    history = torch.where(history == PAD, PAD, model_ids[history.clamp(min=0)])
    histories, context_of_state = unique_rows(history)
    pair_context = context_of_state[pair_state]
    pairs, pair_index = unique_rows(torch.stack([pair_context, pair_word], dim=1))
    used_contexts, context_index = torch.unique(pairs[:, 0], return_inverse=True)
    rows = histories[used_contexts]
    lengths = (rows != PAD).sum(dim=1)
    values = scorer.score(rows.clamp(min=0), lengths, pairs[:, 1], context_index)
    values = values.to(device=device, dtype=torch.float64)[pair_index]
    arc_lm = torch.zeros(expansion.num_arcs, dtype=torch.float64, device=device)
    arc_lm[scored] = values[: scored.shape[0]]
    _check_predicted(expansion, arc_lm)
    counts = {"unique_contexts": int(used_contexts.shape[0]), "scored_pairs": int(pairs.shape[0])}
    return arc_lm, values[scored.shape[0]:], counts


def _check_predicted(expansion: Expansion, arc_lm: Tensor) -> None:
    """Raise :class:`LatticeFormatError` naming the first lattice word that ``arc_lm`` (float64
    ``(X,)``) gives probability 0: a symbol the model blocks (``#1``, ``<s>`` or ``<eps>`` that
    the skip list does not skip) would make every path through it -inf and leave no best path."""
    bad = ~torch.isfinite(arc_lm)
    if not bool(bad.any()):
        return
    lattice = expansion.lattice
    arc = int(expansion.arc_orig[bad.nonzero()[0, 0]])
    word = lattice.symbols[int(lattice.words[arc])]
    kind = {"<s>": "the sentence-start symbol", "<eps>": "the epsilon symbol"}.get(word, "a symbol")
    raise LatticeFormatError(
        f"word {word!r} on arc {arc} (state {int(lattice.src[arc])} -> {int(lattice.dst[arc])}) is {kind} the "
        "language model never predicts (probability 0): remove it from the lattice (Kaldi: fstrmsymbols, or "
        "lattice-project) or, from Python, add it to the skipped symbols (RescoreOptions.skip_words)",
        key=lattice.key, field="words")


def window_scores(expansion: Expansion, feature: WindowScorer, model_ids: Tensor,
                  eos: int) -> tuple[Tensor, Tensor, dict[str, int]]:
    """A window model's log-probabilities of every expanded arc's word given its window (the
    ``rho`` tokens before it, from the arc's source state, and the ``future`` after it, from its
    destination state: a two-sided expansion's) and of ``</s>`` at every expanded final state
    (nothing after it); each distinct (window, word) is scored once.

    Args:
      expansion: from :func:`lattices.expand.expand_two_sided` with at least the feature's widths.
      model_ids: :func:`_model_ids` of the feature, with ``</s>`` (``eos``, the expansion's id
        of it) appended.
    Returns float64 ``(X,)``, float64 ``(G,)`` and counts (scored windows).
    """
    assert expansion.state_future is not None and expansion.future >= feature.future
    assert expansion.rho >= feature.rho
    device = expansion.src.device
    scored = (expansion.arc_lm_word != PAD).nonzero().squeeze(1)
    rho, future = feature.rho, feature.future

    def ids(rows: Tensor) -> Tensor:
        return torch.where(rows == PAD, PAD, model_ids[rows.clamp(min=0)])

    left = ids(torch.cat([expansion.state_history[expansion.src[scored]],
                          expansion.state_history[expansion.finals]])[:, expansion.rho - rho:])
    g = expansion.finals.shape[0]
    right = torch.cat([ids(expansion.state_future[expansion.dst[scored]][:, :future]),
                       torch.full((g, future), PAD, dtype=torch.int64, device=device)])
    mask = torch.full((left.shape[0], 1), feature.mask_id, dtype=torch.int64, device=device)
    targets = torch.cat([model_ids[expansion.arc_lm_word[scored]],
                         torch.full((g,), feature.eos_id, dtype=torch.int64, device=device)])
    # the de-duplication of lm.window.score_each_window_once (afp score/ppl), here in the engine's own
    # hash order: lattices/ does not import lm/ (DESIGN.md), the model is seen through the protocol
    windows, window_of = unique_rows(torch.cat([left, mask, right], dim=1))  # each window read once
    pairs, pair_of = unique_rows(torch.stack([window_of, targets], dim=1))  # each (window, word) scored once
    values = feature.score_windows(windows.clamp(min=0), windows != PAD, pairs[:, 1], pairs[:, 0])
    values = values.to(device=device, dtype=torch.float64)[pair_of]
    arc = torch.zeros(expansion.num_arcs, dtype=torch.float64, device=device)
    arc[scored] = values[: scored.shape[0]]
    _check_predicted(expansion, arc)
    return arc, values[scored.shape[0]:], {"scored_windows": int(windows.shape[0])}


def score_lattice(lattice: Lattice, scorer: ContextScorer, *, old_lm: ContextScorer | None = None,
                  old_lm_score: str | None = None, acoustic_scale: float, word_penalty: float,
                  skip: frozenset[str] = DEFAULT_SKIP, max_arcs: int | None = None,
                  deadline: float | None = None, pruned: dict[str, Any] | None = None,
                  features: Mapping[str, WindowScorer] | None = None, match_case: bool = True) -> ScoredLattice:
    """Expand ``lattice`` to the order of its scorers and compute every component of every arc.

    Args:
      scorer: the new LM (finite context).
      old_lm: optional scorer of the old LM to subtract exactly (see the module docstring).
      features: acausal window models (:class:`~lattices.scorer.WindowScorer`) by name: each
        adds the named score ``name``, its log-probability of each word given the words around
        it (and of ``</s>``), summed along a path (a pseudo-log-likelihood). With any, the
        lattice is expanded both ways (:func:`lattices.expand.expand_two_sided`) to the widest
        left context of all the models and the widest future of the features.
      old_lm_score: which named score is the old LM (default ``lm``, else ``graph``).
      acoustic_scale, word_penalty: the defaults of ``w_acoustic`` and the word penalty.
      max_arcs, deadline: the expansion's budget and time limit.
      match_case: look a word each model does not know up in another case (:mod:`lattices.case`).
    Raises :class:`LatticeFormatError` for a lattice word a scorer gives probability 0 (a symbol
    the model never predicts, such as ``#1``, that ``skip`` does not skip).
    """
    features = dict(features or {})
    sizes = [s.context_size for s in (scorer, old_lm) if s is not None]
    if any(size is None for size in sizes):
        raise ValueError("the model has an unbounded context (an exact RNN): exact lattice expansion needs an "
                         "AFP-rho or n-gram model")
    sizes += [f.rho for f in features.values()]
    timing: dict[str, float] = {}
    device = lattice.device
    symbols = lattice.symbols
    bos = len(symbols)
    identity = lattice_word_map(lattice, skip)  # reads the used symbols only, never the whole table
    used = torch.unique(lattice.words)
    tick = time.perf_counter()
    if features:
        expansion = expand_two_sided(lattice, identity, max(sizes), max(f.future for f in features.values()),  # type: ignore[arg-type]
                                     bos, bos + 1, max_arcs, deadline)
    else:
        expansion = expand(lattice, identity, max(sizes), bos, max_arcs, deadline)  # type: ignore[arg-type]
    timing["expand"] = time.perf_counter() - tick

    tick = time.perf_counter()
    new_ids, recased = _model_ids(symbols, used, scorer, device, match_case)
    new_arc, new_final, counts = lm_scores(expansion, scorer, new_ids)
    named_scores = lattice.named_scores()
    old_name = old_lm_name(tuple(named_scores), old_lm_score, lattice.key)
    orig, final_orig = expansion.arc_orig, expansion.final_orig
    columns = {name: (arc[orig], final[final_orig]) for name, (arc, final) in named_scores.items()}
    if old_lm is not None:
        old_ids = _model_ids(symbols, used, old_lm, device, match_case)[0]
        old_arc, old_final, old_counts = lm_scores(expansion, old_lm, old_ids)
        counts["old_lm_pairs"] = old_counts["scored_pairs"]
        if old_name is not None:  # the old LM's share of that score is replaced by the exact n-gram
            arc, final = columns[old_name]
            columns[old_name] = (arc - old_arc, final - old_final)
    else:
        zero = torch.zeros(0, dtype=torch.float64, device=device)
        old_arc, old_final = columns.pop(old_name) if old_name is not None else (
            zero.new_zeros(expansion.num_arcs), zero.new_zeros(expansion.finals.shape[0]))
    for name, feature in features.items():
        if name in columns or name == old_name:
            raise ScoreNameError(f"lattice {lattice.key!r}: feature {name!r} has the name of one of its scores "
                                 f"({', '.join(named_scores)}): name it otherwise", "features")
        ids = torch.cat([_model_ids(symbols, used, feature, device, match_case)[0],
                         torch.tensor([feature.eos_id], dtype=torch.int64, device=device)])
        feature_arc, feature_final, feature_counts = window_scores(expansion, feature, ids, bos + 1)
        columns[name] = (feature_arc, feature_final)
        counts[f"{name}_windows"] = feature_counts["scored_windows"]
    timing["score"] = time.perf_counter() - tick

    known = torch.zeros(len(symbols), dtype=torch.bool)
    if used.numel():
        forms = dict(recased)
        known[used.cpu()] = scorer.known([forms.get(symbols[i], symbols[i]) for i in used.tolist()]).to(torch.bool)
    known = known.to(device)
    is_word = expansion.arc_lm_word != PAD
    arc_symbol = lattice.words[orig]
    is_unk = is_word & ~known[arc_symbol]  # unknown words: ContextScorer.known
    names = (*columns, *TAIL)
    arc_parts = torch.stack([*(c[0] for c in columns.values()), old_arc, new_arc, is_unk.to(torch.float64),
                             is_word.to(torch.float64)], dim=1)
    g = expansion.finals.shape[0]
    final_parts = torch.stack([*(c[1] for c in columns.values()), old_final, new_final,
                               torch.zeros(g, dtype=torch.float64, device=device),
                               torch.zeros(g, dtype=torch.float64, device=device)], dim=1)
    lm_symbols = used[identity.to(used.device)[used] != PAD].tolist()
    oov = sorted({symbols[i] for i in lm_symbols if not bool(known[i])})
    stats = {"expanded_states": expansion.num_states, "expanded_arcs": expansion.num_arcs,
             "lattice_states": lattice.num_states, "lattice_arcs": lattice.num_arcs, "rho": expansion.rho,
             "future": expansion.future, "features": list(features),
             "oov": len(oov), "oov_words": oov[:50], "oov_share": len(oov) / max(1, len(lm_symbols)),
             "recased": len(recased), "recased_words": [list(pair) for pair in recased[:20]],
             "old_lm_score": "old-lm scorer" if old_lm is not None else old_name, **counts}
    return ScoredLattice(lattice=lattice, expansion=expansion, names=names, arc_parts=arc_parts,
                         final_parts=final_parts, default_acoustic_scale=acoustic_scale,
                         default_word_penalty=word_penalty, stats=stats, pruned=pruned, timing=timing)
