"""The rescoring methods in use today, each driving a full-recurrence (BPTT) RNN, for comparison.

The engine needs neither (an AFP model rescores exactly); they are here so that the WER table
(``bench.pocketsphinx_wer_table``) and a user can compare exact rescoring with them by the same
tuning and search (tests: ``tests/afp/test_baselines.py``, ``tests/test_bench_wer_table.py``).

(a) :func:`nbest_scored` (icefall's way): take the n best distinct word sequences of the lattice
    under its own scores (:func:`first_pass_nbest`) and score each with the RNN's sentence forward
    pass (:func:`sentence_logprobs`).
(b) :func:`kaldi_style_scored` (Kaldi's ``lattice-lmrescore-rnnlm`` way): expand the lattice so that
    states are keyed by the last n-1 words, and carry the RNN state along it; a state reached by
    several histories keeps the RNN state of the first one to arrive, so paths that merge get the
    scores of another history: an approximation (:func:`first_history_scores`).

So that every system is tuned and applied by the same code (``afp tune``'s joint search, ``afp
rescore``'s search), each baseline is a :class:`~lattices.scored.ScoredLattice`: the engine's own
preparation, expansion and score components, with the RNN's scores in the ``new_lm`` column. The
engine scores that expansion with :class:`SilentScorer` (every pair 0, the RNN's word ids and
unknown words), and the RNN's numbers replace those zeros: so the first pass, the unknown-word
count and the word count are the engine's, and only the LM column is the baseline's.
:func:`lattices.rescore.rescore_scored` searches it as it searches any scored lattice.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lattices.case import model_spellings
from lattices.expand import DEFAULT_SKIP, PAD, Expansion, word_map
from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.kbest import search_distinct
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, score_for_options
from lattices.scored import ScoredLattice
from lattices.scorer import ForwardingScorer
from lattices.search import Dag
from lm.checkpoint import LoadedModel
from lm.corpus import EncodedCorpus
from lm.evaluate import score_corpus
from lm.model import RecurrentLM
from lm.scorer import LMScorer


def _final_of(dst_of_last: list[int], finals: list[int]) -> list[int]:
    position = {s: i for i, s in enumerate(finals)}
    return [position[s] for s in dst_of_last]


def first_pass_nbest(lattice: Lattice, n: int, acoustic_scale: float, word_penalty: float,
                     skip: frozenset[str] = DEFAULT_SKIP) -> NBestList:
    """The ``n`` best distinct word sequences of ``lattice`` under its first-pass score
    ``acoustic_scale * acoustic + graph + word_penalty * words`` (:mod:`lattices.kbest`), best
    first, each with its best path's ``acoustic`` and ``graph`` sums (final weights included) as
    named scores. ``words`` count the LM words (``skip`` symbols such as ``!SIL`` do not)."""
    if lattice.scores:
        raise ValueError(f"lattice {lattice.key!r} carries named scores {sorted(lattice.scores)}: it is an n-best list")
    is_word = word_map(lattice.symbols, torch.zeros(len(lattice.symbols), dtype=torch.int64), skip) >= 0
    word_arc = is_word[lattice.words]
    own = acoustic_scale * lattice.acoustic + lattice.graph + word_penalty * word_arc
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, own, lattice.finals,
              acoustic_scale * lattice.final_acoustic + lattice.final_graph, lattice.levels)
    labels = torch.where(word_arc, lattice.words, -1)
    found = search_distinct(dag, labels, n).found
    finals = _final_of([int(lattice.dst[arcs[-1]]) if arcs.numel() else lattice.start for _, arcs in found],
                       lattice.finals.tolist())
    hypotheses = []
    for (_, arcs), f in zip(found, finals):
        words = tuple(lattice.symbols[i] for i in labels[arcs].tolist() if i >= 0)
        hypotheses.append(NBestHypothesis(words, {
            "acoustic": float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[f]),
            "graph": float(lattice.graph[arcs].sum() + lattice.final_graph[f])}))
    return NBestList(lattice.key, tuple(hypotheses))


def nbest_lattice(nbest: NBestList, source: Lattice) -> Lattice:
    """``nbest`` as a lattice (:func:`~lattices.formats.nbest.nbest_to_lattice`) that keeps the
    header facts of the lattice it came from (``lmscale``, ``wdpenalty``...), so that its default
    weights, and with them its first pass, are the source lattice's."""
    lattice = nbest_to_lattice(nbest)
    return lattice.replace(meta={**source.meta, **lattice.meta})


