"""The rescoring engine: expand, score every (context, word) pair once, combine, search.

How the scores combine is defined in one place, :mod:`lattices.scored`; in short::

    total = sum_k w_k * s_k + old_lm_weight * old_lm + lm_weight * (new_lm + unk_penalty * unk)
            + word_penalty * words

with ``s_k`` the input's named scores (a lattice's ``acoustic`` and ``graph``; an n-best list's
``decoder``, ``ctc``...), ``old_lm`` the first-pass LM (the score named ``lm`` or ``graph``, or an
ARPA n-gram subtracted exactly) and ``new_lm`` the AFP model's log-probability of the path's
words and ``</s>``. Defaults come from the lattice header when it has ``lmscale`` (HTK):
``w_acoustic = 1/lmscale`` and ``word_penalty = wdpenalty/lmscale``; otherwise
``w_acoustic = 0.1`` (Kaldi's usual 1/LMWT) and ``word_penalty = 0``. Several LM weights share
one expansion and one scoring pass.

Decoding: ``viterbi`` (the best path) or ``mbr`` (minimum Bayes risk over the ``mbr_nbest``
best distinct word sequences, :mod:`lattices.mbr`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lattices.expand import DEFAULT_SKIP, PAD, ExpansionTooLarge, expansion_bound
from lattices.kbest import search_distinct
from lattices.lattice import Lattice, take_extra
from lattices.ops import check_deadline
from lattices.scored import DEFAULT_ACOUSTIC_SCALE, ScoredLattice, Weights, WeightError, point_weights, score_lattice
from lattices.reduce import prune, reduce_lattice
from lattices.scored import old_lm_name
from lattices.scorer import ContextScorer, WindowScorer
from lattices.search import Dag, segment_logsumexp

AUTO_PRUNE_BEAMS = (10.0, 5.0, 2.5, 1.25, 0.5, 0.0)
#: the front ends' untuned weights (afp rescore, POST /v1/rescore, afp.Model.rescore): the first
#: pass's combination kept whole, as the recogniser weighed it (an n-best list's weights recovered
#: from its totals, :func:`lattices.formats.nbest.first_pass_weights`; else the old LM at 1), and
#: the new LM added at a quarter of the old LM's weight (``lm_weights`` None). Measured on the
#: ESPnet LibriSpeech lists (models/librispeech, bench/results/untuned_defaults.json): the
#: recogniser's combination plus the new LM at 0.5 of its own scale raised WER, at a quarter it
#: stays within noise of the first pass; only tuning (afp tune) says what helps.
DEFAULT_LM_WEIGHT = 0.25
#: the memory limit of every lattice's expansion (arcs) at every door (the server's
#: AFP_MAX_EXPANDED_ARCS; RescoreOptions says what happens over it)
DEFAULT_MAX_EXPANDED_ARCS = 5_000_000
#: the size (arcs) a dense lattice's expansion is made small to at every door (the server's
#: AFP_TARGET_EXPANDED_ARCS): PocketSphinx dev sets, models/librispeech, one thread: 20k arcs gave a
#: rescoring real-time factor of about 0.08, 50k about 0.12 (bench/results, commit 8fdaff3)
DEFAULT_TARGET_EXPANDED_ARCS = 20_000
#: a lattice is dense when its expansion bound is more than this many times its arcs: a
#: PocketSphinx lattice's reaches 1e4 and far more at rho 4, a sparse Kaldi/AMI lattice's at most
#: about 40, a chain's or an n-best list's 1
DENSE_FACTOR = 100
#: the determinization's defaults (lattices.reduce): its pruning beam on the first pass's scores
#: and its state limit. Beam 10, not 15: on PocketSphinx lattices the fit stage keeps a beam of 5-14
#: at the default target, and beam 10 determinizes 41-48% faster (rescoring 32%) with no loss of
#: WER (models/librispeech/afp trained on at rho 4, first 100 utterances of each dev set, tuned on
#: one, applied to the other: 18.11 / 23.86% against 18.75 / 23.92% at beam 15; bench.rho_sweep's
#: runs, bench/results/rho_sweep/rho4*.json)
DEFAULT_DETERMINIZE_BEAM: float | None = 10.0
DEFAULT_MAX_DETERMINIZED_STATES: int | None = 20_000
DETERMINIZE = ("auto", "always", "never")
#: the request field of each option (where they differ)
_FIELDS = {"lm_weights": "lm_weight"}
DECODERS = ("viterbi", "mbr")
#: ``target_expanded_arcs`` at every door (``--target-arcs 0``, ``target_arcs: 0``,
#: ``AFP_TARGET_EXPANDED_ARCS=0``, ``target_arcs=0``): no target, dense lattices expanded whole up to
#: ``max_expanded_arcs`` (stored as None)
NO_TARGET = 0
#: the whole-number options and what each takes (RescoreOptions checks them)
_WHOLE = {"nbest": "a whole number of at least 1", "mbr_nbest": "a whole number of at least 1",
          "max_kbest_paths": "a whole number of at least 1",
          "max_expanded_arcs": "a whole number of expanded arcs, at least 1",
          "target_expanded_arcs": f"a whole number of expanded arcs, at least 1 ({NO_TARGET}: no target)",
          "max_determinized_states": "a whole number of states, at least 1"}

__all__ = ["AUTO_PRUNE_BEAMS", "DEFAULT_ACOUSTIC_SCALE", "DEFAULT_MAX_EXPANDED_ARCS", "DEFAULT_TARGET_EXPANDED_ARCS",
           "DENSE_FACTOR", "Hypothesis", "NO_TARGET", "Reduction", "reduction", "default_acoustic_scale", "RescoreOptionError",
           "RescoreOptions", "RescoreResult", "prune", "rescore", "rescore_scored", "score_for_options"]


class RescoreOptionError(ValueError):
    """A value :class:`RescoreOptions` refuses: ``field`` names the option (its field name),
    ``expected`` says what it takes, ``value`` is what it got. :meth:`naming` is the same message
    under a door's spelling of the option (``target_arcs`` for ``target_expanded_arcs``)."""

    def __init__(self, field: str, expected: str, value: Any) -> None:
        self.field, self.expected, self.value = field, expected, value
        super().__init__(self.naming(field))

    def naming(self, name: str) -> str:
        """The message with the option called ``name``."""
        return f"{name} must be {self.expected}, got {self.value!r}"


