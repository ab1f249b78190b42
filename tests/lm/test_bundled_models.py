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
#: every bundled neural model: a model directory of models/, or the AFP part of a bundled mixture
MODELS = sorted(p for p in [*(REPO / "models").iterdir(), *(REPO / "models").glob("*/*")]
                if (p / "config.json").is_file())
NAMES = [str(p.relative_to(REPO / "models")) for p in MODELS]


def test_the_default_model_is_bundled():
    from afp.defaults import default_model_dir
    from afp.mixtures import open_model

    assert default_model_dir().name == "conversational"
    assert open_model(default_model_dir()).config.context_size is not None


@pytest.mark.parametrize("model_dir", MODELS, ids=NAMES)
def test_bundled_model_records_how_it_was_trained(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert loaded.config.context_size is not None, "a bundled model must rescore lattices exactly (AFP or n-gram)"
    best = loaded.training["best_valid_ppl"]
    trained = loaded.training.get("trained_valid_ppl", best)  # before storing weights as bfloat16
    metrics = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert min(m["valid_ppl"] for m in metrics) == pytest.approx(trained, rel=1e-12)
    note = (model_dir / "TRAINING.md").read_text()
    assert f"Best validation perplexity {best:.2f}" in note
    assert re.search(r"Command: `(python -m bench\.train_bundled [\w-]+|bash bench/books_large\.sh)`", note)
    if "stored_dtype" in loaded.training:  # installed by today's driver: the data's licence is recorded
        assert loaded.training["data_licence"] and "licence" in note.lower()


@pytest.mark.parametrize("model_dir", MODELS, ids=NAMES)
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


@pytest.mark.parametrize("model_dir", MODELS, ids=NAMES)
def test_bundled_weights_load_as_float32(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    if loaded.training.get("stored_dtype") == "bfloat16":
        assert loaded.training["stored_relative_ppl_change"] <= 1e-3


MIXTURES = sorted(p for p in (REPO / "models").iterdir() if (p / "mixture.json").is_file())


@pytest.mark.parametrize("mixture_dir", MIXTURES, ids=[p.name for p in MIXTURES])
def test_a_bundled_mixture_holds_its_parts_and_records_how_it_was_made(mixture_dir: Path):
    from afp.mixtures import open_model

    data = json.loads((mixture_dir / "mixture.json").read_text())
    weights = [part["weight"] for part in data["parts"]]
    assert sum(weights) == pytest.approx(1.0, abs=1e-9) and all(0 < w < 1 for w in weights)
    for part in data["parts"]:  # relative paths inside the directory: it moves as one
        assert not Path(part["model"]).is_absolute()
        assert (mixture_dir / part["model"]).resolve().parent == mixture_dir.resolve()
    record = data["estimated"]
    assert record["weights"] == pytest.approx(weights) and record["data_licence"]
    note = (mixture_dir / "TRAINING.md").read_text()
    assert f"Command: `python -m bench.bundle_mixtures {mixture_dir.name}`" in note and "licence" in note.lower()
    for label, row in record["ppl"].items():
        assert label in note and f"**{row['mixture']:.2f}**" in note
        assert row["mixture"] < min(row["afp"], row["4-gram"])  # the mixture is the better model on each text
    loaded = open_model(mixture_dir)
    assert len(loaded.parts) == len(weights) and loaded.config.context_size is not None


@pytest.mark.parametrize("mixture_dir", MIXTURES, ids=[p.name for p in MIXTURES])
def test_a_bundled_mixture_reaches_its_recorded_perplexity(mixture_dir: Path):
    """The smallest recorded text, scored again through ``afp ppl``'s path."""
    from afp.mixtures import open_model, scorer_of
    from lm.scorer import text_score

    record = json.loads((mixture_dir / "mixture.json").read_text())["estimated"]
    label, row = min(record["ppl"].items(), key=lambda kv: kv[1]["tokens"])
    path = REPO.parent / "shared" / "data" / row["text"]["file"]
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    first, last = row["text"]["lines"]
    sentences = [line.split() for line in path.read_text(encoding="utf-8").splitlines()[first - 1:last]]
    sentences = [s for s in sentences if s]
    score = text_score(scorer_of(open_model(mixture_dir)), sentences).to_json()
    assert score["tokens"] == row["tokens"]
    assert score["ppl"] == pytest.approx(row["mixture"], rel=1e-4)


@pytest.mark.parametrize("mixture_dir", MIXTURES, ids=[p.name for p in MIXTURES])
def test_a_bundled_mixture_rescores_exactly(mixture_dir: Path, tmp_path, capsys):
    """Every hypothesis's ``lm_logprob`` from ``afp rescore`` is ``afp score``'s of its words with
    the same bundled mixture: the expansion is of the order its parts need."""
    from service.cli import main
    from tests.factories import write_text

    lattice = REPO / "examples" / "lattice.txt"
    assert main(["rescore", "--model", str(mixture_dir), "--json", "--nbest", "4", "--lm-weight", "1",
                 str(lattice)]) == 0
    hyps = [h for line in capsys.readouterr().out.splitlines() for h in json.loads(line)["nbest"]]
    assert len(hyps) >= 4
    text = write_text(tmp_path / "hyps.txt", [h["words"] for h in hyps])
    assert main(["score", "--model", str(mixture_dir), "--json", "--text", str(text)]) == 0
    scored = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    assert [h["lm_logprob"] for h in hyps] == pytest.approx(scored, abs=1e-4)
