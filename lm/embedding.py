"""Adaptive input embeddings (Baevski & Auli, "Adaptive input representations for neural
language modeling", 2019): the input-side twin of the adaptive softmax.

Ids are split into clusters by the same boundaries as the adaptive softmax (frequent words
first, as a vocabulary built from text orders them). Cluster 0 (the ``cutoffs[0]`` most frequent
ids) has full-width vectors; cluster ``i`` has vectors ``div_value ** i`` times narrower, each
projected back to the full width by a cluster matrix. A 44k-word vocabulary at width 1024 costs
45M parameters as one table and about 3M this way, and rare words, which the data teach little,
get few numbers each.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class AdaptiveEmbedding(nn.Module):
    """``ids: int64 (...)`` -> ``(..., dim)``; the clusters' ids are ``[bounds[i], bounds[i + 1])``.

    Attributes:
      bounds: ``[0, cutoffs..., num_embeddings]``.
      tables: one ``nn.Embedding`` per cluster, ``(bounds[i+1] - bounds[i], dim // div_value ** i)``.
      projections: one bias-free ``nn.Linear(width_i, dim)`` per tail cluster (cluster 0 has none).
    """

    def __init__(self, num_embeddings: int, dim: int, cutoffs: tuple[int, ...], div_value: float) -> None:
        super().__init__()
        self.bounds = [0, *cutoffs, num_embeddings]
        if any(lo >= hi for lo, hi in zip(self.bounds, self.bounds[1:])):
            raise ValueError(f"adaptive input: cutoffs {list(cutoffs)} must increase and stay below {num_embeddings}")
        widths = [int(dim // div_value ** i) for i in range(len(self.bounds) - 1)]
        if widths[-1] < 1:
            raise ValueError(f"adaptive input: {len(cutoffs)} tail clusters with div_value {div_value} leave the "
                             f"last cluster a width of 0 from {dim}; use fewer cutoffs or a smaller div_value")
        self.dim = dim
        self.tables = nn.ModuleList(nn.Embedding(hi - lo, width)
                                    for (lo, hi), width in zip(zip(self.bounds, self.bounds[1:]), widths))
        self.projections = nn.ModuleList(nn.Linear(width, dim, bias=False) for width in widths[1:])

    @property
    def weight(self) -> Tensor:
        """Cluster 0's table (its device and dtype are the module's)."""
        return self.tables[0].weight

    def forward(self, ids: Tensor) -> Tensor:
        flat = ids.reshape(-1)
        out = self.tables[0].weight.new_zeros(flat.shape[0], self.dim)
        for i, (lo, hi) in enumerate(zip(self.bounds, self.bounds[1:])):
            rows = ((flat >= lo) & (flat < hi)).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            vectors = self.tables[i](flat[rows] - lo)
            if i:
                vectors = self.projections[i - 1](vectors)
            out.index_copy_(0, rows, vectors.to(out.dtype))
        return out.view(*ids.shape, self.dim)