@dataclass(frozen=True)
class RescoreOptions:
    """How to combine scores and what to return. None means "from the lattice header".

    How large an expansion may be: two budgets, in expanded arcs, the same at every door
    (:func:`reduction` decides, from :func:`lattices.expand.expansion_bound`, an upper bound
    computed in milliseconds):

    * ``target_expanded_arcs`` (default :data:`DEFAULT_TARGET_EXPANDED_ARCS`, 20,000; ``--target-arcs``,
      the request field ``target_arcs``, ``AFP_TARGET_EXPANDED_ARCS``): what a **dense** lattice is
      made small to, for speed. Dense: its expansion bound is more than :data:`DENSE_FACTOR` (100)
      times its arcs, as a real decoder's search lattice (PocketSphinx: 1e4 and more at rho 4).
      Over the target it is determinized, minimized and fitted to the target (:mod:`lattices.reduce`),
      and the result says what that kept. Capped by ``max_expanded_arcs``. :data:`NO_TARGET` (0,
      stored as None; every door's spelling: ``--target-arcs 0``, ``target_arcs: 0``,
      ``AFP_TARGET_EXPANDED_ARCS=0``, ``target_arcs=0``) or None: no target, a dense lattice is
      expanded whole, exactly, up to ``max_expanded_arcs``, as every other lattice.
    * ``max_expanded_arcs`` (default :data:`DEFAULT_MAX_EXPANDED_ARCS`, 5,000,000; ``--max-arcs``,
      ``AFP_MAX_EXPANDED_ARCS``): the memory limit of every lattice. Chains, n-best lists and sparse
      lattices (Kaldi, AMI: at most ~40 times their arcs at rho 4) are expanded whole, exactly,
      up to it, never through a reduction they do not need; over it they are reduced to fit it.

    ``auto_prune`` (default on, at every door): when the expansion would exceed its budget, prune to
    fit instead of failing, and report it (``RescoreResult.pruned``: the beam, the budget it had
    to fit, what was kept): the fit stage of :mod:`lattices.reduce`, or, for a lattice that is not
    determinized, the input pruned with beam :data:`AUTO_PRUNE_BEAMS` (10, then halving) until it
    fits. Off (``--no-auto-prune``, ``prune_if_too_large: false``), nothing is pruned to fit a
    budget, the target included: a lattice whose expansion passes ``max_expanded_arcs`` after its
    determinization and minimization fails with :class:`~lattices.expand.ExpansionTooLarge`.
    Whole-number options (``nbest``, ``mbr_nbest``, ``max_kbest_paths``, the budgets,
    ``max_determinized_states``) take any integral number (``int``, ``numpy.int64``...; not a
    bool or a float) and are stored as ``int``; weights take any finite real number and are
    stored as ``float``. A value refused raises :class:`RescoreOptionError` (a weight:
    :class:`~lattices.scored.WeightError`), naming the option.
    ``deadline``: ``time.monotonic()`` seconds after which the work stops with
    :class:`~lattices.ops.DeadlineExceeded` (checked level by level).
    A hypothesis of an n-best list carries its ``rank`` in the list (1 = the recogniser's best);
    equal scores are ordered by it.
    ``score_weights``: ``w_k`` of named scores (``{"decoder": 0.6, "ctc": 0.4}``); an
    ``acoustic_scale`` sets ``w_acoustic`` unless ``score_weights`` names it.
    ``old_lm_score``: the named score that is the old LM (default ``lm``, else ``graph``).
    ``old_lm_weight`` None: the recogniser's own weight of its LM where the input tells it
    (``meta["first_pass_weights"]``, recovered from an n-best list's totals), else 1; named
    scores that ``score_weights`` leaves out take the recogniser's weights too where known.
    ``lm_weights`` None: the untuned default, :data:`DEFAULT_LM_WEIGHT` times the old LM's
    weight (a quarter of it); given, each is a weight of its own.
    ``unk_penalty`` None: the model's own (:func:`afp.options.build_options` fills it in from the
    model; the engine alone reads None as 0).

    These are the one set of defaults of every door (``afp rescore``, ``afp tune``, ``POST
    /v1/rescore``, :meth:`afp.Model.rescore`, ``afp rescore-cuts``): each builds its options with
    :func:`afp.options.build_options`, which starts from them.
    ``determinize``: ``auto`` (the default) makes a lattice whose expansion could pass its budget
    (above: the target for a dense lattice, else the limit) small first, as
    :mod:`lattices.reduce` says: determinized on words under the first pass's weights (beam
    ``determinize_beam``, default 10; at most ``max_determinized_states`` states, default 20,000),
    minimized, and, with ``auto_prune``, pruned to the largest beam that fits; never for
    ``posteriors`` (they need the log semiring). ``always`` does it for every lattice (to the
    same budget), ``never`` for none.
    ``match_case``: a word the model does not know as written but knows in another case (``the``
    for an upper-case model) is scored as the model spells it (:mod:`lattices.case`); results
    keep the input's spellings.
    ``decode``: ``viterbi`` or ``mbr``; ``mbr_nbest`` distinct hypotheses form MBR's hypothesis and
    evidence space, with posteriors ``softmax(mbr_scale * total)``.
    ``max_kbest_paths``: the n-best search (:mod:`lattices.kbest`) expands at most
    ``max_kbest_paths * S`` (state, word prefix) nodes of the ``S``-state expanded lattice, on
    average that many partial word sequences per state; None: the number of hypotheses it looks
    for (``nbest``, ``mbr_nbest`` for MBR, every hypothesis of an n-best list). Where it stops
    early, the result has fewer hypotheses (still the best ones, in order) and its
    ``nbest_complete`` is false; the best path is always found.
    """

    lm_weights: tuple[float, ...] | None = None
    acoustic_scale: float | None = None
    old_lm_weight: float | None = None
    word_penalty: float | None = None
    nbest: int = 1
    max_expanded_arcs: int | None = DEFAULT_MAX_EXPANDED_ARCS
    target_expanded_arcs: int | None = DEFAULT_TARGET_EXPANDED_ARCS
    prune_beam: float | None = None
    posteriors: bool = False
    return_lattice: bool = False
    skip_words: frozenset[str] = DEFAULT_SKIP
    max_kbest_paths: int | None = None
    auto_prune: bool = True
    deadline: float | None = None
    score_weights: tuple[tuple[str, float], ...] = ()
    old_lm_score: str | None = None
    unk_penalty: float | None = None
    decode: str = "viterbi"
    mbr_nbest: int = 100
    mbr_scale: float = 1.0
    match_case: bool = True
    determinize: str = "auto"
    determinize_beam: float | None = DEFAULT_DETERMINIZE_BEAM
    max_determinized_states: int | None = DEFAULT_MAX_DETERMINIZED_STATES

    def __post_init__(self) -> None:
        if isinstance(self.score_weights, dict):
            object.__setattr__(self, "score_weights", tuple(self.score_weights.items()))
        if isinstance(self.lm_weights, list):
            object.__setattr__(self, "lm_weights", tuple(self.lm_weights))
        given = {"lm_weights": self.lm_weights or (), "old_lm_weight": (self.old_lm_weight or 0.0,),
                 "acoustic_scale": (self.acoustic_scale or 0.0,), "word_penalty": (self.word_penalty or 0.0,),
                 "unk_penalty": (self.unk_penalty or 0.0,), "mbr_scale": (self.mbr_scale,),
                 "score_weights": tuple(w for _, w in self.score_weights)}
        for name, values in given.items():
            if not all(isinstance(v, numbers.Real) and math.isfinite(v) for v in values):
                raise WeightError(f"{name} must be finite numbers, got {values}", _FIELDS.get(name, name))
        for name in ("lm_weights", "old_lm_weight", "acoustic_scale", "score_weights"):
            negative = [v for v in given[name] if v < 0]
            if negative:  # a scale on a log-probability: below zero it would prefer the least likely
                raise WeightError(f"{name} must not be negative (a weight of a log-probability), got {negative[0]:g}",
                                  _FIELDS.get(name, name))
        self._normalise_numbers()
        if self.determinize not in DETERMINIZE:
            raise RescoreOptionError("determinize", f"one of {DETERMINIZE}", self.determinize)
        if self.determinize_beam is not None and not self.determinize_beam >= 0:
            raise RescoreOptionError("determinize_beam", ">= 0", self.determinize_beam)
        if self.decode not in DECODERS:
            raise RescoreOptionError("decode", f"one of {DECODERS}", self.decode)
        if self.mbr_scale < 0:
            raise RescoreOptionError("mbr_scale", ">= 0", self.mbr_scale)
        if self.lm_weights is not None and not self.lm_weights:
            raise WeightError("lm_weights: give at least one weight", "lm_weight")
        if self.prune_beam is not None and not self.prune_beam >= 0:
            raise RescoreOptionError("prune_beam", ">= 0", self.prune_beam)

    def _normalise_numbers(self) -> None:
        """Every whole-number option checked (any integral number: ``int``, ``numpy.int64``...; not
        a bool, not a float) and stored as an ``int``; ``target_expanded_arcs`` :data:`NO_TARGET`
        stored as None; the weights (any real number) stored as ``float``. Raises
        :class:`RescoreOptionError` naming the option."""
        for name, expected in _WHOLE.items():
            value = getattr(self, name)
            if value is None and name not in ("nbest", "mbr_nbest"):  # the others: None is no limit
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise RescoreOptionError(name, expected, value)
            value = operator.index(value)
            if name == "target_expanded_arcs" and value == NO_TARGET:
                value = None
            elif value < 1:
                raise RescoreOptionError(name, expected, getattr(self, name))
            object.__setattr__(self, name, value)
        if self.lm_weights is not None:
            object.__setattr__(self, "lm_weights", tuple(float(w) for w in self.lm_weights))
        object.__setattr__(self, "score_weights", tuple((k, float(w)) for k, w in self.score_weights))
        for name in ("acoustic_scale", "old_lm_weight", "word_penalty", "unk_penalty"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))
        object.__setattr__(self, "mbr_scale", float(self.mbr_scale))

    def named_weights(self, names: tuple[str, ...]) -> dict[str, float]:
        """``w_k`` given for an input with named scores ``names``: ``score_weights``, and
        ``acoustic_scale`` for a score named ``acoustic`` unless ``score_weights`` names it."""
        named = dict(self.score_weights)
        if self.acoustic_scale is not None and "acoustic" in names:
            named.setdefault("acoustic", self.acoustic_scale)
        return named

    def at_point(self, point: Mapping[str, float]) -> RescoreOptions:
        """These options at a point of ``afp tune``'s search (:func:`lattices.scored.point_weights`:
        ``lm_weight``, ``old_lm_weight``, ``word_penalty``, ``unk_penalty`` and ``score:NAME``
        entries over these options' own named weights), one LM weight, best path only."""
        weights = point_weights(point, dict(self.score_weights))
        return dataclasses.replace(self, lm_weights=(weights.lm_weight,), old_lm_weight=weights.old_lm_weight,
                                   word_penalty=weights.word_penalty, unk_penalty=weights.unk_penalty,
                                   score_weights=tuple(weights.score_weights.items()), decode="viterbi", nbest=1)

    def old_weight(self, scored: ScoredLattice) -> float:
        """The old LM's weight on ``scored``: ``old_lm_weight``, else the recogniser's own, else 1."""
        if self.old_lm_weight is not None:
            return self.old_lm_weight
        old = scored.recogniser_weights()[1]
        return 1.0 if old is None else old

    def lm_weights_for(self, scored: ScoredLattice) -> tuple[float, ...]:
        """The new LM's weights on ``scored``: ``lm_weights``, else :data:`DEFAULT_LM_WEIGHT` times
        the old LM's weight."""
        return self.lm_weights if self.lm_weights is not None else (DEFAULT_LM_WEIGHT * self.old_weight(scored),)

    def weights(self, lm_weight: float, scored: ScoredLattice) -> Weights:
        """The weight setting for one (absolute) LM weight, header defaults filled in."""
        penalty = self.word_penalty if self.word_penalty is not None else scored.default_word_penalty
        named = scored.recogniser_weights()[0]
        return Weights(lm_weight=lm_weight, old_lm_weight=self.old_weight(scored), word_penalty=penalty,
                       unk_penalty=self.unk_penalty or 0.0, score_weights={**named, **self.named_weights(scored.named)})

    def scales_for(self, lattice: Lattice) -> tuple[float, float]:
        """``(acoustic_scale, word_penalty)`` for ``lattice``, header defaults filled in."""
        lmscale = lattice.meta.get("lmscale")
        acoustic = dict(self.score_weights).get("acoustic", self.acoustic_scale)
        if acoustic is None:
            acoustic = default_acoustic_scale(lattice)
        penalty = self.word_penalty
        if penalty is None:
            penalty = float(lattice.meta.get("wdpenalty", 0.0)) / float(lmscale) if lmscale else 0.0
        return acoustic, penalty


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


