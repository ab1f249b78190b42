"""Making a lattice small enough to expand, each stage exact where it says so, and reported.

A real decoder's lattice (PocketSphinx: ~900 nodes, ~13,000 links) is full of paths that differ
only in timing, fillers and pronunciation: expanded as it is to order ``rho + 1`` it passes any
budget (lattices/expand.py). Before expansion the engine (:func:`lattices.rescore.rescore`) runs,
when the expansion could pass its budget (:func:`lattices.expand.expansion_bound`, an upper
bound computed in milliseconds):

1. ``determinize`` (:func:`lattices.determinize.determinize`): epsilons, fillers and the other
   skipped symbols removed, one arc per word out of every state, each word sequence once with the
   score components of its best path under the first pass's weights. Exact for the best path and
   the n-best of any weight setting that weighs the first-pass scores as those weights do (the
   new LM, its unknown-word penalty and the word penalty are functions of the words: any values
   of them are exact), and for *every* weight setting when the lattice has one score component.
   Arc posteriors (``--posteriors``) and MBR's evidence need the log semiring: a request for
   posteriors is never determinized. With ``determinize_beam`` it is Kaldi's pruned
   determinization (``lattice-determinize-pruned``): only the word sequences within that beam of
   the best, under the first pass, are kept; with ``max_determinized_states`` it stops there and
   keeps the sequences within the largest beam that fits (reported). A beam is reported as
   pruning only when it dropped something.
2. ``minimize`` (:func:`lattices.minimize.minimize`): exact (weights pushed, equivalent states
   merged).
3. ``fit``: when the expansion bound of the minimal lattice still passes the budget, the largest
   beam (on the first pass's scores, forward-backward as :func:`prune`) whose pruned lattice's
   bound fits. Only the distinct values of ``best - (best path through an arc)`` keep different
   arc sets, nested, and the bound grows with the set: a bisection over those values finds the
   largest fitting one exactly, in about ``log2(arcs)`` bounds. Reported as pruning when it cut
   an arc (when not even the best path alone fits, the best path is kept: a chain longer than
   the budget is kept whole, and nothing is reported as pruned).

Which lattices are reduced, and to which budget (the target of a dense lattice, else the memory
limit), is :func:`lattices.rescore.reduction`'s decision (:class:`lattices.rescore.RescoreOptions`).

Scores are the first pass's under the request's weights: named scores at their weights (the
acoustic scale), the old LM at its weight, the word penalty. Every stage reports its states,
arcs and seconds (:class:`~lattices.oracle.StageReport`); rescoring is exact on the lattice the
result says it used (``RescoreResult.searched``, ``stats["stages"]``, ``pruned``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lattices.determinize import DeterminizationTooLarge, determinize
from lattices.expand import DEFAULT_SKIP, expansion_bound, lattice_word_map
from lattices.lattice import Lattice
from lattices.minimize import minimize
from lattices.oracle import StageReport, stage_report
from lattices.search import Dag, beam_tolerance

__all__ = ["Reduced", "first_pass_scores", "prune", "reduce_lattice", "states_cap"]

#: with a budget, the determinization stops at ``budget // BUDGET_PER_STATE`` states (at least
#: ``MIN_STATES_CAP``, and never fewer than the states of the input's longest path plus
#: ``MIN_STATES_CAP``, so that the best path always fits: :func:`states_cap`): a determinized state
#: of a PocketSphinx lattice expands to 10 arcs and more at order 5, so more states would only be
#: pruned away by the fit stage, and the determinization's time grows with its states. 40
#: dev_other lattices, budget 20k, rho 4: a cap of 2,000 states took 14.2 s to determinize and kept
#: an oracle of 8.91%; 1,000: 10.3 s, 9.05%; 500: 6.7 s, 9.64%
BUDGET_PER_STATE, MIN_STATES_CAP = 20, 500


@dataclass(frozen=True)
class Reduced:
    """The outcome of :func:`reduce_lattice`: the ``lattice`` to expand, the stage reports in
    order, and the pruning done (None when the result is exact: no beam cut anything)."""

    lattice: Lattice
    stages: list[StageReport]
    pruned: dict[str, Any] | None

    def stats(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.stages]


def first_pass_scores(lattice: Lattice, acoustic_scale: float, word_penalty: float,
                      score_weights: Mapping[str, float] = {}, skip: Iterable[str] = DEFAULT_SKIP
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``(A,)`` and ``(F,)``: the first pass's score of every arc and final state: every
    named score at its weight (``score_weights``; else ``acoustic_scale`` for ``acoustic``, 1 for
    the others, the old LM included), and ``word_penalty`` per LM word."""
    is_word = lattice_word_map(lattice, skip) >= 0
    scores = word_penalty * is_word.to(lattice.device)[lattice.words].to(torch.float64)
    final_scores = torch.zeros(lattice.finals.shape[0], dtype=torch.float64, device=lattice.device)
    for name, (arc, final) in lattice.named_scores().items():
        weight = score_weights.get(name, acoustic_scale if name == "acoustic" else 1.0)
        scores, final_scores = scores + weight * arc, final_scores + weight * final
    return scores, final_scores


