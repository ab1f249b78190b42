"""Every bundled model loads, is exact-rescoring capable, records its data's licence, and its
recorded perplexities are what scoring the recorded text with the shipped files gives again.

Perplexities are recomputed through ``afp ppl``'s path (:func:`lm.scorer.text_score`) on the
smallest text each model has a recorded number for: a standalone model's validation file, a
mixture's smallest row of ``mixture.json``'s ``estimated.ppl`` (each part scored on its own, the
mixture mixed here from the parts' token probabilities and the recorded weights). A recorded
path that does not exist under ``../shared/data`` fails; only a checkout without that directory
skips (:func:`tests.factories.shared_data_file`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from lm.checkpoint import load_checkpoint
from tests.factories import shared_data_file

REPO = Path(__file__).resolve().parents[2]
#: every bundled neural model: a model directory of models/, or the AFP part of a bundled mixture
MODELS = sorted(p for p in [*(REPO / "models").iterdir(), *(REPO / "models").glob("*/*")]
                if (p / "config.json").is_file())
NAMES = [str(p.relative_to(REPO / "models")) for p in MODELS]
MIXTURES = sorted(p for p in (REPO / "models").iterdir() if (p / "mixture.json").is_file())
STANDALONE = [p for p in MODELS if p.parent == REPO / "models"]

def lines_of(relative: str, lines: tuple[int, int | None] = (1, None)) -> list[list[str]]:
    """The non-empty lines ``first..last`` (1-based, inclusive; None: to the end) of a file under
    ../shared/data, split into words (what ``afp ppl --text`` reads)."""
    path = shared_data_file(*Path(relative).parts)
    first, last = lines
    text = path.read_text(encoding="utf-8").splitlines()[first - 1:last]
    return [s for s in (line.split() for line in text) if s]


def under_shared_data(recorded: str) -> str:
    """A recorded path (absolute ``.../shared/data/X`` or ``data/X`` relative to ../shared) as a
    path relative to ../shared/data."""
    parts = Path(recorded).parts
    if "shared" in parts:
        parts = parts[parts.index("shared") + 1:]
    assert parts[0] == "data", f"{recorded} is not under ../shared/data"
    return str(Path(*parts[1:]))


def token_logprobs(model_dir: Path, sentences: list[list[str]]) -> tuple[np.ndarray, dict]:
    """Every token's natural-log probability (words and one ``</s>`` per sentence), float64, and
    ``afp ppl``'s summary, from :func:`lm.scorer.text_score` of ``model_dir``'s scorer."""
    from afp.mixtures import open_model, scorer_of
    from lm.scorer import text_score

    values: list[np.ndarray] = []
    summary = text_score(scorer_of(open_model(model_dir)), sentences,
                         on_sentence=lambda _, v: values.append(v.double().cpu().numpy())).to_json()
    return np.concatenate(values), summary


def two_decimals(note: str, pattern: str) -> float:
    found = re.search(pattern, note)
    assert found, f"no match of {pattern!r} in the note"
    return float(found.group(1))


def test_the_default_model_is_bundled():
    from afp.defaults import default_model_dir
    from afp.mixtures import open_model

    assert default_model_dir().name == "conversational"
    assert open_model(default_model_dir()).config.context_size is not None


@pytest.mark.parametrize("model_dir", MODELS, ids=NAMES)
def test_bundled_model_records_how_it_was_trained_and_its_data_licence(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert loaded.config.context_size is not None, "a bundled model must rescore lattices exactly (AFP or n-gram)"
    note = (model_dir / "TRAINING.md").read_text()
    assert re.search(r"Command: `(python -m bench\.train_bundled [\w-]+|bash bench/books_large\.sh)`", note)
    licence = loaded.training.get("data_licence")
    assert licence, f"{model_dir.name}: no data_licence in its training record"
    assert f"Data licence: {licence}" in note


#: the PTB validation set is 73,760 tokens through a rho-6 model, its only recorded text: ~40 s on one core
SLOW = {"ptb"}


@pytest.mark.parametrize("model_dir", [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else [])
                                       for p in STANDALONE])
def test_a_standalone_model_reaches_its_recorded_validation_perplexity(model_dir: Path):
    """The validation file of the record, scored again: the recorded best perplexity (to 1e-4;
    the training loop's own evaluation differs from ``afp ppl``'s path in summation order only)
    and the note's two-decimal number."""
    loaded = load_checkpoint(model_dir)
    if "valid_sources" in loaded.training:  # paths under ../shared, concatenated in this order
        sentences = [s for name in loaded.training["valid_sources"] for s in lines_of(under_shared_data(name))]
    else:
        sentences = lines_of(under_shared_data(loaded.training["valid"]))
    _, score = token_logprobs(model_dir, sentences)
    assert score["ppl"] == pytest.approx(loaded.training["best_valid_ppl"], rel=1e-4)
    note = (model_dir / "TRAINING.md").read_text()
    printed = two_decimals(note, r"Best validation perplexity (\d+\.\d\d)")
    assert printed == pytest.approx(score["ppl"], abs=0.005 + 1e-9)


