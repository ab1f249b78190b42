"""Adaptive input embeddings (lm.embedding): each cluster's vectors, the config's refusals, size."""

from __future__ import annotations

import pytest
import torch

from lm.config import ModelConfig
from lm.embedding import AdaptiveEmbedding
from lm.model import build_model


def test_each_id_gets_its_clusters_vector_projected_to_full_width():
    torch.manual_seed(0)
    emb = AdaptiveEmbedding(20, 8, (4, 10), div_value=2.0)
    assert [t.weight.shape[1] for t in emb.tables] == [8, 4, 2]
    ids = torch.tensor([[0, 3, 4, 9], [10, 19, 5, 0]])
    got = emb(ids)
    assert got.shape == (2, 4, 8)
    for row, col in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]:
        i = int(ids[row, col])
        if i < 4:
            expected = emb.tables[0].weight[i]
        elif i < 10:
            expected = emb.projections[0](emb.tables[1].weight[i - 4])
        else:
            expected = emb.projections[1](emb.tables[2].weight[i - 10])
        assert torch.allclose(got[row, col], expected, atol=1e-6), (row, col)
    got.sum().backward()  # every cluster that was used gets a gradient
    assert all(t.weight.grad is not None and t.weight.grad.abs().sum() > 0 for t in emb.tables)


def test_a_window_models_mask_id_falls_in_the_last_cluster():
    config = ModelConfig(vocab_size=30, cell="gru", mode="afp", rho=2, future=1, softmax="adaptive", cutoffs=(5, 12), div_value=2.0,
                         adaptive_input=True, hidden=8)
    model = build_model(config)
    assert model.embedding.bounds == [0, 5, 12, 31]
    assert model.embedding(torch.tensor([model.mask_id])).shape == (1, 8)


def test_fewer_parameters_than_one_table():
    common = dict(vocab_size=44_122, cell="gru", mode="afp", rho=4, hidden=512, softmax="adaptive")
    full = sum(p.numel() for p in build_model(ModelConfig(**common)).embedding.parameters())
    adaptive = sum(p.numel() for p in build_model(ModelConfig(**common, adaptive_input=True)).embedding.parameters())
    assert full == 44_122 * 512 and adaptive < full / 5


@pytest.mark.parametrize("fields, message", [
    ({"tie_weights": True}, "tie_weights: cannot be combined with adaptive_input"),
    ({"adaptive_input": "yes"}, "adaptive_input: must be true or false"),
])
def test_refused_combinations_name_the_field(fields, message):
    fields.setdefault("adaptive_input", True)
    with pytest.raises(ValueError, match=message):
        ModelConfig(vocab_size=20, **fields)
