"""Words in another case than the model's (lattices.case): looked up in the model's case by
default, said once, kept as written in the results; off with --keep-case / match_case false. And
WER compared without regard to case when hypotheses and references differ in case (afp.wer)."""

from __future__ import annotations

import json

import pytest
import torch

from afp.wer import case_differs, score_transcripts, word_errors
from lattices.case import model_spellings, other_case_forms
from lattices.formats import read_lattices
from lattices.rescore import rescore
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from service.cli import main
from tests.factories import make_model, replacing_options, saved_model, tiny_vocab
from tests.service.test_app import client_for

LOWER = "u\n0 1 the 1,10,\n0 1 a 1.2,10,\n1 2 cat 1,10,\n1 2 zork 0.2,10,\n2\n\n"
UPPER = LOWER.replace("the", "THE").replace(" a ", " A ").replace("cat", "CAT").replace("zork", "ZORK")


def scorer() -> LMScorer:
    vocab = tiny_vocab()  # lower case: the, a, cat...
    model = make_model(vocab, cell="gru", mode="afp", rho=2)
    return LMScorer(LoadedModel(model.config, vocab, model))


def test_other_case_forms():
    assert other_case_forms("the") == ["THE", "The"]
    assert other_case_forms("THE") == ["the", "The"]
    assert other_case_forms("1984") == []


def test_model_spellings_map_only_unknown_words():
    known = lambda words: torch.tensor([w in {"the", "cat", "THE"} for w in words])  # noqa: E731
    spelled, mapped = model_spellings(["THE", "CAT", "ZORK", "cat"], known)
    assert spelled == ["THE", "cat", "ZORK", "cat"]  # THE is known as written: kept; ZORK has no known form
    assert mapped == [("CAT", "cat")]
    assert model_spellings(["CAT"], known, match_case=False) == (["CAT"], [])


def test_upper_case_input_scores_as_the_lower_case_input_and_keeps_its_spellings():
    lm = scorer()
    (lower,) = rescore(read_lattices(LOWER, "kaldi")[0], lm, replacing_options())
    (upper,) = rescore(read_lattices(UPPER, "kaldi")[0], lm, replacing_options())
    assert upper.best.words == [w.upper() for w in lower.best.words]
    assert upper.best.score == pytest.approx(lower.best.score, abs=1e-9)
    assert upper.best.lm_logprob == pytest.approx(lower.best.lm_logprob, abs=1e-9)
    assert upper.stats["recased"] == 3 and upper.stats["oov"] == lower.stats["oov"] == 1  # ZORK stays unknown
    (kept,) = rescore(read_lattices(UPPER, "kaldi")[0], lm, replacing_options(match_case=False))
    assert kept.stats["recased"] == 0 and kept.stats["oov"] == 4
    assert kept.best.lm_logprob != pytest.approx(lower.best.lm_logprob)


def test_every_door_says_so_once_and_can_turn_it_off(tmp_path, capsys):
    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    path = tmp_path / "lat.txt"
    path.write_text(UPPER + UPPER.replace("u\n", "v\n"))
    assert main(["rescore", "--model", str(model), "--json", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("in another case than the model's") == 1  # two lattices, said once
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert all(r["recased"] == 3 for r in rows) and rows[0]["best"]["words"][0].isupper()
    assert main(["rescore", "--model", str(model), "--keep-case", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    assert "another case than the model's" not in captured.err
    assert json.loads(captured.out.splitlines()[0])["recased"] == 0
    with client_for(model) as client:
        on = client.post("/v1/rescore", json={"lattice": path.read_text()}).json()
        off = client.post("/v1/rescore", json={"lattice": path.read_text(), "match_case": False}).json()
    assert sum("another case" in w for w in on["warnings"]) == 1 and on["results"][0]["recased"] == 3
    assert not any("than the model's" in w for w in off["warnings"]) and off["results"][0]["recased"] == 0
    assert any("known in another case" in w for w in off["warnings"])  # the unknown-word hint instead


def test_wer_ignores_case_only_when_the_two_sides_differ():
    assert word_errors(["THE", "CAT"], ["the", "cat"]).errors == 2
    assert word_errors(["THE", "CAT"], ["the", "cat"], ignore_case=True).errors == 0
    assert case_differs([["THE", "CAT", "SAT"]], [["the", "cat"]])
    assert not case_differs([["The", "cat"]], [["the", "cat"]])  # mostly the same case: exact comparison
    refs = {"a": ["THE", "CAT"], "b": ["A", "DOG"]}
    scored = score_transcripts(refs, {"a": ["the", "cat"], "b": ["a", "cat"]})
    assert scored.ignore_case and scored.total.errors == 1
    assert score_transcripts(refs, {"a": ["THE", "CAT"], "b": ["a", "DOG"]}).total.errors == 1  # same case: exact


def test_afp_wer_says_it_ignored_case(tmp_path, capsys):
    (tmp_path / "ref.trn").write_text("THE CAT SAT (a)\n")
    (tmp_path / "hyp.trn").write_text("the cat sat (a)\n")
    assert main(["wer", "--refs", str(tmp_path / "ref.trn"), str(tmp_path / "hyp.trn")]) == 0
    out = capsys.readouterr().out
    assert "without regard to case" in out and " 0.00%" in out
