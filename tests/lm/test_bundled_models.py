"""Every bundled model loads, is exact-rescoring capable, and its recorded training numbers are real."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from lm.checkpoint import load_checkpoint
from lm.corpus import encode, load_corpus
from lm.evaluate import score_corpus

REPO = Path(__file__).resolve().parents[2]
MODELS = sorted(p for p in (REPO / "models").iterdir() if (p / "config.json").is_file())


def test_the_default_model_is_bundled():
    assert "conversational" in [p.name for p in MODELS]


@pytest.mark.parametrize("model_dir", MODELS, ids=[p.name for p in MODELS])
def test_bundled_model_records_how_it_was_trained(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert loaded.config.context_size is not None, "a bundled model must rescore lattices exactly (AFP or n-gram)"
    best = loaded.training["best_valid_ppl"]
    trained = loaded.training.get("trained_valid_ppl", best)  # before storing weights as bfloat16
    metrics = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert min(m["valid_ppl"] for m in metrics) == pytest.approx(trained, rel=1e-12)
    note = (model_dir / "TRAINING.md").read_text()
    assert f"Best validation perplexity {best:.2f}" in note
    assert re.search(r"Command: `python -m bench\.train_bundled [\w-]+`", note)
    if "stored_dtype" in loaded.training:  # installed by today's driver: the data's licence is recorded
        assert loaded.training["data_licence"] and "licence" in note.lower()


@pytest.mark.parametrize("model_dir", MODELS, ids=[p.name for p in MODELS])
def test_bundled_model_reaches_its_recorded_validation_perplexity(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    if "valid_sources" in loaded.training:  # paths under ../shared, concatenated in this order
        files = [REPO.parent / "shared" / name for name in loaded.training["valid_sources"]]
    else:
        recorded = Path(loaded.training["valid"])
        files = [REPO.parent / "shared" / Path(*recorded.parts[recorded.parts.index("shared") + 1:])]
    for path in files:
        if not path.is_file():
            pytest.skip(f"{path} is absent")
    sentences = [s for path in files for s in load_corpus(path)]
    score = score_corpus(loaded.model, encode(sentences, loaded.vocab))
    assert score.ppl == pytest.approx(loaded.training["best_valid_ppl"], rel=1e-4)


@pytest.mark.parametrize("model_dir", MODELS, ids=[p.name for p in MODELS])
def test_bundled_weights_load_as_float32(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    if loaded.training.get("stored_dtype") == "bfloat16":
        assert loaded.training["stored_relative_ppl_change"] <= 1e-3
