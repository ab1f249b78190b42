from __future__ import annotations

import pytest
import torch

from lattices import ops


def _as_set(rows):
    return {tuple(r) for r in rows.tolist()}


@pytest.mark.parametrize("width", [1, 3, 9])
def test_unique_rows_matches_torch_unique(width):
    torch.manual_seed(width)
    rows = torch.randint(-1, 4, (300, width))
    distinct, inverse = ops.unique_rows(rows)
    expected, _ = torch.unique(rows, dim=0, return_inverse=True)
    assert _as_set(distinct) == _as_set(expected) and distinct.shape == expected.shape
    assert torch.equal(distinct[inverse], rows)


def test_unique_rows_falls_back_on_hash_collisions(monkeypatch):
    monkeypatch.setattr(ops, "_MULTIPLIERS", (0,))  # every key becomes the last column: collisions
    rows = torch.tensor([[1, 5], [2, 5], [1, 5], [3, 6]])
    distinct, inverse = ops.unique_rows(rows)
    assert _as_set(distinct) == {(1, 5), (2, 5), (3, 6)}
    assert torch.equal(distinct[inverse], rows)
