"""The rescoring methods in use today, each driving a full-recurrence (BPTT) RNN, for comparison.

(a) :func:`nbest_rescore` (icefall's way): take the n best distinct word sequences of the
    lattice under its own scores and rescore each with the RNN's sentence forward pass.
(b) :func:`kaldi_style_rescore` (Kaldi's ``lattice-lmrescore-rnnlm`` way): expand the lattice so
    that states are keyed by the last n-1 words, and carry the RNN state along it; a state
    reached by several histories keeps the RNN state of the first one to arrive, so paths that
    merge get the scores of another history: an approximation.

Both return the chosen hypothesis and timings; (b) also returns its approximate LM scores so
they can be compared with the RNN's true sentence scores.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from lattices.expand import DEFAULT_SKIP, PAD, expand, word_map
from lattices.lattice import Lattice
from lattices.kbest import k_best_distinct
from lattices.search import Dag
from lm.checkpoint import LoadedModel
from lm.corpus import encode
from lm.evaluate import score_corpus
from lm.model import RecurrentLM


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _final_of(dst_of_last: list[int], finals: list[int]) -> list[int]:
    position = {s: i for i, s in enumerate(finals)}
    return [position[s] for s in dst_of_last]


def nbest_rescore(lattice: Lattice, rnn: LoadedModel, n: int, acoustic_scale: float, word_penalty: float,
                  lm_weight: float = 1.0) -> dict[str, Any]:
    """(a) Rescore the ``n`` best distinct word sequences with the RNN; return the best and timings."""
    device = rnn.device
    started = _sync(device)
    is_word = word_map(lattice.symbols, torch.zeros(len(lattice.symbols), dtype=torch.int64)) >= 0
    word_arc = is_word[lattice.words]
    own = acoustic_scale * lattice.acoustic + lattice.graph + word_penalty * word_arc
    dag = Dag(lattice.num_states, lattice.start, lattice.src, lattice.dst, own, lattice.finals,
              acoustic_scale * lattice.final_acoustic + lattice.final_graph, lattice.levels)
    labels = torch.where(word_arc, lattice.words, -1)
    hyps = k_best_distinct(dag, labels, n)
    listed = _sync(device)
    sentences = [[lattice.symbols[i] for i in labels[arcs].tolist() if i >= 0] for _, arcs in hyps]
    lm = [float(t.sum()) for t in score_corpus(rnn.model, encode(sentences, rnn.vocab), batch_size=256).token_logprobs]
    scored = _sync(device)
    finals = _final_of([int(lattice.dst[arcs[-1]]) if arcs.numel() else lattice.start for _, arcs in hyps],
                       lattice.finals.tolist())
    totals = [acoustic_scale * float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[f]) + lm_weight * l
              + word_penalty * len(s) for (_, arcs), f, l, s in zip(hyps, finals, lm, sentences)]
    best = max(range(len(hyps)), key=totals.__getitem__)
    return {"n": len(hyps), "best_words": sentences[best], "best_score": totals[best], "best_lm": lm[best],
            "seconds": {"nbest": listed - started, "score": scored - listed, "total": scored - started}}


@torch.no_grad()
def kaldi_style_rescore(lattice: Lattice, rnn: LoadedModel, history: int, acoustic_scale: float,
                        word_penalty: float, lm_weight: float = 1.0, nbest: int = 10,
                        max_elements: int = 1 << 24) -> dict[str, Any]:
    """(b) RNN rescoring on an n-gram-history expansion (``history`` = n-1 words), first history wins."""
    model = rnn.model
    if not isinstance(model, RecurrentLM):
        raise ValueError("kaldi_style_rescore drives a recurrent model")
    device = rnn.device
    started = _sync(device)
    symbols = lattice.symbols
    vocab = rnn.vocab
    mapping = word_map(symbols, torch.tensor(vocab.encode(list(symbols))), DEFAULT_SKIP)
    expansion = expand(lattice.to(device), mapping, history, vocab.bos_id)
    expanded = _sync(device)

    num_states, src, dst = expansion.num_states, expansion.src, expansion.dst
    word = expansion.arc_lm_word
    arc_ids = torch.arange(expansion.num_arcs, device=device)
    first_arc = torch.full((num_states,), expansion.num_arcs, device=device).scatter_reduce(
        0, dst, arc_ids, reduce="amin", include_self=True)  # arcs are sorted by source: the first to arrive
    cell = model.cell
    state = cell.initial_state(model.embedding.weight, (num_states,))
    bos = model.cell.project(model.embedding(torch.tensor([vocab.bos_id], device=device)))
    state[0] = cell.step(cell.initial_state(bos, (1,)), bos)[0]
    state_level = lattice.to(device).levels[expansion.state_orig]
    order = torch.argsort(state_level, stable=True)
    _, counts = torch.unique_consecutive(state_level[order], return_counts=True)
    for states in torch.split(order, counts.tolist())[1:]:
        arcs = first_arc[states]
        prev = state[src[arcs]]
        w = word[arcs]
        stepped = cell.step(prev, cell.project(model.embedding(w.clamp(min=0))))
        state[states] = torch.where((w >= 0).unsqueeze(1), stepped, prev)

    scored = (word != PAD).nonzero().squeeze(1)
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
        arc_lm[arcs] = log_probs[position[src[arcs]] - start, word[arcs]].double()
        finals = (position[expansion.finals] >= start) & (position[expansion.finals] < start + block.shape[0])
        final_lm[finals] = log_probs[position[expansion.finals[finals]] - start, vocab.eos_id].double()
    lm_scored = _sync(device)

    orig = expansion.arc_orig
    lat = expansion.lattice
    total = (acoustic_scale * lat.acoustic[orig] + lm_weight * arc_lm + word_penalty * (word != PAD))
    final_total = acoustic_scale * lat.final_acoustic[expansion.final_orig] + lm_weight * final_lm
    dag = Dag(num_states, 0, src, dst, total, expansion.finals, final_total, state_level)
    labels = torch.where(word != PAD, lat.words[orig], -1)
    hyps = k_best_distinct(dag, labels, nbest)
    searched = _sync(device)
    final_position = {int(s): i for i, s in enumerate(expansion.finals.tolist())}
    out = []
    for score, arcs in hyps:
        end = final_position[int(dst[arcs[-1]])] if arcs.numel() else final_position[0]
        out.append({"words": [symbols[i] for i in labels[arcs].tolist() if i >= 0], "score": score,
                    "approx_lm": float(arc_lm[arcs].sum() + final_lm[end])})
    return {"history": history, "expanded_states": num_states, "expanded_arcs": expansion.num_arcs,
            "nbest": out, "seconds": {"expand": expanded - started, "rnn": lm_scored - expanded,
                                      "search": searched - lm_scored, "total": searched - started}}