@dataclass(frozen=True)
class Hypothesis:
    """One path: its words (LM-scored words only), total score and components, original arc ids.

    ``lm_logprob`` is the new LM's log-probability (words and ``</s>``, without any unknown-word
    penalty), ``old_lm`` the old LM's, ``acoustic`` the named score ``acoustic`` (0 without one),
    ``scores`` every named first-pass score, ``unk`` the words scored as ``<unk>``.
    ``arcs``: every arc of the path in order (epsilons, silence and other skipped symbols
    included); ``word_arcs``: the arcs of ``words``, one per word (``len(word_arcs) ==
    len(words)``). Both are arc ids of :attr:`RescoreResult.searched`."""

    words: list[str]
    score: float
    acoustic: float
    lm_logprob: float
    old_lm: float
    arcs: list[int]
    scores: dict[str, float] = field(default_factory=dict)
    unk: int = 0
    rank: int | None = None
    word_arcs: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {"words": self.words, "score": self.score, "acoustic": self.acoustic,
               "lm_logprob": self.lm_logprob, "old_lm": self.old_lm, "scores": self.scores, "unk": self.unk}
        if self.rank is not None:
            out["rank"] = self.rank
        return out


@dataclass
class RescoreResult:
    """The outcome for one lattice and one LM weight.

    ``kbest_expanded``: (state, word prefix) nodes the n-best search expanded; ``nbest_complete``:
    false when it stopped at ``max_kbest_paths`` before finding every hypothesis asked for.
    ``searched``: the lattice that was expanded (the input, or the pruned input when it was
    pruned); the hypotheses' ``arcs`` and ``word_arcs`` and ``arc_posteriors`` (float64 ``(A,)``
    of its ``A`` arcs) index its arcs, and its node times or transition ids time the words."""

    key: str
    lm_weight: float
    acoustic_scale: float
    old_lm_weight: float
    word_penalty: float
    best: Hypothesis
    nbest: list[Hypothesis]
    stats: dict[str, Any]
    pruned: dict[str, Any] | None = None
    arc_posteriors: Tensor | None = None
    lattice: Lattice | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    first_pass: Hypothesis | None = None
    decode: str = "viterbi"
    score_weights: dict[str, float] = field(default_factory=dict)
    unk_penalty: float = 0.0
    kbest_expanded: int = 0
    nbest_complete: bool = True
    searched: Lattice | None = None

    def word_posteriors(self) -> list[float] | None:
        """The posterior of each word of ``best`` (one per word of ``best.words``: epsilons and
        skipped symbols have none), clamped to [0, 1]; None without ``arc_posteriors``. A word's
        posterior is that of its arc: the share of the lattice's probability mass (under the
        combined scores) on paths through it."""
        if self.arc_posteriors is None:
            return None
        arcs = torch.as_tensor(self.best.word_arcs, dtype=torch.int64)
        return self.arc_posteriors[arcs].clamp(0.0, 1.0).tolist()

    def to_json(self) -> dict[str, Any]:
        """The JSON line of ``afp rescore --json`` (without the rescored lattice)."""
        out = {"key": self.key, "best": self.best.to_json(), "nbest": [h.to_json() for h in self.nbest],
               "first_pass": self.first_pass.to_json() if self.first_pass else None,
               "changed": self.first_pass is not None and self.first_pass.words != self.best.words,
               "decode": self.decode, "lm_weight": self.lm_weight, "acoustic_scale": self.acoustic_scale,
               "old_lm_weight": self.old_lm_weight, "word_penalty": self.word_penalty,
               "unk_penalty": self.unk_penalty, "score_weights": self.score_weights,
               "kbest_expanded": self.kbest_expanded, "nbest_complete": self.nbest_complete,
               **self.stats, "pruned": self.pruned, "seconds": self.seconds["total"], "timing": self.seconds}
        if self.arc_posteriors is not None:
            out["best"]["word_posteriors"] = self.word_posteriors()
        return out