def rnn_ids(rnn: LoadedModel, words: Sequence[str], match_case: bool = True) -> Tensor:
    """int64: the RNN's id of each word, looked up in another case where the model does not know
    it as written (as the engine does, :mod:`lattices.case`); unknown words get ``<unk>``."""
    scorer = LMScorer(rnn)
    spelled, _ = model_spellings(list(words), scorer.known, match_case)
    return scorer.word_ids(spelled).to(torch.int64) if spelled else torch.zeros(0, dtype=torch.int64)


def sentence_logprobs(rnn: LoadedModel, sentences: Sequence[Sequence[str]], match_case: bool = True) -> list[float]:
    """Each sentence's log-probability (words and ``</s>``) under the RNN's own forward pass
    (full history for an exact model), words spelled as the engine would look them up."""
    vocab = rnn.vocab
    distinct = sorted({w for s in sentences for w in s})
    table = dict(zip(distinct, rnn_ids(rnn, distinct, match_case).tolist()))
    ids = [torch.tensor([vocab.bos_id, *(table[w] for w in s), vocab.eos_id], dtype=torch.long) for s in sentences]
    corpus = EncodedCorpus(ids=ids, tokens=sum(len(s) + 1 for s in sentences),
                           oov=sum(int(table[w] == vocab.unk_id) for s in sentences for w in s))
    return [float(t.sum()) for t in score_corpus(rnn.model, corpus, batch_size=256).token_logprobs]


class SilentScorer(ForwardingScorer):
    """A :class:`~lattices.scorer.ContextScorer` that gives every (context, word) pair log-probability
    0, with the word ids and unknown words of ``base`` and a context of ``context_size`` tokens:
    the engine's expansion and components for a model it cannot drive itself (a full-history RNN),
    whose own scores are put in afterwards."""

    def __init__(self, base: Any, context_size: int) -> None:
        super().__init__(base)
        self.context_size = context_size

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        return torch.zeros(targets.shape[0], dtype=torch.float32, device=targets.device)


def _with_new_lm(scored: ScoredLattice, arc_lm: Tensor, final_lm: Tensor, how: str, started: float) -> ScoredLattice:
    """``scored`` with its ``new_lm`` column replaced (float64 ``(X,)`` and ``(G,)``); its timing
    gets ``rnn``, the seconds since ``started`` less the engine's own."""
    column = scored.column("new_lm")
    arc_parts, final_parts = scored.arc_parts.clone(), scored.final_parts.clone()
    arc_parts[:, column] = arc_lm.to(arc_parts)
    final_parts[:, column] = final_lm.to(final_parts)
    engine = sum(scored.timing.values())
    return dataclasses.replace(scored, arc_parts=arc_parts, final_parts=final_parts,
                               stats={**scored.stats, "new_lm": how},
                               timing={**scored.timing, "rnn": time.perf_counter() - started - engine})


def nbest_scored(nbest: NBestList, source: Lattice, rnn: LoadedModel, options: RescoreOptions) -> ScoredLattice:
    """(a) as the engine sees it: the n-best lattice of ``nbest`` (:func:`nbest_lattice`) scored
    with :class:`SilentScorer`, each hypothesis's RNN sentence log-probability in its final
    state's ``new_lm``: ``afp tune`` and ``afp rescore``'s search then treat it like any n-best list."""
    tick = time.perf_counter()
    lattice = nbest_lattice(nbest, source)
    scored = score_for_options(lattice, SilentScorer(LMScorer(rnn), 1), options, rnn.device)
    lm = torch.tensor(sentence_logprobs(rnn, [h.words for h in nbest.hypotheses], options.match_case),
                      dtype=torch.float64)
    rank = scored.lattice.final_extra["hypothesis"].cpu()[scored.expansion.final_orig.cpu()]
    return _with_new_lm(scored, torch.zeros(scored.expansion.num_arcs, dtype=torch.float64), lm[rank],
                        "full-history RNN sentence scores", tick)


