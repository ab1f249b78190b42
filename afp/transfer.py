"""Tune on one dev set, apply to another: what tuned weights are worth on data they were not tuned on.

Every set is a :class:`afp.tune.Tuner` (its inputs expanded and scored once). :func:`transfer`
tunes the weights on each set in turn (:func:`tune_weights`: ``afp tune``'s joint search, or the
same search with some weights held) and applies them to every other set (:func:`apply_weights`),
where each utterance's word errors are compared, matched pairs and bootstrap
(:mod:`afp.significance`), with that set's first pass, with a recogniser's own 1-best when one is
given, and with other systems' errors on the same utterances::

    from afp.transfer import transfer
    for applied in transfer({"dev_clean": clean, "dev_other": other}, folds=1):
        print(applied.tuned_on, "->", applied.applied_to, applied.decoded.against["first pass"].summary())

Applying is deciding each utterance at the point, as ``afp rescore --weights`` does with the
weights ``afp tune --save`` writes (its options are the tuner's at that point,
:meth:`lattices.rescore.RescoreOptions.at_point`). By default the tuner's own scored inputs decide
(:meth:`afp.tune.Tuner.decisions`; the same words wherever the reduction before expansion does not
depend on the weights: n-best lists, lattices within the expansion budget, ``tests/test_parity.py``).
Given the set's ``inputs``, each is prepared and scored again under those options, as the engine
does (a dense lattice is pruned to its budget under the applied weights), and timed.

A Python caller gets from one call what the benchmarks of LibriSpeech n-best lists and
PocketSphinx lattices report (``bench.pocketsphinx_wer_table``, and the retired ``bench.wer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from afp import mert
from afp.significance import Comparison, compare
from afp.tune import Tuner, first_pass_point, joint_tune, mert_problem
from afp.tune_job import DEFAULT_FOLDS, DEFAULT_RESTARTS
from afp.wer import word_errors
from lattices.rescore import RescoreOptions
from lattices.scored import ScoredLattice

__all__ = ["BASELINE", "FIRST_PASS", "Applied", "Decoded", "Tuned", "apply_weights", "transfer", "tune_weights"]

#: the names of the comparisons every :class:`Decoded` may hold beside other systems'
FIRST_PASS = "first pass"
BASELINE = "baseline"

#: how an input is prepared and scored under some options (``score_for_options`` with a scorer bound)
ScoreInput = Callable[[Any, RescoreOptions], ScoredLattice]


@dataclass(frozen=True)
class Tuned:
    """Weights tuned on one set.

    Attributes:
      point: the weights to apply, a point of ``afp tune``'s search (``lm_weight``,
        ``old_lm_weight``, ``word_penalty``, ``unk_penalty``, ``score:NAME``); None when there is
        none to apply (``afp tune --save`` would write nothing: see :func:`tune_weights`).
      reason: why this point (``afp tune``'s own words for the joint search).
      wer: the tuning set's WER (percent) at the point the search ended at.
      report: :func:`afp.tune.joint_tune`'s report (``afp tune --json``), or for a search with
        weights held its ``start``, ``point``, ``wer``, ``line_searches`` and ``at_edge``.
    """

    point: dict[str, float] | None
    reason: str
    wer: float
    report: dict[str, Any]


@dataclass(frozen=True)
class Decoded:
    """A set decoded at one point: per utterance (the tuner's order) its key, chosen words, word
    errors and reference length, and the comparisons by name (:data:`FIRST_PASS`, :data:`BASELINE`,
    other systems), each with this decoding as system B; ``seconds``: per utterance, preparing,
    scoring and searching its input again (None when the tuner's scored inputs decided)."""

    keys: tuple[str, ...]
    words: tuple[tuple[str, ...], ...]
    errors: tuple[int, ...]
    ref_words: tuple[int, ...]
    against: dict[str, Comparison]
    seconds: tuple[float, ...] | None = None

    @property
    def wer(self) -> float:
        """The WER of the set, percent."""
        return 100.0 * sum(self.errors) / max(1, sum(self.ref_words))


@dataclass(frozen=True)
class Applied:
    """Weights tuned on set ``tuned_on`` applied to set ``applied_to``; ``decoded`` is None when
    ``tuned.point`` is (nothing to apply)."""

    tuned_on: str
    applied_to: str
    tuned: Tuned
    decoded: Decoded | None

    def to_json(self) -> dict[str, Any]:
        """The directions, the point and why, the tuning WER, the applied WER and every comparison."""
        out: dict[str, Any] = {"tuned_on": self.tuned_on, "applied_to": self.applied_to, "point": self.tuned.point,
                               "reason": self.tuned.reason, "tuned_wer": self.tuned.wer}
        if self.decoded is not None:
            out.update(wer=self.decoded.wer, ref_words=sum(self.decoded.ref_words),
                       against={name: c.to_json() for name, c in self.decoded.against.items()})
        return out


def _coordinates(tuner: Tuner, tune_scores: Sequence[str]) -> list[str]:
    """The joint search's coordinates (:func:`afp.tune.joint_tune`'s): the four base weights, the
    named scores of ``tune_scores`` and the tuner's features."""
    return [*mert.BASE, *(f"score:{n}" for n in dict.fromkeys([*tune_scores, *tuner.features]))]


def tune_weights(tuner: Tuner, *, hold: Mapping[str, float] | None = None, tune_scores: Sequence[str] = (),
                 restarts: int = DEFAULT_RESTARTS, folds: int = DEFAULT_FOLDS, seed: int = 0, baseline: Mapping[str, Sequence[str]] | None = None,
                 apply_best: bool = False) -> Tuned:
    """The weights to apply, tuned on ``tuner``'s set.

    Without ``hold`` this is ``afp tune``'s joint search (:func:`afp.tune.joint_tune`, with
    ``tune_scores``, ``restarts``, ``folds`` and a recogniser's 1-best ``baseline`` by utterance
    key), and the point is the one ``afp tune --save`` writes: the tuned weights, or the first
    pass's own where cross-validation says they would not help, or None where they are worse
    than ``baseline`` on this set (with ``apply_best``: the tuned point anyway, and the reason says so).

    ``hold``: weights held at these values (``{"lm_weight": 0.0}``: re-weighting the recogniser's
    own scores alone; ``{"old_lm_weight": 0.0}``: the new LM replacing the old); the same search
    from the first pass's own point over the other coordinates, without cross-validation or a
    baseline, and its end point is applied.
    """
    if hold:
        start, _ = first_pass_point(tuner, seed=seed)
        free = [c for c in _coordinates(tuner, tune_scores) if c not in hold]
        unknown = sorted(set(hold) - set(_coordinates(tuner, tune_scores)) - set(start))
        if unknown:
            raise ValueError(f"hold: no weight named {', '.join(unknown)}; the weights are "
                             f"{', '.join(_coordinates(tuner, tune_scores))}")
        found = mert.search(mert_problem(tuner, tuner.utterances), {**start, **hold}, free, restarts=restarts,
                            seed=seed)
        wer = 100.0 * found.errors / max(1, tuner.first_pass().ref_words)
        report = {"start": start, "point": found.point, "wer": wer, "line_searches": found.line_searches,
                  "at_edge": found.at_edge}
        return Tuned(found.point, f"the search's end point, {', '.join(sorted(hold))} held", wer, report)
    report = joint_tune(tuner, tune_scores, restarts=restarts, folds=folds, seed=seed, baseline=baseline)
    chosen = report["chosen"]
    point, reason = chosen["point"], chosen["reason"]
    if point is None and apply_best:
        point = {k: v for k, v in report["best"].items() if k not in ("wer", "errors", "against_first_pass")}
        reason = f"the tuned point, applied although afp tune would save nothing ({reason})"
    return Tuned(point, reason, report["best"]["wer"], report)


def apply_weights(tuner: Tuner, point: Mapping[str, float], *, inputs: Sequence[Any] | None = None,
                  score: ScoreInput | None = None, baseline: Mapping[str, Sequence[str]] | None = None,
                  others: Mapping[str, Sequence[int]] | None = None, seed: int = 0) -> Decoded:
    """``tuner``'s set decoded at ``point`` (Viterbi: the best path ``afp rescore`` returns with
    these weights), compared with its first pass, with ``baseline`` (a recogniser's 1-best by
    utterance key) and with each of ``others`` (another system's word errors on the same
    utterances, in the tuner's order), by name.

    ``inputs``: the set's inputs (lattices, unless ``score`` takes something else), each prepared
    and scored again under the point's options (module docstring) by ``score(input, options)``,
    default :func:`~lattices.rescore.score_for_options` with the tuner's scorer, old LM and features.
    """
    ignore_case = bool(tuner.ignore_case)
    keys = [u.key for u in tuner.utterances]
    seconds = None
    if inputs is None:
        chosen = {key: words for key, words, _ in tuner.decisions(dict(point))}
    else:
        chosen, seconds = _rescored(tuner, point, inputs, score)
    missing = [key for key in keys if key not in chosen]
    if missing:
        raise ValueError(f"no input for {len(missing)} utterance(s) of the tuner, e.g. {missing[0]!r}")
    refs = [u.ref for u in tuner.utterances]
    errors = [word_errors(ref, chosen[key], ignore_case).errors for ref, key in zip(refs, keys)]
    words = [len(ref) for ref in refs]
    systems: dict[str, Sequence[int]] = {FIRST_PASS: [u.first_pass.errors for u in tuner.utterances]}
    if baseline is not None:
        missing = [key for key in keys if key not in baseline]
        if missing:
            raise ValueError(f"the baseline has no hypothesis for {len(missing)} utterance(s), e.g. {missing[0]!r}")
        systems[BASELINE] = [word_errors(ref, list(baseline[key]), ignore_case).errors for ref, key in zip(refs, keys)]
    systems.update(others or {})
    return Decoded(keys=tuple(keys), words=tuple(tuple(chosen[key]) for key in keys), errors=tuple(errors),
                   ref_words=tuple(words), seconds=None if seconds is None else tuple(seconds[key] for key in keys),
                   against={name: compare(other, errors, words, seed=seed) for name, other in systems.items()})


def _rescored(tuner: Tuner, point: Mapping[str, float], inputs: Sequence[Any],
              score: ScoreInput | None) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Each input's key, its best words under the point's options and the seconds they took."""
    from lattices.rescore import rescore_scored, score_for_options

    options = tuner.options.at_point(point)
    prepare = score or (lambda lattice, options: score_for_options(lattice, tuner.scorer, options, tuner.device,
                                                                   tuner.old_lm, tuner.features))
    words, seconds = {}, {}
    for item in inputs:
        tick = time.perf_counter()
        scored = prepare(item, options)
        (result, *_) = rescore_scored(scored, options, tick)
        key = scored.lattice.key
        words[key], seconds[key] = result.best.words, time.perf_counter() - tick
    return words, seconds


def transfer(tuners: Mapping[str, Tuner], *, hold: Mapping[str, float] | None = None, tune_scores: Sequence[str] = (),
             restarts: int = DEFAULT_RESTARTS, folds: int = DEFAULT_FOLDS, seed: int = 0,
             baselines: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
             others: Mapping[str, Mapping[str, Sequence[int]]] | None = None, apply_best: bool = False,
             inputs: Mapping[str, Sequence[Any]] | None = None, score: ScoreInput | None = None) -> list[Applied]:
    """Tune on each set of ``tuners`` (name -> tuner), apply to every other: one :class:`Applied`
    per ordered pair of different sets, tuning sets in ``tuners``' order.

    ``hold``, ``tune_scores``, ``restarts``, ``folds``, ``apply_best``: as :func:`tune_weights`.
    ``baselines``: per set, a recogniser's own 1-best by utterance key (``afp tune --baseline
    hyp.trn``): the tuning set's guards the point, the applied set's is compared with.
    ``others``: per system name, per set, that system's word errors on the set (e.g. re-weighting
    alone, the :attr:`Decoded.errors` of an earlier call), compared with on the applied set.
    ``inputs``: per set, its inputs to decide from again under the applied weights, by ``score``
    (:func:`apply_weights`).
    """
    baselines, others, inputs = baselines or {}, others or {}, inputs or {}
    tuned = {name: tune_weights(tuner, hold=hold, tune_scores=tune_scores, restarts=restarts, folds=folds, seed=seed,
                                baseline=baselines.get(name), apply_best=apply_best) for name, tuner in tuners.items()}
    out = []
    for source, found in tuned.items():
        for target, tuner in tuners.items():
            if target == source:
                continue
            decoded = None if found.point is None else apply_weights(
                tuner, found.point, inputs=inputs.get(target), score=score, baseline=baselines.get(target), seed=seed,
                others={name: errors[target] for name, errors in others.items() if target in errors})
            out.append(Applied(source, target, found, decoded))
    return out