def rescore(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions = RescoreOptions(),
            device: torch.device | str | None = None, old_lm: ContextScorer | None = None,
            features: Mapping[str, WindowScorer] | None = None) -> list[RescoreResult]:
    """Rescore one lattice exactly; one result per LM weight in ``options.lm_weights``.

    ``old_lm``: a scorer of the first-pass LM to subtract exactly (see :mod:`lattices.scored`).
    ``features``: acausal window models by name, each a named score weighted by
    ``options.score_weights`` (:func:`lattices.scored.score_lattice`).
    Raises :class:`~lattices.expand.ExpansionTooLarge` over the budget unless ``auto_prune``."""
    started = time.perf_counter()
    scored = score_for_options(lattice, scorer, options, device, old_lm, features)
    return rescore_scored(scored, options, started)


def score_for_options(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions,
                      device: torch.device | str | None = None, old_lm: ContextScorer | None = None,
                      features: Mapping[str, WindowScorer] | None = None) -> ScoredLattice:
    """Prune (as asked), expand and score once: the weight-independent part of rescoring, pruning
    further when ``auto_prune`` is set and the expansion is over its budget."""
    try:
        return _score(lattice, scorer, options, device, old_lm, features)
    except ExpansionTooLarge:
        if not options.auto_prune or options.prune_beam is not None:
            raise
    for beam in AUTO_PRUNE_BEAMS:
        try:
            return _score(lattice, scorer, dataclasses.replace(options, prune_beam=beam), device, old_lm, features)
        except ExpansionTooLarge:
            if beam == AUTO_PRUNE_BEAMS[-1]:
                raise
    raise AssertionError("unreachable")


