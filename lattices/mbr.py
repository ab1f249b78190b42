"""Minimum Bayes risk (MBR) decoding over a hypothesis list: choose the least expected word errors.

Viterbi decoding picks the hypothesis with the highest score, the most probable *sentence*. The
word error rate counts *words*, so the hypothesis that minimises the expected number of word
errors can be a different one: Stolcke, Konig and Weintraub, "Explicit word error minimization in
N-best list rescoring" (Eurospeech 1997). With the N-best list standing in both for the
hypotheses one may choose and for the distribution of the unknown reference:

    p_j = softmax(scale * score)_j                          (posterior of hypothesis j)
    E_i = sum_j p_j * D(h_i, h_j)                            (expected word errors of hypothesis i)
    choice = argmin_i E_i

``D`` is the word-level Levenshtein distance (unit costs, as the WER counts errors). The
reference length is the same for every candidate, so minimising expected errors minimises
expected WER. ``scale`` sharpens (> 1) or flattens (< 1) the posteriors of the total scores:
``scale -> inf`` gives the Viterbi choice back (all mass on the top hypothesis, which is at
distance 0 from itself); ``scale = 0`` gives every hypothesis the same weight (the "centroid").

SRILM's ``nbest-lattice`` aligns all hypotheses into one word mesh and reads the distances off
it, an approximation; here they are computed exactly, one alignment per unordered pair
(kaldialign, C++), K(K-1)/2 alignments for K hypotheses. :func:`edit_distance_matrix` depends on the words only, so a
caller computes it once per utterance and reuses it for every setting of the score weights;
:func:`mbr_choice` with ``(G, K)`` scores then decides G weight settings at once with one
``(G, K) @ (K, K)`` product.

Conventions: a hypothesis scored ``-inf`` has posterior 0 and is never chosen (it is not a
hypothesis: pruned, or padding); ties in expected errors (within :data:`TIE_TOLERANCE`) go to the
higher-scoring hypothesis, then to the lower index (the recogniser's order).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: expected errors closer than this to the minimum count as equal (float rounding of the sums)
TIE_TOLERANCE = 1e-9


def edit_distance_matrix(hyps: Sequence[Sequence[str]]) -> Tensor:
    """Word-level Levenshtein distances between every pair of hypotheses.

    ``hyps``: K word lists. Returns float64 ``(K, K)`` on the CPU, symmetric, zero on the
    diagonal; each unordered pair is aligned once."""
    import kaldialign

    ids: dict[str, int] = {}
    coded = []
    for k, words in enumerate(hyps):
        if isinstance(words, str):
            raise TypeError(f"hypothesis {k} must be a list of words, not a string: {words[:40]!r}")
        coded.append([ids.setdefault(w, len(ids)) for w in words])
    size = len(coded)
    out = torch.zeros(size, size, dtype=torch.float64)
    for i in range(size):
        for j in range(i + 1, size):
            if coded[i] == coded[j]:
                continue
            distance = kaldialign.edit_distance(coded[i], coded[j])["total"]
            out[i, j] = out[j, i] = distance
    return out


def posteriors(scores: Tensor, scale: float = 1.0) -> Tensor:
    """``softmax(scale * scores)`` over the last dimension, float64, with ``-inf`` scores at 0.

    ``scores``: ``(K,)`` or ``(G, K)``. Raises ValueError for NaN or ``+inf`` scores, a negative or
    non-finite scale, no hypotheses, or a row whose scores are all ``-inf``."""
    if scores.dim() not in (1, 2):
        raise ValueError(f"scores must be (K,) or (G, K), got shape {tuple(scores.shape)}")
    if not (scale >= 0 and scale != float("inf")):
        raise ValueError(f"scale must be finite and >= 0, got {scale}")
    scores = scores.to(torch.float64)
    if scores.shape[-1] == 0:
        raise ValueError("no hypotheses: scores has K = 0")
    if torch.isnan(scores).any() or (scores == float("inf")).any():
        raise ValueError("scores must be finite or -inf (NaN or +inf found)")
    alive = scores > float("-inf")
    dead_rows = ~alive.any(dim=-1)
    if dead_rows.any():
        where = "" if scores.dim() == 1 else f" (rows {dead_rows.nonzero().squeeze(1).tolist()[:5]})"
        raise ValueError(f"every hypothesis scores -inf{where}: no posterior")
    top = scores.max(dim=-1, keepdim=True).values
    # shift first, then scale: a huge scale makes the others -inf, never the top +inf
    logits = torch.where(alive, scale * (scores - top), torch.full_like(scores, float("-inf")))
    return torch.softmax(logits, dim=-1)


def expected_errors(scores: Tensor, distances: Tensor, scale: float = 1.0) -> Tensor:
    """``E_i = sum_j p_j D_ij`` with ``p = posteriors(scores, scale)``.

    ``scores``: ``(K,)`` or ``(G, K)``; ``distances``: ``(K, K)`` from :func:`edit_distance_matrix`.
    Returns float64 of the shape of ``scores``, on its device (also for ``-inf`` hypotheses: what
    choosing them would cost)."""
    p = posteriors(scores, scale)
    size = p.shape[-1]
    if distances.shape != (size, size):
        raise ValueError(f"distances must be ({size}, {size}) for {size} hypotheses, got {tuple(distances.shape)}")
    return p @ distances.to(device=p.device, dtype=torch.float64).T


def mbr_choice(scores: Tensor, distances: Tensor, scale: float = 1.0) -> Tensor:
    """The index of the hypothesis with the least expected word errors.

    ``scores``: ``(K,)`` total scores (log domain) of K hypotheses, or ``(G, K)``: G weight
    settings of the same hypotheses. ``distances``: ``(K, K)`` (:func:`edit_distance_matrix`).
    Returns int64: a 0-d tensor for ``(K,)`` scores, ``(G,)`` for ``(G, K)``. ``-inf``
    hypotheses are never chosen; ties go to the higher score, then the lower index."""
    errors = expected_errors(scores, distances, scale)
    scores = scores.to(device=errors.device, dtype=torch.float64)
    alive = scores > float("-inf")
    errors = torch.where(alive, errors, torch.full_like(errors, float("inf")))
    least = errors.min(dim=-1, keepdim=True).values
    tied = errors <= least + TIE_TOLERANCE
    key = torch.where(tied, scores, torch.full_like(scores, float("-inf")))
    best = key.max(dim=-1, keepdim=True).values
    index = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)
    first = torch.where(tied & (key == best), index, scores.shape[-1]).min(dim=-1).values
    assert bool((first < scores.shape[-1]).all()), f"no MBR choice among errors {errors} and scores {scores}"
    return first
