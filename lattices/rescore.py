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
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lattices.expand import PAD, ExpansionTooLarge, expansion_bound
from lattices.kbest import search_distinct
from lattices.lattice import Lattice, take_extra
from lattices.ops import check_deadline
from lattices.options import (DECODERS, DEFAULT_DETERMINIZE_BEAM, DEFAULT_LM_WEIGHT, DEFAULT_MAX_DETERMINIZED_STATES,
                              DEFAULT_MAX_EXPANDED_ARCS, DEFAULT_TARGET_EXPANDED_ARCS, DENSE_FACTOR, DETERMINIZE,
                              NO_TARGET, RescoreOptionError, RescoreOptions)
from lattices.reduce import prune, reduce_lattice
from lattices.scored import (DEFAULT_ACOUSTIC_SCALE, ScoredLattice, Weights, default_acoustic_scale, old_lm_name,
                             score_lattice)
from lattices.scorer import ContextScorer, WindowScorer
from lattices.search import Dag, segment_logsumexp

#: the beams the input is pruned with, in turn, until its expansion fits its budget (``auto_prune``)
AUTO_PRUNE_BEAMS = (10.0, 5.0, 2.5, 1.25, 0.5, 0.0)

#: :mod:`lattices.options` defines the options type, its defaults and their table; they are
#: importable from here as well, where the engine that reads them is
__all__ = ["AUTO_PRUNE_BEAMS", "DECODERS", "DEFAULT_ACOUSTIC_SCALE", "DEFAULT_DETERMINIZE_BEAM", "DEFAULT_LM_WEIGHT",
           "DEFAULT_MAX_DETERMINIZED_STATES", "DEFAULT_MAX_EXPANDED_ARCS", "DEFAULT_TARGET_EXPANDED_ARCS",
           "DENSE_FACTOR", "DETERMINIZE", "Hypothesis", "NO_TARGET", "Reduction", "reduction",
           "default_acoustic_scale", "RescoreOptionError", "RescoreOptions", "RescoreResult", "prune", "rescore",
           "rescore_scored", "score_for_options"]


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
        # the reduction ranks paths as the first pass did: its own old-LM weight and word penalty (the
        # lattice's), not tuned ones, so the reduced lattice does not move with the request's weights
        first = dataclasses.replace(options, old_lm_weight=None, word_penalty=None)
        reduced = reduce_lattice(lattice, rho, plan.budget, _ordering(lattice, options, acoustic_scale, exact_old),
                                 acoustic_scale=acoustic_scale, word_penalty=first.scales_for(lattice)[1],
                                 score_weights=dict(own),
                                 determinize_beam=options.determinize_beam,
                                 max_states=options.max_determinized_states, fit=options.auto_prune,
                                 skip=options.skip_words, deadline=options.deadline,
                                 first_pass=_ordering(lattice, first, acoustic_scale, exact_old))
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