def _score(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions, device: torch.device | str | None,
           old_lm: ContextScorer | None, features: Mapping[str, WindowScorer] | None = None) -> ScoredLattice:
    if scorer.context_size is None:
        raise ValueError("the model has an unbounded context (an exact RNN): exact lattice expansion needs an "
                         "AFP-rho or n-gram model")
    lattice = lattice.to(device) if device is not None else lattice
    acoustic_scale, word_penalty = options.scales_for(lattice)
    pruned_report = None
    own = tuple((k, v) for k, v in options.score_weights if k not in (features or {}))  # the input's scores
    if options.prune_beam is not None:  # beam 0 keeps the best path(s) only
        lattice, pruned_report = prune(lattice, options.prune_beam, acoustic_scale, word_penalty, options.skip_words,
                                       options.deadline, own)
    rho = max([s.context_size for s in (scorer, old_lm) if s is not None] + [f.rho for f in (features or {}).values()])
    stages = None
    plan = reduction(lattice, options, rho)
    if plan.reduce:
        exact_old = old_lm is not None
        reduced = reduce_lattice(lattice, rho, plan.budget, _ordering(lattice, options, acoustic_scale, exact_old),
                                 acoustic_scale=acoustic_scale, word_penalty=word_penalty, score_weights=dict(own),
                                 determinize_beam=options.determinize_beam,
                                 max_states=options.max_determinized_states, fit=options.auto_prune,
                                 skip=options.skip_words, deadline=options.deadline,
                                 first_pass=_ordering(lattice, dataclasses.replace(options, old_lm_weight=None),
                                                      acoustic_scale, exact_old))
        lattice, stages = reduced.lattice, reduced.stats()
        if reduced.pruned is not None:
            pruned_report = {**(pruned_report or {}), **reduced.pruned}
    scored = score_lattice(lattice, scorer, old_lm=old_lm, old_lm_score=options.old_lm_score,
                           acoustic_scale=acoustic_scale, word_penalty=word_penalty, skip=options.skip_words,
                           max_arcs=options.max_expanded_arcs, deadline=options.deadline, pruned=pruned_report,
                           features=features, match_case=options.match_case)
    if stages is not None:
        scored.stats["stages"] = stages
    return scored


