"""``--interpolate MODEL:W``: a mixture is one exact language model through every command."""

from __future__ import annotations

import json
import math

import pytest
import torch

import afp
from afp.mixtures import MixtureSpecError, parse_interpolate
from service.cli import main
from tests.factories import saved_model, write_text
from tests.lm.test_ngram import HAND


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    first = saved_model(root / "a", cell="gru", mode="afp", rho=2, seed=1)
    second = saved_model(root / "b", cell="lstm", mode="afp", rho=3, seed=2)
    (root / "G.arpa").write_text(HAND)
    return root, first, second


def test_the_mixture_is_the_probability_average_of_its_parts(models, tmp_path):
    root, first, second = models
    sentences = [["the", "cat", "sat"], ["a", "zebra"]]
    a = afp.load_model(first).score(sentences)
    b = afp.load_model(second).score(sentences)
    mixed = afp.load_model(first, interpolate=[(str(second), 0.3)]).score(sentences)
    for x, y, m in zip(a, b, mixed):
        expected = [math.log(0.7 * math.exp(p) + 0.3 * math.exp(q)) for p, q in zip(x.token_logprobs, y.token_logprobs)]
        assert m.token_logprobs == pytest.approx(expected, abs=1e-5)


def test_a_mixture_rescores_exactly_and_the_cli_agrees(models, tmp_path, capsys):
    root, first, second = models
    lattice = tmp_path / "lat.txt"
    lattice.write_text("u\n0 1 the 1,1,\n0 1 a 1,2,\n1 2 cat 1,1,\n2 3 sat 1,1,\n3\n\n")
    mix = ["--interpolate", f"{second}:0.25", "--interpolate", f"{root / 'G.arpa'}:0.25"]
    assert main(["rescore", "--model", str(first), *mix, "--json", "--nbest", "2", str(lattice)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    text = write_text(tmp_path / "hyps.txt", [h["words"] for h in row["nbest"]])
    assert main(["score", "--model", str(first), *mix, "--json", "--text", str(text)]) == 0
    scores = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    assert [h["lm_logprob"] for h in row["nbest"]] == pytest.approx(scores, abs=1e-4)
    assert main(["rescore", "--model", str(first), "--json", str(lattice)]) == 0
    plain = json.loads(capsys.readouterr().out.splitlines()[0])
    assert plain["best"]["lm_logprob"] != pytest.approx(row["best"]["lm_logprob"], abs=1e-3)  # the mixture counts


@pytest.mark.parametrize("text", ["models/x", "models/x:0", "models/x:1.5", "models/x:abc", ":0.5"])
def test_bad_interpolate_values_name_the_problem(text):
    with pytest.raises(MixtureSpecError, match="expected MODEL:WEIGHT with 0 < WEIGHT < 1"):
        parse_interpolate(text)


def test_weights_that_leave_nothing_for_the_model_are_an_error(models, capsys):
    root, first, second = models
    assert main(["ppl", "--model", str(first), "--interpolate", f"{second}:0.6", "--interpolate",
                 f"{second}:0.5", "--text", "-"]) == 2
    assert "must keep a weight above 0" in capsys.readouterr().err


def test_afp_mix_estimates_weights_and_writes_a_model_every_door_loads(tmp_path, capsys):
    """``afp mix`` finds the EM weights (the held-out likelihood is highest there: a nudge either
    way lowers it) and writes a directory that ``--model`` loads at every door, with the mixture's
    probabilities: every hypothesis's ``lm_logprob`` equals ``afp score``'s with it."""
    import json

    import afp
    from afp.mixtures import estimate_weights, open_model, scorer_of
    from lm.scorer import score_sentences
    from service.cli import main
    from tests.factories import patterned_sentences, random_sentences, write_text
    from tests.service.test_app import client_for

    text = write_text(tmp_path / "train.txt", patterned_sentences(300, seed=3))
    dev = write_text(tmp_path / "dev.txt", patterned_sentences(20, seed=4) + random_sentences(20, seed=4))
    arpa = tmp_path / "lm.ngram.arpa.gz"
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(arpa)]) == 0
    other = write_text(tmp_path / "other.txt", random_sentences(300, seed=5))  # what the trigram has not seen
    assert main(["ngram", "--text", str(other), "--order", "2", "--out", str(tmp_path / "bigram.arpa")]) == 0
    capsys.readouterr()
    assert main(["mix", "--text", str(dev), "--out", str(tmp_path / "mix"), str(tmp_path / "bigram.arpa"),
                 str(arpa)]) == 0
    report = json.loads(capsys.readouterr().out)
    weights = report["weights"]
    assert len(weights) == 2 and abs(sum(weights) - 1) < 1e-9 and 0.01 < weights[1] < 0.99
    assert report["mixture_ppl"] < min(report["part_ppl"])  # an interior optimum beats both parts
    loaded = open_model(tmp_path / "mix")
    parts = [scorer_of(p, precision="fp32") for p in loaded.parts]
    sentences = [line.split() for line in dev.read_text().splitlines()]
    best, _ = estimate_weights(parts, sentences)

    def likelihood(w: float) -> float:
        columns = [torch.cat(score_sentences(s, sentences)) for s in parts]
        return float(torch.logsumexp(torch.stack([columns[0] + math.log(1 - w), columns[1] + math.log(w)]), 0).sum())

    assert best == pytest.approx(weights, abs=1e-6)
    assert likelihood(best[1]) >= max(likelihood(best[1] * 0.9), likelihood(min(best[1] * 1.1, 0.999)))
    lattice = tmp_path / "lat.txt"
    lattice.write_text("u1\n0 1 the 1,10,\n0 1 a 1.5,9,\n1 2 cat 0.5,8,\n1 2 dog 0.5,8.2,\n2 3 sat 1,20,\n3\n\n")
    assert main(["rescore", "--model", str(tmp_path / "mix"), "--json", "--nbest", "4", "--lm-weight", "1",
                 str(lattice)]) == 0
    hyps = [h for line in capsys.readouterr().out.splitlines() for h in json.loads(line)["nbest"]]
    sentences_file = write_text(tmp_path / "hyps.txt", [h["words"] for h in hyps])
    assert main(["score", "--model", str(tmp_path / "mix"), "--text", str(sentences_file), "--json"]) == 0
    scored = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    assert [h["lm_logprob"] for h in hyps] == pytest.approx(scored, abs=1e-4)
    assert main(["info", "--model", str(tmp_path / "mix"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"].startswith("mixture of")
    with client_for(tmp_path / "mix") as client:
        r = client.post("/v1/rescore", json={"lattice": lattice.read_text(), "nbest": 4, "lm_weight": 1})
        assert [h["lm_logprob"] for h in r.json()["results"][0]["nbest"]] == pytest.approx(scored, abs=1e-4)
        assert client.get("/v1/models").status_code == 200
    api = afp.load_model(tmp_path / "mix").rescore(str(lattice), nbest=4, lm_weight=1)
    assert [h.lm_logprob for h in api[0][0].nbest] == pytest.approx(scored, abs=1e-4)


@pytest.mark.parametrize("penalties, expected", [((-9.3, 0.0), -9.3), ((-9.3, -9.3), -9.3), ((0.0, 0.0), 0.0),
                                                 ((-9.3, -2.0), 0.0)])
def test_a_mixture_keeps_its_parts_unknown_word_penalty_when_they_agree(tmp_path, penalties, expected):
    """An n-gram part records no unknown types (penalty 0); the AFP part built on the same text
    does: the mixture's ``<unk>`` stands for the same types, so it keeps that penalty; parts that
    disagree leave it at 0."""
    from types import SimpleNamespace

    from afp.mixtures import LoadedMixture

    parts = tuple(SimpleNamespace(default_unk_penalty=p) for p in penalties)
    mixture = LoadedMixture(parts=parts, weights=(0.5, 0.5), path=tmp_path)
    assert mixture.default_unk_penalty == pytest.approx(expected)


def test_afp_mix_refuses_a_mixture_as_a_part_and_names_its_parts(models, tmp_path, capsys, monkeypatch):
    """A mixture directory given as a part would write a mixture that cannot load: refused before
    anything is written (``afp mix``: before any model is loaded or any weight estimated), in one
    line that names it and suggests its own parts."""
    from afp.mixtures import check_parts, write_mixture

    root, first, second = models
    inner = write_mixture(tmp_path / "inner", [first, root / "G.arpa"], [0.6, 0.4])
    with pytest.raises(MixtureSpecError, match="cannot be a part of a mixture") as caught:
        write_mixture(tmp_path / "outer", [inner, second], [0.5, 0.5])
    assert f"give its parts instead: {first} {root / 'G.arpa'}" in str(caught.value)
    assert not (tmp_path / "outer").exists()
    check_parts([first, root / "G.arpa"])  # plain models pass
    dev = write_text(tmp_path / "dev.txt", [["the", "cat", "sat"], ["a", "zebra"]])

    def not_reached(*args, **kwargs):
        raise AssertionError("afp mix loaded or scored a model before refusing a mixture as a part")

    monkeypatch.setattr("afp.mixtures.open_model", not_reached)
    monkeypatch.setattr("afp.mixtures.estimate_weights", not_reached)
    assert main(["mix", "--text", str(dev), "--out", str(tmp_path / "outer"), str(second), str(inner)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(inner) in err and f"instead: {first} {root / 'G.arpa'}" in err
    assert not (tmp_path / "outer" / "mixture.json").exists()