def prune(lattice: Lattice, beam: float, acoustic_scale: float, word_penalty: float,
          skip: Iterable[str] = DEFAULT_SKIP, deadline: float | None = None,
          score_weights: tuple[tuple[str, float], ...] = ()) -> tuple[Lattice, dict[str, Any]]:
    """Keep the arcs on some path within ``beam`` of the best path under the lattice's own scores
    (:func:`first_pass_scores`), by forward-backward Viterbi. Returns the pruned lattice and a
    report of what was removed."""
    scores, final_scores = first_pass_scores(lattice, acoustic_scale, word_penalty, dict(score_weights), skip)
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, scores, lattice.finals, final_scores,
              lattice.levels, deadline)
    through = dag.arc_best_scores()
    best = float(through.max()) if through.numel() else 0.0
    pruned = lattice.subset(through >= best - beam - beam_tolerance(best))
    report = {"beam": beam, "arcs_before": lattice.num_arcs, "arcs_after": pruned.num_arcs,
              "states_before": lattice.num_states, "states_after": pruned.num_states}
    return pruned, report


def reduce_lattice(lattice: Lattice, rho: int, budget: int | None, ordering: Mapping[str, float], *,
                   acoustic_scale: float, word_penalty: float, score_weights: Mapping[str, float] = {},
                   determinize_beam: float | None = None, max_states: int | None = None, fit: bool = True,
                   skip: Iterable[str] = DEFAULT_SKIP, deadline: float | None = None,
                   first_pass: Mapping[str, float] | None = None) -> Reduced:
    """The stages of the module docstring on ``lattice``, for an expansion to ``rho`` within
    ``budget`` arcs.

    Args:
      ordering: the first pass's weight of each named score (the determinization's order).
      acoustic_scale, word_penalty, score_weights: the first pass's scores for pruning
        (:func:`first_pass_scores`; the old LM in full).
      determinize_beam, max_states: the determinization's beam and state limit (None: none; with
        a budget and ``fit``, at most :func:`states_cap`; never below the states of the input's
        longest path, so that the best path fits).
      fit: run the fit stage when the bound passes ``budget`` (else the expansion may raise).
      first_pass: the first pass's own weight of each named score, when the request weighs them
        otherwise (it replaces the old LM, or tuned its weight). A pruned determinization
        (``determinize_beam``) then runs on them, not on ``ordering``: its beam ranks paths as the
        first pass did, and each kept word sequence carries the components of its best path under
        the first pass, so the reduced lattice is the same whatever the request's weights (``afp
        tune`` searches exactly the lattice that rescoring with the weights it finds will search),
        and this is reported (``pruned["determinized_on"]``: ``"first pass"``). 100 PocketSphinx
        lattices of each dev set with tuned weights (old LM ~0), models/librispeech: WER 22.40 /
        17.64% (17.23% once the pruning stages also took the first pass's word penalty), in 0.58 /
        0.73 of the time, against 22.75 / 17.99% when each sequence carried its best path under the
        request's weights. Without a beam the determinization is exact and runs
        on ``ordering``.
    """
    stages = [stage_report("input", lattice, 0.0, paths=False)]
    pruned: dict[str, Any] = {}
    if budget is not None and fit:  # no use determinizing far past what the budget can expand
        cap = states_cap(lattice, budget)
        max_states = cap if max_states is None else min(max_states, cap)
    if max_states is not None:  # ... but the best path always fits
        max_states = max(max_states, _longest_path_states(lattice))
    tick = time.perf_counter()
    report: dict[str, bool] = {}
    if determinize_beam is not None and first_pass is not None and dict(first_pass) != dict(ordering):
        ordering = first_pass
        pruned["determinized_on"] = "first pass"
    try:
        det = determinize(lattice, ordering, beam=determinize_beam, max_states=max_states, skip=skip, report=report)
        if determinize_beam is not None and report["cut"]:  # a beam that cut nothing is no pruning
            pruned["determinize_beam"] = determinize_beam
    except DeterminizationTooLarge as err:
        if err.partial is None:
            raise
        det = err.partial
        pruned.update(determinize_beam=err.effective_beam, max_determinized_states=max_states)
    stages.append(stage_report("determinize", det, time.perf_counter() - tick, paths=False))
    tick = time.perf_counter()
    small = minimize(det)
    stages.append(stage_report("minimize", small, time.perf_counter() - tick, paths=False))
    bound = expansion_bound(small, rho, skip)
    if budget is not None and fit and bound > budget:
        tick = time.perf_counter()
        fitted, beam, bound = _fit(small, rho, budget, acoustic_scale, word_penalty, score_weights, skip, deadline)
        stages.append(stage_report("fit", fitted, time.perf_counter() - tick, paths=False))
        if fitted.num_arcs < small.num_arcs:  # it cut something (else: the best path alone passes the budget)
            pruned.update(beam=beam, budget=budget)
        small = fitted
    if pruned:
        pruned.update(arcs_before=lattice.num_arcs, arcs_after=small.num_arcs, states_before=lattice.num_states,
                      states_after=small.num_states, expansion_bound=bound)
    return Reduced(small, stages, pruned or None)


