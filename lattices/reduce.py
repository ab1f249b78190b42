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
   keeps the sequences within the largest beam that fits (reported).
2. ``minimize`` (:func:`lattices.minimize.minimize`): exact (weights pushed, equivalent states
   merged).
3. ``fit``: when the expansion bound of the minimal lattice still passes the budget, the largest
   beam (on the first pass's scores, forward-backward as :func:`prune`) whose pruned lattice's
   bound fits, by bisection; reported as pruning.

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

import torch

from lattices.determinize import DeterminizationTooLarge, determinize
from lattices.expand import DEFAULT_SKIP, expansion_bound, lattice_word_map
from lattices.lattice import Lattice
from lattices.minimize import minimize
from lattices.oracle import StageReport, stage_report
from lattices.search import Dag

__all__ = ["Reduced", "first_pass_scores", "prune", "reduce_lattice"]

#: with a budget, the determinization stops at ``budget // BUDGET_PER_STATE`` states (at least
#: ``MIN_STATES_CAP``): a determinized state of a PocketSphinx lattice expands to 10 arcs and more
#: at order 5, so more states would only be pruned away by the fit stage, and the
#: determinization's time grows with its states. 40 dev_other lattices, budget 20k, rho 4: a cap of
#: 2,000 states took 14.2 s to determinize and kept an oracle of 8.91%; 1,000: 10.3 s, 9.05%;
#: 500: 6.7 s, 9.64%
BUDGET_PER_STATE, MIN_STATES_CAP = 20, 500
#: bisection steps of the fit stage: the beam is found to within 2**-20 of the determinization beam
FIT_STEPS = 20


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
    pruned = lattice.subset(through >= best - beam - _tolerance(best))
    report = {"beam": beam, "arcs_before": lattice.num_arcs, "arcs_after": pruned.num_arcs,
              "states_before": lattice.num_states, "states_after": pruned.num_states}
    return pruned, report


def reduce_lattice(lattice: Lattice, rho: int, budget: int | None, ordering: Mapping[str, float], *,
                   acoustic_scale: float, word_penalty: float, score_weights: Mapping[str, float] = {},
                   determinize_beam: float | None = None, max_states: int | None = None, fit: bool = True,
                   skip: Iterable[str] = DEFAULT_SKIP, deadline: float | None = None) -> Reduced:
    """The stages of the module docstring on ``lattice``, for an expansion to ``rho`` within
    ``budget`` arcs.

    Args:
      ordering: the first pass's weight of each named score (the determinization's order).
      acoustic_scale, word_penalty, score_weights: the first pass's scores for pruning
        (:func:`first_pass_scores`; the old LM in full).
      determinize_beam, max_states: the determinization's beam and state limit (None: none; with
        a budget and ``fit``, at most ``budget // BUDGET_PER_STATE``).
      fit: run the fit stage when the bound passes ``budget`` (else the expansion may raise).
    """
    stages = [stage_report("input", lattice, 0.0, paths=False)]
    pruned: dict[str, Any] = {}
    if budget is not None and fit:  # no use determinizing far past what the budget can expand
        cap = max(MIN_STATES_CAP, budget // BUDGET_PER_STATE)
        max_states = cap if max_states is None else min(max_states, cap)
    tick = time.perf_counter()
    try:
        det = determinize(lattice, ordering, beam=determinize_beam, max_states=max_states, skip=skip)
        if determinize_beam is not None:
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
    bound = expansion_bound(small, rho)
    if budget is not None and fit and bound > budget:
        tick = time.perf_counter()
        small, beam, bound = _fit(small, rho, budget, acoustic_scale, word_penalty, score_weights, skip, deadline)
        stages.append(stage_report("fit", small, time.perf_counter() - tick, paths=False))
        pruned.update(beam=beam, budget=budget)
    if pruned:
        pruned.update(arcs_before=lattice.num_arcs, arcs_after=small.num_arcs, states_before=lattice.num_states,
                      states_after=small.num_states, expansion_bound=bound)
    return Reduced(small, stages, pruned or None)


def _fit(lattice: Lattice, rho: int, budget: int, acoustic_scale: float, word_penalty: float,
         score_weights: Mapping[str, float], skip: Iterable[str], deadline: float | None
         ) -> tuple[Lattice, float, float]:
    """The lattice pruned at the largest beam whose expansion bound fits ``budget`` (bisection
    between 0, the best path alone, and the widest beam any path needs), that beam and its bound."""
    scores, final_scores = first_pass_scores(lattice, acoustic_scale, word_penalty, score_weights, skip)
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, scores, lattice.finals, final_scores,
              lattice.levels, deadline)
    through = dag.arc_best_scores()
    best = float(through.max())
    low, high = 0.0, best - float(through.min())
    kept = lattice.subset(through >= best - _tolerance(best))
    kept_bound = expansion_bound(kept, rho)
    for _ in range(FIT_STEPS):
        middle = 0.5 * (low + high)
        candidate = lattice.subset(through >= best - middle - _tolerance(best))
        bound = expansion_bound(candidate, rho)
        if bound <= budget:
            low, kept, kept_bound = middle, candidate, bound
        else:
            high = middle
    return kept, low, kept_bound


def _tolerance(best: float) -> float:
    """The rounding allowance of a beam cut: the arcs of the best path sum to ``best`` in another
    order through the forward and the backward pass, so they may miss it by a few ulps."""
    return 1e-9 * (1.0 + abs(best))