class Reduction(NamedTuple):
    """:func:`reduction`'s answer: whether :func:`lattices.reduce.reduce_lattice` runs, and the
    budget (expanded arcs; None: none) it makes the lattice fit."""

    reduce: bool
    budget: int | None


def reduction(lattice: Lattice, options: RescoreOptions, rho: int) -> Reduction:
    """Whether ``lattice`` is made small before its expansion to ``rho``, and to what budget
    (:class:`RescoreOptions`' two budgets): a dense lattice (expansion bound over
    :data:`DENSE_FACTOR` times its arcs) fits ``target_expanded_arcs`` (at most
    ``max_expanded_arcs``) when ``auto_prune`` allows pruning, every other lattice
    ``max_expanded_arcs``. ``determinize``: ``never`` never reduces, ``always`` always (to that
    budget), ``auto`` when the bound passes the budget and no ``posteriors`` are asked for."""
    if options.determinize == "never" or lattice.num_arcs == 0:
        return Reduction(False, None)
    if options.determinize == "auto" and options.posteriors:
        return Reduction(False, None)
    bound = expansion_bound(lattice, rho, options.skip_words)
    budget, target = options.max_expanded_arcs, options.target_expanded_arcs
    if target is not None and options.auto_prune and bound > DENSE_FACTOR * lattice.num_arcs:
        budget = target if budget is None else min(target, budget)
    if options.determinize == "always":
        return Reduction(True, budget)
    return Reduction(budget is not None and bound > budget, budget)


