"""Acausal window models: a word scored from the ``R`` words before it and the ``K`` words after it.

A window model (``ModelConfig.future = K > 0``, ``rho = R``) predicts token ``s_i`` of a sentence
``s = [<s>, w_1 .. w_n, </s>]`` (``i = 1 .. n + 1``) from the window

    ``[s_{i-R} .. s_{i-1}, MASK, s_{i+1} .. s_{i+K}]``

read by the recurrent cell from its initial state, the prediction being made from the state after
the window's last token: a delayed RNN (Turek et al.) with delay ``K + 1``, whose output for
position ``i`` has also read the inputs after ``i``. ``MASK`` hides the word being predicted (it is
the embedding row ``vocab_size``, never predicted). Positions outside the sentence (before
``<s>``, after ``</s>``) are not read: a window at a sentence edge is shorter, and holds ``<s>`` or
``</s>`` where the edge falls inside it.

A sentence's acausal score is the sum over its words and ``</s>`` of ``log p(s_i | window)``: a
*pseudo*-log-likelihood (Salazar et al. 2020 call it PLL), not the log-probability of the
sentence; its exponentiated negative mean is a pseudo-perplexity, not comparable with the
perplexity of a causal model.

Windows are fixed-width tensors here: ``windows: int64 (N, L)`` with ``L = R + 1 + K`` and the
target's ``MASK`` in column ``R``, and ``valid: bool (N, L)``, false where the window falls outside
the sentence (the token there is ignored). Every window of a batch is computed at once, by a
direct pass over the window (``L`` cell steps) or by ``L`` parallel fixed-point iterations (AFP);
the two give the same features (``tests/lm/test_window.py``). Where windows have been gathered
from many places (a sentence's repeated n-grams, a lattice's arcs), :func:`score_each_window_once`
reads each distinct window once and scores each distinct (window, word) once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

WINDOW_METHODS = ("direct", "afp")
#: a slot of a window matrix that holds no token (outside the sentence; :func:`score_each_window_once`)
PAD = -1
#: distinct rows of an int64 ``(N, W)`` matrix and each row's index among them (``(D, W)``, ``(N,)``)
RowUnique = Callable[[Tensor], tuple[Tensor, Tensor]]
#: ``score_windows(windows, valid, targets, target_window)`` of :class:`lm.scorer.WindowScorer`
WindowScore = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def build_windows(tokens: Tensor, lengths: Tensor, rho: int, future: int, mask_id: int,
                  pad_id: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Every target's window in a batch of sentences.

    Args:
      tokens: int64 ``(B, S)``, each row ``[<s>, w_1 .. w_n, </s>]`` then padding.
      lengths: int64 ``(B,)``, each row's ``n + 2`` (both markers counted).
      rho, future: ``R`` and ``K``.
      mask_id: the id of ``MASK``; pad_id: the id left where a window falls outside its sentence.
    Returns:
      ``windows`` int64 ``(N, L)`` and ``valid`` bool ``(N, L)`` (module docstring), ``targets``
      int64 ``(N,)`` and ``where`` int64 ``(N, 2)``: each target's ``(row, position)`` in
      ``tokens`` (position ``1 .. n + 1``), in row-major order; ``N = sum(lengths - 1)``.
    """
    batch, width = tokens.shape
    device = tokens.device
    positions = torch.arange(width, device=device)
    inside = positions.unsqueeze(0) < lengths.unsqueeze(1)                     # (B, S)
    padded = F.pad(torch.where(inside, tokens, pad_id), (rho, future), value=pad_id)
    padded_inside = F.pad(inside, (rho, future), value=False)
    size = rho + 1 + future
    all_windows = padded.unfold(1, size, 1)                                     # (B, S, L)
    all_valid = padded_inside.unfold(1, size, 1)
    is_target = inside & (positions.unsqueeze(0) >= 1)
    where = is_target.nonzero()                                                 # (N, 2)
    windows = all_windows[where[:, 0], where[:, 1]].clone()
    valid = all_valid[where[:, 0], where[:, 1]]
    targets = tokens[where[:, 0], where[:, 1]]
    windows[:, rho] = mask_id
    return windows, valid, targets, where


def sentence_tokens(sentences: list[list[int]], bos_id: int, eos_id: int,
                    device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """``([<s>, ids.., </s>] rows padded with eos_id, lengths)``: int64 ``(B, S)`` and ``(B,)``."""
    rows = [[bos_id, *ids, eos_id] for ids in sentences]
    width = max((len(r) for r in rows), default=2)
    tokens = torch.full((len(rows), width), eos_id, dtype=torch.int64)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
    return tokens.to(device), torch.tensor([len(r) for r in rows], dtype=torch.int64, device=device)


def sorted_unique_rows(rows: Tensor) -> tuple[Tensor, Tensor]:
    """:data:`RowUnique` in sorted order: ``torch.unique(rows, dim=0, return_inverse=True)``."""
    return torch.unique(rows, dim=0, return_inverse=True)


def score_each_window_once(score_windows: WindowScore, windows: Tensor, targets: Tensor,
                           unique: RowUnique = sorted_unique_rows) -> tuple[Tensor, int]:
    """The log-probability of every target in its window, each distinct window read once and each
    distinct (window, target) pair scored once: the de-duplication of ``afp score`` /
    ``afp ppl`` (:func:`lm.scorer.window_values`). The lattice engine's acausal features
    (``lattices.scored.window_scores``) do the same in their own hash order: ``lattices/`` sees
    the model only through its protocol and imports nothing of ``lm/`` (DESIGN.md).

    Args:
      score_windows: the model's scoring (:data:`WindowScore`), given the distinct windows
        (:data:`PAD` slots cleared to 0 and marked invalid) and the distinct pairs.
      windows: int64 ``(N, L)``, ``MASK`` in column ``R``, :data:`PAD` where the window falls
        outside the sentence.
      targets: int64 ``(N,)``, the word scored in each window.
      unique: how distinct rows are found (:data:`RowUnique`); their order is the order in which
        the model reads them. Default :func:`sorted_unique_rows`; any other order gives the same
        values up to rounding (the tests pass the engine's hash-ordered one).
    Returns:
      float64 ``(N,)`` on ``windows.device``, and the number of distinct windows ``D``.
    """
    if windows.shape[0] == 0:
        return torch.zeros(0, dtype=torch.float64, device=windows.device), 0
    distinct, window_of = unique(windows)  # (D, L), (N,)
    pairs, pair_of = unique(torch.stack([window_of, targets], dim=1))  # (P, 2): (window, target), (N,)
    values = score_windows(distinct.clamp(min=0), distinct != PAD, pairs[:, 1], pairs[:, 0])  # (P,)
    return values.to(windows.device, torch.float64)[pair_of], int(distinct.shape[0])
