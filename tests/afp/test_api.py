"""The Python API (``afp``) gives the command line's numbers (the README's and the docs' examples run
in tests/test_docs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import afp
from service.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_the_api_gives_the_cli_numbers(capsys):
    model = afp.load_model()
    assert main(["rescore", "--json", "--nbest", "2", "--lm-weight", "0.5", "--unk-penalty", "-2",
                 str(REPO / "examples" / "lattice.txt")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    results = model.rescore(str(REPO / "examples" / "lattice.txt"), nbest=2, lm_weight=0.5, unk_penalty=-2)
    assert [r[0].to_json()["best"]["words"] for r in results] == [row["best"]["words"] for row in rows]
    assert [r[0].best.score for r in results] == pytest.approx([row["best"]["score"] for row in rows], abs=1e-9)
    assert main(["score", "--json", "--text", str(REPO / "examples" / "conversation.txt")]) == 0
    cli = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    lines = (REPO / "examples" / "conversation.txt").read_text().splitlines()
    assert [s.logprob for s in model.score(lines)] == pytest.approx(cli, abs=1e-9)


def test_bad_options_and_failed_lattices_are_clear_errors():
    model = afp.load_model()
    with pytest.raises(TypeError, match="unknown rescoring option"):
        model.rescore(str(REPO / "examples" / "lattice.txt"), lm_wieght=0.5)
    with pytest.raises(afp.RescoreFailed, match="exceeds the budget") as err:
        model.rescore(str(REPO / "examples" / "lattice.txt"), max_arcs=3)
    assert err.value.key == "utt-example-1"


def test_the_api_refuses_and_warns_as_the_command_line_does(tmp_path, capsys):
    """One behaviour at every door: untuned weights said once per call (a UserWarning, the words
    of afp rescore's warning), tuned or given weights not; an exact RNN refused up front with the
    command line's message."""
    import warnings

    from tests.factories import saved_model

    model = afp.load_model()
    lattice = str(REPO / "examples" / "lattice.txt")  # two lattices: one warning
    with pytest.warns(UserWarning, match=r"^the weights are untuned \(the first pass's LM 'graph' at 1") as caught:
        model.rescore(lattice)
    assert len([w for w in caught if "untuned" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.rescore(lattice, lm_weight=0.5)
    exact = afp.load_model(saved_model(tmp_path / "exact", cell="gru", mode="exact", rho=None), device="cpu")
    with pytest.raises(ValueError, match="an exact \\(unbounded\\) RNN cannot rescore lattices exactly; use an AFP-rho") as err:
        exact.rescore(lattice)
    capsys.readouterr()
    assert main(["rescore", "--model", str(tmp_path / "exact"), lattice]) == 2
    assert capsys.readouterr().err == f"afp: error: {err.value}\n"
