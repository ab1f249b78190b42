"""``--interpolate MODEL:W``: a mixture is one exact language model through every command."""

from __future__ import annotations

import json
import math

import pytest

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