@pytest.mark.parametrize("model_dir", MODELS, ids=NAMES)
def test_bundled_weights_load_as_float32(model_dir: Path):
    loaded = load_checkpoint(model_dir)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    if loaded.training.get("stored_dtype") == "bfloat16":
        assert loaded.training["stored_relative_ppl_change"] <= 1e-3


def part_label(part_dir: Path) -> str:
    """The column of ``estimated.ppl`` rows that holds a part's perplexity: ``afp`` for a model
    directory, ``N-gram`` for an n-gram store of order N."""
    if (part_dir / "config.json").is_file():
        return "afp"
    return f"{json.loads((part_dir / 'ngram.json').read_text())['order']}-gram"


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
    assert f"Command: `python -m bench.bundle_mixtures {mixture_dir.name}`" in note
    assert f"Data licence: {record['data_licence']}" in note  # the licence of every part's data
    for part in data["parts"]:  # a neural part's own record names the same licence
        config = mixture_dir / part["model"] / "config.json"
        if config.is_file():
            assert json.loads(config.read_text())["training"]["data_licence"] == record["data_licence"]
    for label, row in record["ppl"].items():
        assert label in note and f"**{row['mixture']:.2f}**" in note
        assert row["mixture"] < min(row["afp"], row["4-gram"])  # the mixture is the better model on each text
    loaded = open_model(mixture_dir)
    assert len(loaded.parts) == len(weights) and loaded.config.context_size is not None


@pytest.mark.parametrize("mixture_dir", MIXTURES, ids=[p.name for p in MIXTURES])
def test_a_bundled_mixture_and_its_parts_reach_their_recorded_perplexities(mixture_dir: Path):
    """The smallest recorded text, scored again by each part through ``afp ppl``'s path: each
    part's recorded perplexity, and the mixture's, computed here from the parts' token
    probabilities and the weights (``ln sum_k w_k p_k`` per token), at the record's precision
    (1e-4) and at the note's (two decimals); the mixture's own scorer gives the same mix."""
    from afp.mixtures import open_model, scorer_of
    from lm.scorer import text_score

    data = json.loads((mixture_dir / "mixture.json").read_text())
    label, row = min(data["estimated"]["ppl"].items(), key=lambda kv: kv[1]["tokens"])
    sentences = lines_of(row["text"]["file"], tuple(row["text"]["lines"]))
    note = (mixture_dir / "TRAINING.md").read_text().splitlines()
    header = next(line for line in note if line.startswith("| text |"))
    columns = [c.strip().removesuffix(" part").lower() for c in header.strip("|").split("|")[1:]]  # afp, 4-gram, ...
    values_row = next(line for line in note if line.startswith(f"| {label} |"))
    printed = dict(zip(columns, (float(x.strip("* ")) for x in values_row.strip("|").split("|")[1:])))
    logs = []
    for part in data["parts"]:
        values, score = token_logprobs(mixture_dir / part["model"], sentences)
        assert (score["tokens"], score["oov"]) == (row["tokens"], row["oov"])
        column = part_label(mixture_dir / part["model"])
        assert score["ppl"] == pytest.approx(row[column], rel=1e-4), part["model"]
        assert printed[column] == pytest.approx(score["ppl"], abs=0.005 + 1e-9), part["model"]
        logs.append(math.log(part["weight"]) + values)
    mixed = np.logaddexp.reduce(np.stack(logs), axis=0)
    ppl = math.exp(-mixed.sum() / mixed.shape[0])
    assert ppl == pytest.approx(row["mixture"], rel=1e-4) and printed["mixture"] == pytest.approx(ppl, abs=0.005 + 1e-9)
    assert ppl < min(math.exp(-(x - math.log(p["weight"])).mean()) for x, p in zip(logs, data["parts"]))
    few = sentences[:200]  # the mixture's own scorer: the same token mix (a short prefix: the parts cost)
    mine = mixed[: sum(len(s) + 1 for s in few)].sum()
    assert text_score(scorer_of(open_model(mixture_dir)), few).logprob == pytest.approx(mine, rel=1e-5)


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