@torch.no_grad()
def first_history_scores(expansion: Expansion, levels: Tensor, words: Tensor, rnn: LoadedModel,
                         max_elements: int = 1 << 24) -> tuple[Tensor, Tensor]:
    """Kaldi-style RNN log-probabilities on an expansion: the RNN state of every expanded state is
    the one the *first* arc into it (lowest arc id) brings, so a state reached by several
    histories scores all of them with one (exact where every state has one history: a tree).

    Args:
      expansion: an expansion (state 0 the start, after ``<s>``).
      levels: int64 ``(S_orig,)`` topological level of each original state (:attr:`Lattice.levels`).
      words: int64 ``(X,)`` the RNN's id of each expanded arc's word, :data:`PAD` for skipped arcs.
    Returns float64 ``(X,)`` (0 for skipped arcs) and float64 ``(G,)`` (``</s>`` at each final state).
    """
    model = rnn.model
    if not isinstance(model, RecurrentLM):
        raise ValueError("first_history_scores drives a recurrent model")
    device, vocab = expansion.src.device, rnn.vocab
    num_states, src, dst = expansion.num_states, expansion.src, expansion.dst
    arc_ids = torch.arange(expansion.num_arcs, device=device)
    first_arc = torch.full((num_states,), expansion.num_arcs, device=device).scatter_reduce(
        0, dst, arc_ids, reduce="amin", include_self=True)
    cell = model.cell
    state = cell.initial_state(model.embedding.weight, (num_states,))
    bos = model.cell.project(model.embedding(torch.tensor([vocab.bos_id], device=device)))
    state[0] = cell.step(cell.initial_state(bos, (1,)), bos)[0]
    state_level = levels.to(device)[expansion.state_orig]
    order = torch.argsort(state_level, stable=True)
    _, counts = torch.unique_consecutive(state_level[order], return_counts=True)
    for states in torch.split(order, counts.tolist())[1:]:
        arcs = first_arc[states]
        prev = state[src[arcs]]
        w = words[arcs]
        stepped = cell.step(prev, cell.project(model.embedding(w.clamp(min=0))))
        state[states] = torch.where((w >= 0).unsqueeze(1), stepped, prev)

    scored = (words != PAD).nonzero().squeeze(1)
    need = torch.unique(torch.cat([src[scored], expansion.finals]))
    position = torch.full((num_states,), -1, dtype=torch.int64, device=device)
    position[need] = torch.arange(need.shape[0], device=device)
    arc_lm = torch.zeros(expansion.num_arcs, dtype=torch.float64, device=device)
    final_lm = torch.zeros(expansion.finals.shape[0], dtype=torch.float64, device=device)
    chunk = max(1, max_elements // model.config.vocab_size)
    for start in range(0, need.shape[0], chunk):
        block = need[start:start + chunk]
        log_probs = model.log_probs(cell.output(state[block]))
        in_block = (position[src[scored]] >= start) & (position[src[scored]] < start + block.shape[0])
        arcs = scored[in_block]
        arc_lm[arcs] = log_probs[position[src[arcs]] - start, words[arcs]].double()
        finals = (position[expansion.finals] >= start) & (position[expansion.finals] < start + block.shape[0])
        final_lm[finals] = log_probs[position[expansion.finals[finals]] - start, vocab.eos_id].double()
    return arc_lm, final_lm


def kaldi_style_scored(lattice: Lattice, rnn: LoadedModel, history: int, options: RescoreOptions) -> ScoredLattice:
    """(b) as the engine sees it: the lattice prepared and expanded by the engine at order
    ``history + 1`` (:class:`SilentScorer`; determinized and fitted to the budget as ``afp
    rescore`` would), with :func:`first_history_scores` in the ``new_lm`` column."""
    tick = time.perf_counter()
    scored = score_for_options(lattice, SilentScorer(LMScorer(rnn), history), options, rnn.device)
    reduced, expansion = scored.lattice, scored.expansion
    used = torch.unique(reduced.words).tolist()
    table = torch.full((len(reduced.symbols) + 1,), PAD, dtype=torch.int64)
    table[used] = rnn_ids(rnn, [reduced.symbols[i] for i in used], options.match_case)
    device = expansion.src.device
    words = torch.where(expansion.arc_lm_word == PAD, PAD, table.to(device)[expansion.arc_lm_word.clamp(min=0)])
    arc_lm, final_lm = first_history_scores(expansion, reduced.levels, words, rnn)
    return _with_new_lm(scored, arc_lm, final_lm, f"Kaldi-style: full-history RNN, histories merged at {history} words",
                        tick)