def _ordering(lattice: Lattice, options: RescoreOptions, acoustic_scale: float, exact_old_lm: bool) -> dict[str, float]:
    """The first pass's weight of each named score of ``lattice``: ``score_weights``, the acoustic
    scale, the old LM's weight (the recogniser's own, else 1, when unset; 1 for the graph score's
    rest when an old-LM scorer replaces it), 1 for the rest."""
    named = dict(options.score_weights)
    recovered = dict(lattice.meta.get("first_pass_weights") or {})
    old_name = old_lm_name(tuple(lattice.named_scores()), options.old_lm_score, lattice.key)
    out = {}
    for name in lattice.named_scores():
        if name in named:
            out[name] = named[name]
        elif name == "acoustic":
            out[name] = acoustic_scale
        elif name == old_name and not exact_old_lm:
            out[name] = options.old_lm_weight if options.old_lm_weight is not None else recovered.get(name, 1.0)
        else:
            out[name] = recovered.get(name, 1.0)
    if not any(v > 0 for v in out.values()):  # every first-pass score off: order by the acoustic score alone
        out = {name: 1.0 for name in out}
    return out


def rescore_scored(scored: ScoredLattice, options: RescoreOptions, started: float | None = None) -> list[RescoreResult]:
    """The searches of :func:`rescore` on an already scored lattice, one result per LM weight."""
    started = time.perf_counter() if started is None else started
    lattice, expansion = scored.lattice, scored.expansion
    labels = torch.where(expansion.arc_lm_word != PAD, lattice.words[expansion.arc_orig], -1)
    first_weights = scored.first_pass_weights(options.weights(1.0, scored))
    first = first_pass_best(scored, first_weights, labels)
    results = []
    for lm_weight in options.lm_weights_for(scored):
        tick = time.perf_counter()
        weights = options.weights(lm_weight, scored)
        vector = scored.vector(weights)
        dag = scored.dag(vector, options.deadline)
        count = max(options.nbest, options.mbr_nbest if options.decode == "mbr" else 1)
        is_nbest = "nbest" in lattice.meta and "hypothesis" in lattice.final_extra
        wanted = max(count, int(lattice.meta["nbest"])) if is_nbest else count
        per_state = options.max_kbest_paths if options.max_kbest_paths is not None else wanted
        search = search_distinct(dag, labels, wanted, per_state * max(dag.num_states, 1))
        found = search.found or [dag.best_path()]  # stopped before the first: the best path is the best sequence
        ranked = [_hypothesis(scored, arcs, score) for score, arcs in found]
        if is_nbest:  # every hypothesis was listed: order equal scores by the recogniser's rank
            ranked = sorted(ranked, key=lambda h: (-h.score, h.rank))[:count]
        if options.decode == "mbr":
            check_deadline(options.deadline)
            ranked_mbr = ranked[: options.mbr_nbest]
            best = _mbr_best(ranked_mbr, options.mbr_scale)
        else:
            best = ranked[0]
        posteriors = None
        if options.posteriors:
            posteriors = segment_logsumexp(dag.arc_posteriors().log(), expansion.arc_orig, lattice.num_arcs).exp()
        rescored = _rescored_lattice(scored, vector) if options.return_lattice else None
        timing = {**scored.timing, "search": time.perf_counter() - tick, "total": time.perf_counter() - started}
        results.append(RescoreResult(
            key=lattice.key, lm_weight=weights.lm_weight,
            acoustic_scale=weights.score_weights.get("acoustic", scored.default_acoustic_scale),
            old_lm_weight=weights.old_lm_weight, word_penalty=weights.word_penalty, best=best,
            nbest=ranked[: options.nbest], stats=scored.stats, pruned=scored.pruned,
            arc_posteriors=posteriors.cpu() if posteriors is not None else None, lattice=rescored, seconds=timing,
            first_pass=first, decode=options.decode, score_weights=dict(zip(scored.named, vector.tolist())),
            unk_penalty=weights.unk_penalty, kbest_expanded=search.expanded, nbest_complete=not search.truncated,
            searched=lattice))
    return results