def states_cap(lattice: Lattice, budget: int) -> int:
    """The determinization's state limit for ``budget`` expanded arcs: ``budget //
    BUDGET_PER_STATE``, at least ``MIN_STATES_CAP``, and at least ``MIN_STATES_CAP`` more than the
    states of ``lattice``'s longest path (a path of the determinized lattice has no more states,
    so its best path always fits; a 30,000-word chain once stopped before its best path was done)."""
    return max(MIN_STATES_CAP, budget // BUDGET_PER_STATE, _longest_path_states(lattice) + MIN_STATES_CAP)


def _longest_path_states(lattice: Lattice) -> int:
    return int(lattice.levels.max()) + 1 if lattice.num_states else 1


def _fit(lattice: Lattice, rho: int, budget: int, acoustic_scale: float, word_penalty: float,
         score_weights: Mapping[str, float], skip: Iterable[str], deadline: float | None
         ) -> tuple[Lattice, float, float]:
    """The lattice pruned at the largest beam whose expansion bound fits ``budget`` (the best path
    alone when none does), that beam and its bound.

    The arcs kept at beam ``b`` are those whose best path lies within ``b`` of the best: only the
    distinct gaps ``best - through[a]`` make different sets, nested in their order, and a
    subset's bound is no larger (it has fewer paths). So a bisection over the sorted distinct gaps
    finds the largest that fits exactly, with about ``log2(arcs)`` bounds, each on the kept arcs
    alone (:func:`expansion_bound`'s ``keep``: every kept arc lies on a kept path, so the set
    needs no trimming); the lattice is cut once, at the end."""
    scores, final_scores = first_pass_scores(lattice, acoustic_scale, word_penalty, score_weights, skip)
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, scores, lattice.finals, final_scores,
              lattice.levels, deadline)
    through = dag.arc_best_scores().cpu().numpy().astype(np.float64)
    best = float(through.max())
    tolerance = beam_tolerance(best)
    distinct = np.unique(best - through)  # sorted; the first is (about) 0: the best path's arcs

    def kept_at(gap: float) -> np.ndarray:
        return through >= best - gap - tolerance

    # distinct[low] fits (or is the best path), distinct[high + 1] does not; the last keeps every
    # arc, whose bound the caller found over the budget
    low, high = 0, max(len(distinct) - 2, 0)
    low_bound = expansion_bound(lattice, rho, skip, kept_at(distinct[0]))
    while low < high:
        middle = (low + high + 1) // 2
        bound = expansion_bound(lattice, rho, skip, kept_at(distinct[middle]))
        if bound <= budget:
            low, low_bound = middle, bound
        else:
            high = middle - 1
    beam = max(float(distinct[low]), 0.0)
    keep = torch.from_numpy(kept_at(distinct[low])).to(lattice.device)
    return lattice.subset(keep), beam, low_bound
