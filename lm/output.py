"""Picked log-softmax of a linear output layer, in float32 or in bfloat16 with float32 refinement.

Scoring a (context, word) pair needs one entry of ``log_softmax(h @ W.T + b)``: the word's logit
minus the log-sum-exp over the vocabulary. The log-sum-exp is the expensive part (a ``(N, F) x
(F, V)`` matmul), and on a GPU a bfloat16 matmul runs many times faster than a float32 one. Plain
bfloat16 costs up to ~0.06 nats on the bundled models, from two roundings: of ``h`` (an error
shared by every column, which does not average out) and of each output logit (a logit of 15 is
off by up to 0.06). ``bf16`` removes both to well within 1e-3 nats:

  1. approximate logits from ONE bfloat16 matmul with float32 accumulation of
     ``[hi(h), lo(h)] @ [bf16(W), bf16(W)].T``, where ``hi(h) = bf16(h)`` and
     ``lo(h) = bf16(h - hi(h))``: ``h`` is carried to ~16 bits, and only ``W`` (errors
     independent per column) and the output are rounded;
  2. the ``refine`` largest approximate logits of each row, which hold most of its probability
     mass, are recomputed in float32 (one float32 matmul against the union of those columns over
     the rows, far fewer than V columns);
  3. the log-sum-exp runs in float32 over the exact top logits and the approximate rest, whose
     rounding errors are weighted by their small probabilities and average out;
  4. each target's own logit is a float32 dot product: only the target columns are gathered.

On the four bundled models and 300 validation sentences each (7,121 pairs at most) the largest
error is 4.9e-4 nats with ``refine=64`` (8.8e-4 with 32, 1.2e-3 with 16; 0.06 without steps 1-2);
``tests/lm/test_output.py`` holds it under 1e-3. ``fp32`` is the plain computation. Only the
output layer changes precision: the recurrence stays in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: Output-layer precisions of scoring; ``auto`` is ``bf16`` on CUDA and ``fp32`` elsewhere
#: (a CPU without native bfloat16 emulates it, many times slower than float32).
SCORE_PRECISIONS = ("fp32", "bf16", "auto")

#: Columns per row recomputed in float32 by the ``bf16`` path.
DEFAULT_REFINE = 64

#: Logits the ``fp32`` output layer makes at a time on the CPU (2 MB): a block of rows stays in
#: the cache through the log-sum-exp's passes (max, subtract, exp, sum) instead of making each
#: a trip to memory, and no large fresh tensor is paged in per call. Each row's value is its
#: own, to float32 rounding (the matmul may round a row differently in a block of another
#: height: 1e-6 nats). On the bundled LibriSpeech model's adaptive softmax (head 2,002, tails
#: 8,000 and 34,122 wide) the output layer of 30 dev lattices' scoring is 1.2-1.3 times faster
#: than in one block of every row. On a GPU every row goes at once.
CPU_BLOCK_LOGITS = 1 << 19


def resolve_score_precision(precision: str, device: torch.device | str) -> str:
    """``auto`` -> ``bf16`` on CUDA, else ``fp32``; ``fp32``/``bf16`` stay; anything else is an error."""
    if precision not in SCORE_PRECISIONS:
        raise ValueError(f"score precision must be one of {SCORE_PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


def picked_log_softmax(features: Tensor, weight: Tensor, bias: Tensor | None, rows: Tensor, cols: Tensor,
                       precision: str = "fp32", low_weight: Tensor | None = None,
                       refine: int = DEFAULT_REFINE) -> Tensor:
    """``log_softmax(features @ weight.T + bias, dim=1)[rows, cols]``.

    Args:
      features: float32 ``(N, F)``.
      weight: float32 ``(V, F)``; bias: float32 ``(V,)`` (``-inf`` blocks an id) or None.
      rows, cols: int64 ``(M,)``: the entries wanted (row of ``features``, column of the vocabulary).
      precision: ``fp32`` or ``bf16`` (see the module docstring).
      low_weight: :func:`low_precision_weight` of ``weight`` (a cached copy), for ``bf16``; None makes it.
      refine: columns per row recomputed in float32 by ``bf16``.
    Returns:
      float32 ``(M,)``.
    """
    if precision == "fp32":
        return _picked_fp32(features, weight, bias, rows, cols)
    if precision != "bf16":
        raise ValueError(f"output precision must be fp32 or bf16, got {precision!r}")
    target = (features[rows] * weight[cols]).sum(dim=1, dtype=torch.float32)
    if bias is not None:
        target = target + bias[cols]
    return target - _bf16_log_sum_exp(features, weight, bias, low_weight, refine)[rows]


def _picked_fp32(features: Tensor, weight: Tensor, bias: Tensor | None, rows: Tensor, cols: Tensor) -> Tensor:
    """:func:`picked_log_softmax` in float32: ``torch.log_softmax`` of the logits, in blocks of
    rows (:data:`CPU_BLOCK_LOGITS` logits on the CPU, every row at once elsewhere), each block's
    wanted entries picked from it. float32 ``(M,)``."""
    n = features.shape[0]
    if torch.is_grad_enabled() and (features.requires_grad or weight.requires_grad):
        return torch.log_softmax(F.linear(features, weight, bias), dim=1)[rows, cols]  # autograd's own path
    step = max(1, CPU_BLOCK_LOGITS // weight.shape[0]) if features.device.type == "cpu" else max(1, n)
    if step >= n:
        return torch.log_softmax(F.linear(features, weight, bias).float(), dim=1)[rows, cols]
    order = torch.argsort(rows)
    sorted_rows = rows[order]
    bounds = torch.searchsorted(sorted_rows, torch.arange(0, n + step, step, device=rows.device)).tolist()
    out = features.new_empty(rows.shape[0], dtype=torch.float32)
    block = features.new_empty(step, weight.shape[0], dtype=torch.float32)
    for i, start in enumerate(range(0, n, step)):
        lo, hi = bounds[i], bounds[i + 1]
        if lo == hi:  # no entry wanted from these rows
            continue
        logits = F.linear(features[start:start + step], weight, bias).float()
        picked = torch.log_softmax(logits, dim=1, out=block[:logits.shape[0]])
        take = order[lo:hi]
        out[take] = picked[sorted_rows[lo:hi] - start, cols[take]]
    return out


def logsumexp_in_place(values: Tensor) -> Tensor:
    """``torch.logsumexp(values, dim=1)`` bit for bit, computed in ``values``' own memory, which
    it overwrites: float32 ``(N, V)`` -> ``(N,)``. ``torch.logsumexp`` makes ``values - max`` and
    its ``exp`` as new ``(N, V)`` tensors; here they are made in place, the same operations in the
    same order (the row maxima, those of magnitude ``inf`` taken as 0, subtracted; ``exp``; the
    row sums; ``log``; the maxima added back), so only ``(N,)`` vectors are allocated. Where
    autograd records ``values`` (in-place steps would break its backward pass), it is
    ``torch.logsumexp`` itself, and ``values`` is left as it is."""
    if values.requires_grad and torch.is_grad_enabled():
        return torch.logsumexp(values, dim=1)
    maxes = values.amax(dim=1, keepdim=True)
    maxes.masked_fill_(maxes.abs() == float("inf"), 0.0)
    return values.sub_(maxes).exp_().sum(dim=1).log_().add_(maxes.squeeze(1))


def _bf16_log_sum_exp(features: Tensor, weight: Tensor, bias: Tensor | None, low_weight: Tensor | None,
                      refine: int) -> Tensor:
    """float32 ``(N,)``: ``logsumexp(features @ weight.T + bias, dim=1)`` by the ``bf16`` steps 1-3
    of the module docstring; the ``(N, V)`` approximate logits are the only vocabulary-sized
    tensor made (:func:`logsumexp_in_place`)."""
    if low_weight is None:
        low_weight = low_precision_weight(weight)
    hi = features.to(torch.bfloat16)
    approx = F.linear(torch.cat([hi, (features - hi.float()).to(torch.bfloat16)], dim=1), low_weight).float()
    if bias is not None:
        approx += bias
    k = min(refine, approx.shape[1])
    if k == 0:
        return logsumexp_in_place(approx)
    top = approx.topk(k, dim=1).indices  # (N, k)
    columns, where = torch.unique(top, return_inverse=True)  # (U,), (N, k)
    exact = F.linear(features, weight[columns], None if bias is None else bias[columns]).float()  # (N, U)
    approx.scatter_(1, top, float("-inf"))
    return torch.logaddexp(logsumexp_in_place(approx), torch.logsumexp(exact.gather(1, where), dim=1))


def low_precision_weight(weight: Tensor) -> Tensor:
    """bfloat16 ``(V, 2F)``: ``[bf16(W), bf16(W)]`` for a float32 ``weight (V, F)``, which multiplies
    the high and low bfloat16 parts of the features in one matmul (see the module docstring)."""
    low = weight.detach().to(torch.bfloat16)
    return torch.cat([low, low], dim=1)
