"""The rescoring engine: expand, score every (context, word) pair once, combine, search.

Scores are combined Kaldi-style, in language-model units (natural log)::

    total(path) = acoustic_scale * acoustic + lm_weight * new_lm + old_lm_weight * old_lm
                  + word_penalty * words

``acoustic`` and ``old_lm`` are the lattice's own arc scores (``old_lm`` is the graph score: for
Kaldi lattices that is the whole graph cost, LM plus pronunciation and transition
probabilities); ``new_lm`` is the AFP model's log-probability of the path's words, ``</s>``
included, and ``words`` counts the words the LM scores. ``old_lm_weight`` 0 replaces the old LM,
1 keeps it in full, values in between interpolate log-linearly. Defaults come from the lattice
header when it has ``lmscale`` (HTK): ``acoustic_scale = 1/lmscale`` and
``word_penalty = wdpenalty/lmscale``; otherwise ``acoustic_scale = 0.1`` (Kaldi's usual
1/LMWT) and ``word_penalty = 0``. Several LM weights share one expansion and one scoring pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from lattices.expand import DEFAULT_SKIP, PAD, Expansion, ExpansionTooLarge, expand, word_map
from lattices.lattice import Lattice, take_extra
from lattices.ops import unique_rows
from lattices.scorer import ContextScorer
from lattices.search import Dag, k_best_distinct, segment_logsumexp

DEFAULT_ACOUSTIC_SCALE = 0.1
AUTO_PRUNE_BEAMS = (10.0, 5.0, 2.5, 1.25, 0.5, 0.0)


@dataclass(frozen=True)
class RescoreOptions:
    """How to combine scores and what to return. None means "from the lattice header".

    ``auto_prune``: when the expansion exceeds ``max_expanded_arcs``, prune the input with beam
    :data:`AUTO_PRUNE_BEAMS` (10, then halving) until it fits, instead of failing.
    ``deadline``: ``time.monotonic()`` seconds after which the work stops with
    :class:`~lattices.ops.DeadlineExceeded` (checked level by level).
    """

    lm_weights: tuple[float, ...] = (1.0,)
    acoustic_scale: float | None = None
    old_lm_weight: float = 0.0
    word_penalty: float | None = None
    nbest: int = 1
    max_expanded_arcs: int | None = 5_000_000
    prune_beam: float | None = None
    posteriors: bool = False
    return_lattice: bool = False
    skip_words: frozenset[str] = DEFAULT_SKIP
    max_kbest_paths: int = 4096
    auto_prune: bool = False
    deadline: float | None = None

    def __post_init__(self) -> None:
        if not self.lm_weights:
            raise ValueError("lm_weights: give at least one weight")
        if self.nbest < 1:
            raise ValueError(f"nbest must be at least 1, got {self.nbest}")
        if self.prune_beam is not None and not self.prune_beam >= 0:
            raise ValueError(f"prune_beam must be >= 0, got {self.prune_beam}")
        if self.max_expanded_arcs is not None and self.max_expanded_arcs < 1:
            raise ValueError(f"max_expanded_arcs must be positive, got {self.max_expanded_arcs}")

    def scales_for(self, lattice: Lattice) -> tuple[float, float]:
        """``(acoustic_scale, word_penalty)`` for ``lattice``, header defaults filled in."""
        lmscale = lattice.meta.get("lmscale")
        acoustic = self.acoustic_scale
        if acoustic is None:
            acoustic = 1.0 / float(lmscale) if lmscale else DEFAULT_ACOUSTIC_SCALE
        penalty = self.word_penalty
        if penalty is None:
            penalty = float(lattice.meta.get("wdpenalty", 0.0)) / float(lmscale) if lmscale else 0.0
        return acoustic, penalty


@dataclass(frozen=True)
class Hypothesis:
    """One path: its words (LM-scored words only) and score parts, original arc ids in order."""

    words: list[str]
    score: float
    acoustic: float
    lm_logprob: float
    old_lm: float
    arcs: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"words": self.words, "score": self.score, "acoustic": self.acoustic,
                "lm_logprob": self.lm_logprob, "old_lm": self.old_lm}


@dataclass
class RescoreResult:
    """The outcome for one lattice and one LM weight."""

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

    def to_json(self) -> dict[str, Any]:
        """The JSON line of ``afp rescore --json`` (without the rescored lattice)."""
        out = {"key": self.key, "best": self.best.to_json(), "nbest": [h.to_json() for h in self.nbest],
               "lm_weight": self.lm_weight, "acoustic_scale": self.acoustic_scale,
               "old_lm_weight": self.old_lm_weight, "word_penalty": self.word_penalty,
               **self.stats, "pruned": self.pruned, "seconds": self.seconds["total"], "timing": self.seconds}
        if self.arc_posteriors is not None:
            out["best"]["word_posteriors"] = self.arc_posteriors[self.best.arcs].tolist()
        return out


def prune(lattice: Lattice, beam: float, acoustic_scale: float, word_penalty: float,
          skip: Iterable[str] = DEFAULT_SKIP, deadline: float | None = None) -> tuple[Lattice, dict[str, Any]]:
    """Keep the arcs on some path within ``beam`` of the best path under the lattice's own scores
    (``acoustic_scale * acoustic + graph + word_penalty * words``, forward-backward Viterbi).
    Returns the pruned lattice and a report of what was removed."""
    is_word = (word_map(lattice.symbols, torch.zeros(len(lattice.symbols), dtype=torch.int64), skip) >= 0)
    scores = acoustic_scale * lattice.acoustic + lattice.graph + word_penalty * is_word.to(lattice.device)[lattice.words]
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, scores, lattice.finals,
              acoustic_scale * lattice.final_acoustic + lattice.final_graph, lattice.levels, deadline)
    through = dag.arc_best_scores()
    best = float(through.max()) if through.numel() else 0.0
    pruned = lattice.subset(through >= best - beam)
    report = {"beam": beam, "arcs_before": lattice.num_arcs, "arcs_after": pruned.num_arcs,
              "states_before": lattice.num_states, "states_after": pruned.num_states}
    return pruned, report


def lm_scores(expansion: Expansion, scorer: ContextScorer, eos_id: int) -> tuple[Tensor, Tensor, dict[str, int]]:
    """New-LM log-probabilities of every expanded arc (0 for skipped symbols) and of ``</s>`` at
    every expanded final state; each distinct (history, word) pair is scored once.

    Returns float64 ``(X,)``, float64 ``(G,)`` and counts (unique contexts, scored pairs).
    """
    scored = (expansion.arc_lm_word != PAD).nonzero().squeeze(1)
    pair_state = torch.cat([expansion.src[scored], expansion.finals])
    pair_word = torch.cat([expansion.arc_lm_word[scored], torch.full_like(expansion.finals, eos_id)])
    histories, context_of_state = unique_rows(expansion.state_history)
    pair_context = context_of_state[pair_state]
    pairs, pair_index = unique_rows(torch.stack([pair_context, pair_word], dim=1))
    used_contexts, context_index = torch.unique(pairs[:, 0], return_inverse=True)
    rows = histories[used_contexts]
    lengths = (rows != PAD).sum(dim=1)
    values = scorer.score(rows.clamp(min=0), lengths, pairs[:, 1], context_index)
    values = values.to(device=expansion.src.device, dtype=torch.float64)[pair_index]
    arc_lm = torch.zeros(expansion.num_arcs, dtype=torch.float64, device=expansion.src.device)
    arc_lm[scored] = values[: scored.shape[0]]
    counts = {"unique_contexts": int(used_contexts.shape[0]), "scored_pairs": int(pairs.shape[0])}
    return arc_lm, values[scored.shape[0]:], counts


def rescore(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions = RescoreOptions(),
            device: torch.device | str | None = None) -> list[RescoreResult]:
    """Rescore one lattice exactly; one result per LM weight in ``options.lm_weights``.

    Raises :class:`~lattices.expand.ExpansionTooLarge` over the budget unless ``auto_prune``."""
    try:
        return _rescore(lattice, scorer, options, device)
    except ExpansionTooLarge:
        if not options.auto_prune or options.prune_beam is not None:
            raise
    for beam in AUTO_PRUNE_BEAMS:
        try:
            return _rescore(lattice, scorer, dataclasses.replace(options, prune_beam=beam, auto_prune=False), device)
        except ExpansionTooLarge:
            if beam == AUTO_PRUNE_BEAMS[-1]:
                raise
    raise AssertionError("unreachable")


def _rescore(lattice: Lattice, scorer: ContextScorer, options: RescoreOptions,
             device: torch.device | str | None) -> list[RescoreResult]:
    if scorer.context_size is None:
        raise ValueError("the model has an unbounded context (an exact RNN): exact lattice expansion needs an "
                         "AFP-rho or n-gram model")
    started = time.perf_counter()
    timing: dict[str, float] = {}
    lattice = lattice.to(device) if device is not None else lattice
    acoustic_scale, word_penalty = options.scales_for(lattice)
    pruned_report = None
    if options.prune_beam is not None:  # beam 0 keeps the best path(s) only
        lattice, pruned_report = prune(lattice, options.prune_beam, acoustic_scale, word_penalty, options.skip_words,
                                       options.deadline)
    known = scorer.known(lattice.symbols)
    mapping = word_map(lattice.symbols, scorer.word_ids(lattice.symbols), options.skip_words)
    oov = sorted({s for i, s in enumerate(lattice.symbols) if int(mapping[i]) != PAD and not bool(known[i])}
                 & {lattice.symbols[i] for i in torch.unique(lattice.words).tolist()})

    tick = _clock(lattice.device)
    expansion = expand(lattice, mapping, scorer.context_size, scorer.bos_id, options.max_expanded_arcs,
                       options.deadline)
    timing["expand"] = _since(tick, lattice.device)
    tick = _clock(lattice.device)
    arc_lm, final_lm, counts = lm_scores(expansion, scorer, scorer.eos_id)
    timing["score"] = _since(tick, lattice.device)

    orig = expansion.arc_orig
    acoustic, old_lm = lattice.acoustic[orig], lattice.graph[orig]
    is_word = (expansion.arc_lm_word != PAD).to(torch.float64)
    final_acoustic = lattice.final_acoustic[expansion.final_orig]
    final_old = lattice.final_graph[expansion.final_orig]
    level = lattice.levels[expansion.state_orig]
    stats = {"expanded_states": expansion.num_states, "expanded_arcs": expansion.num_arcs,
             "lattice_states": lattice.num_states, "lattice_arcs": lattice.num_arcs, "rho": expansion.rho,
             "oov": len(oov), "oov_words": oov[:50], **counts}
    results = []
    for weight in options.lm_weights:
        tick = _clock(lattice.device)
        arc_total = (acoustic_scale * acoustic + weight * arc_lm + options.old_lm_weight * old_lm
                     + word_penalty * is_word)
        final_total = acoustic_scale * final_acoustic + weight * final_lm + options.old_lm_weight * final_old
        dag = Dag(expansion.num_states, 0, expansion.src, expansion.dst, arc_total, expansion.finals,
                  final_total, level, options.deadline)
        parts = (acoustic, arc_lm, old_lm, final_acoustic, final_lm, final_old)
        nbest = _distinct_best(dag, expansion, parts, options.nbest, options.max_kbest_paths)
        posteriors = None
        if options.posteriors:
            posteriors = segment_logsumexp(dag.arc_posteriors().log(), orig, lattice.num_arcs).exp()
        rescored = _rescored_lattice(expansion, weight * arc_lm + options.old_lm_weight * old_lm,
                                     weight * final_lm + options.old_lm_weight * final_old) \
            if options.return_lattice else None
        timing_w = {**timing, "search": _since(tick, lattice.device)}
        timing_w["total"] = time.perf_counter() - started
        results.append(RescoreResult(
            key=lattice.key, lm_weight=weight, acoustic_scale=acoustic_scale, old_lm_weight=options.old_lm_weight,
            word_penalty=word_penalty, best=nbest[0], nbest=nbest, stats=stats, pruned=pruned_report,
            arc_posteriors=posteriors.cpu() if posteriors is not None else None, lattice=rescored, seconds=timing_w))
    return results


def _distinct_best(dag: Dag, expansion: Expansion, parts: tuple[Tensor, ...], k: int,
                   max_paths: int) -> list[Hypothesis]:
    """The ``k`` best distinct word sequences as hypotheses with their score parts."""
    lattice = expansion.lattice
    acoustic, arc_lm, old_lm, final_acoustic, final_lm, final_old = (p.cpu() for p in parts)
    final_index = {int(s): i for i, s in enumerate(expansion.finals.tolist())}
    dst_cpu, orig_cpu = expansion.dst.cpu(), expansion.arc_orig.cpu()
    labels = torch.where(expansion.arc_lm_word != PAD, lattice.words[expansion.arc_orig], -1)
    out = []
    for score, arcs in k_best_distinct(dag, labels, k, max_paths):
        end = final_index[int(dst_cpu[arcs[-1]])] if arcs.numel() else final_index[0]
        out.append(Hypothesis(
            words=[lattice.symbols[i] for i in labels.cpu()[arcs].tolist() if i >= 0], score=score,
            acoustic=float(acoustic[arcs].sum() + final_acoustic[end]),
            lm_logprob=float(arc_lm[arcs].sum() + final_lm[end]),
            old_lm=float(old_lm[arcs].sum() + final_old[end]),
            arcs=orig_cpu[arcs].tolist()))
    return out


def _rescored_lattice(expansion: Expansion, graph: Tensor, final_graph: Tensor) -> Lattice:
    """The expanded lattice as a :class:`Lattice` whose graph scores are the combined LM scores."""
    lattice, orig = expansion.lattice, expansion.arc_orig
    return Lattice(
        key=lattice.key, num_states=expansion.num_states, start=0, src=expansion.src, dst=expansion.dst,
        words=lattice.words[orig], acoustic=lattice.acoustic[orig], graph=graph, finals=expansion.finals,
        final_acoustic=lattice.final_acoustic[expansion.final_orig], final_graph=final_graph,
        symbols=lattice.symbols, meta=dict(lattice.meta),
        arc_extra={k: take_extra(v, orig) for k, v in lattice.arc_extra.items()},
        state_extra={k: take_extra(v, expansion.state_orig) for k, v in lattice.state_extra.items()},
        final_extra={k: take_extra(v, expansion.final_orig) for k, v in lattice.final_extra.items()})


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _since(tick: float, device: torch.device) -> float:
    return _clock(device) - tick