def first_pass_best(scored: ScoredLattice, weights: Weights, labels: Tensor) -> Hypothesis:
    """The first pass's own 1-best: for an n-best list the recogniser's first hypothesis, for a
    lattice the best path under the first-pass scores (old LM in full, no new LM)."""
    lattice, expansion = scored.lattice, scored.expansion
    ranks = lattice.final_extra.get("hypothesis")
    vector = scored.vector(weights)
    first = (ranks.to(expansion.final_orig.device)[expansion.final_orig] == 0).nonzero() if ranks is not None \
        and "nbest" in lattice.meta else None
    if first is not None and first.numel():  # (pruning may have removed it: then the search decides)
        final = int(first[0])
        arcs = _path_to(expansion, int(expansion.finals[final]))
        score = float(scored.arc_parts[arcs].sum(0) @ vector + scored.final_parts[final] @ vector)
        return _hypothesis(scored, arcs, score)
    score, arcs = scored.dag(vector).best_path()
    return _hypothesis(scored, arcs.to(scored.arc_parts.device), score)


def _path_to(expansion: Any, state: int) -> Tensor:
    """The arcs of the path into ``state`` of an expanded tree (every state has one incoming arc)."""
    incoming = torch.full((expansion.num_states,), -1, dtype=torch.int64)
    incoming[expansion.dst.cpu()] = torch.arange(expansion.num_arcs)
    src = expansion.src.cpu()
    arcs = []
    while state != 0:
        arc = int(incoming[state])
        arcs.append(arc)
        state = int(src[arc])
    return torch.tensor(arcs[::-1], dtype=torch.int64, device=expansion.src.device)


def _hypothesis(scored: ScoredLattice, arcs: Tensor, score: float) -> Hypothesis:
    """A path's words and components; ``arcs`` are expanded arc ids in path order."""
    expansion, lattice = scored.expansion, scored.lattice
    arcs = arcs.to(expansion.src.device)
    end_state = int(expansion.dst[arcs[-1]]) if arcs.numel() else 0
    final = int((expansion.finals == end_state).nonzero()[0])
    parts = (scored.arc_parts[arcs].sum(0) + scored.final_parts[final]).tolist()
    values = dict(zip(scored.names, parts))
    orig = expansion.arc_orig[arcs].tolist()
    word_arcs = [a for a, lm_word in zip(orig, expansion.arc_lm_word[arcs].tolist()) if lm_word != PAD]
    words = [lattice.symbols[w] for w in lattice.words[word_arcs].tolist()]
    named = {k: values[k] for k in scored.named}
    if scored.stats.get("old_lm_score") not in (None, "old-lm scorer"):
        named[scored.stats["old_lm_score"]] = values["old_lm"]
    ranks = lattice.final_extra.get("hypothesis")
    rank = int(ranks[int(expansion.final_orig[final])]) + 1 if ranks is not None else None
    return Hypothesis(words=words, score=score, acoustic=values.get("acoustic", 0.0), lm_logprob=values["new_lm"],
                      old_lm=values["old_lm"], arcs=orig, scores=named, unk=int(round(values["unk"])), rank=rank,
                      word_arcs=word_arcs)


def _mbr_best(ranked: list[Hypothesis], scale: float) -> Hypothesis:
    """The hypothesis with the least expected word errors among ``ranked`` (:mod:`lattices.mbr`)."""
    from lattices.mbr import edit_distance_matrix, mbr_choice

    if len(ranked) == 1:
        return ranked[0]
    distances = edit_distance_matrix([h.words for h in ranked])
    scores = torch.tensor([h.score for h in ranked], dtype=torch.float64)
    return ranked[int(mbr_choice(scores, distances, scale))]


def _rescored_lattice(scored: ScoredLattice, vector: Tensor) -> Lattice:
    """The expanded lattice as a :class:`Lattice` whose graph scores are everything but the
    weighted acoustic score and the word penalty (the combined LM scores, and the graph's rest
    when an old LM was subtracted)."""
    expansion = scored.expansion
    lattice, orig = scored.lattice, expansion.arc_orig
    keep = torch.ones_like(vector)
    keep[scored.column("words")] = 0.0
    if "acoustic" in scored.named:
        keep[scored.column("acoustic")] = 0.0
    graph, final_graph = scored.arc_parts @ (vector * keep), scored.final_parts @ (vector * keep)
    return Lattice(
        key=lattice.key, num_states=expansion.num_states, start=0, src=expansion.src, dst=expansion.dst,
        words=lattice.words[orig], acoustic=lattice.acoustic[orig], graph=graph, finals=expansion.finals,
        final_acoustic=lattice.final_acoustic[expansion.final_orig], final_graph=final_graph,
        symbols=lattice.symbols, meta=dict(lattice.meta),
        arc_extra={k: take_extra(v, orig) for k, v in lattice.arc_extra.items()},
        state_extra={k: take_extra(v, expansion.state_orig) for k, v in lattice.state_extra.items()},
        final_extra={k: take_extra(v, expansion.final_orig) for k, v in lattice.final_extra.items()})

