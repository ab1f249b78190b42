"""The ``afp`` command line contract: info, ppl, score (and their errors)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lm.checkpoint import load_checkpoint
from lm.corpus import encode
from lm.evaluate import score_corpus
from service.cli import main
from afp.defaults import default_model_dir
from tests.factories import random_sentences, saved_model, write_text

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def model_dir(tmp_path):
    return saved_model(tmp_path / "model", cell="lstm", mode="afp", rho=2)


def run_json(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def test_info_json_has_the_contract_fields(capsys, model_dir):
    (info,) = run_json(capsys, ["info", "--model", str(model_dir), "--json"])
    assert info["cell"] == "lstm" and info["layers"] == 1 and info["hidden"] == 8 and info["rho"] == 2
    assert info["vocab_size"] == load_checkpoint(model_dir).vocab.size


def test_ppl_json_counts_words_plus_one_end_per_sentence(capsys, tmp_path, model_dir):
    sentences = [["the", "cat", "sat"], ["zebra", "on", "the", "mat"], ["a"]]
    text = write_text(tmp_path / "t.txt", sentences)
    (result,) = run_json(capsys, ["ppl", "--model", str(model_dir), "--text", str(text), "--json"])
    assert result["tokens"] == 3 + 4 + 1 + 3 and result["sentences"] == 3 and result["oov"] == 1
    loaded = load_checkpoint(model_dir)
    expected = score_corpus(loaded.model, encode(sentences, loaded.vocab))
    assert result["ppl"] == pytest.approx(expected.ppl, rel=1e-6)  # float32 sums: kernels differ by CPU
    assert 1.0 < result["ppl"] < loaded.vocab.size * 10


def test_score_json_one_line_per_sentence_consistent_with_ppl(capsys, tmp_path, model_dir):
    sentences = random_sentences(7, seed=9)
    text = write_text(tmp_path / "t.txt", sentences)
    rows = run_json(capsys, ["score", "--model", str(model_dir), "--text", str(text), "--json"])
    assert [r["words"] for r in rows] == sentences
    for row in rows:
        assert len(row["token_logprobs"]) == len(row["words"]) + 1
        assert row["logprob"] == pytest.approx(sum(row["token_logprobs"]))
        assert all(v < 0 for v in row["token_logprobs"])
    (ppl,) = run_json(capsys, ["ppl", "--model", str(model_dir), "--text", str(text), "--json"])
    total = sum(r["logprob"] for r in rows)
    assert math.exp(-total / ppl["tokens"]) == pytest.approx(ppl["ppl"], rel=1e-9)


def test_sentences_are_independent(capsys, tmp_path, model_dir):
    alone = run_json(capsys, ["score", "--model", str(model_dir), "--text",
                              str(write_text(tmp_path / "a.txt", [["the", "dog", "ran"]])), "--json"])
    mixed = run_json(capsys, ["score", "--model", str(model_dir), "--text",
                              str(write_text(tmp_path / "b.txt", [["a", "big", "cat"], ["the", "dog", "ran"]])),
                              "--json"])
    assert mixed[1]["token_logprobs"] == pytest.approx(alone[0]["token_logprobs"], abs=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["ppl", "--model", "/nonexistent/model", "--text", str(REPO / "examples" / "conversation.txt")],
     "config.json: no such file"),
    (["ppl", "--text", "/nonexistent/text.txt"], "text.txt: no such file"),
    (["info", "--device", "cuda:7"], "CUDA"),
])
def test_errors_are_one_line_and_exit_2(capsys, argv, message):
    import torch

    if "cuda:7" in argv and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("afp: error:") and message in err and "Traceback" not in err


def test_bundled_default_model_is_used_without_model_flag(capsys):
    assert any((default_model_dir() / f).is_file() for f in ("config.json", "mixture.json")), \
        "the bundled default model must be in the repo"
    (info,) = run_json(capsys, ["info", "--json"])
    assert info["rho"] is not None and info["rho"] >= 1 and info["vocab_size"] > 1000
    example = REPO / "examples" / "conversation.txt"
    (result,) = run_json(capsys, ["ppl", "--text", str(example), "--json"])
    assert result["sentences"] == len(example.read_text().splitlines())
    assert result["ppl"] < 1000  # a trained in-domain model, not a random one (that is ~vocab size)


def test_console_script_runs_from_stdin():
    afp = Path(sys.executable).parent / "afp"
    command = [str(afp)] if afp.exists() else [sys.executable, "-m", "service.cli"]
    done = subprocess.run([*command, "score", "--text", "-", "--json"], input="YEAH I THINK SO\n", text=True,
                          capture_output=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["words"] == ["YEAH", "I", "THINK", "SO"] and len(row["token_logprobs"]) == 5


def test_every_command_that_loads_a_model_runs_on_a_gpu_when_there_is_one(monkeypatch):
    """Every door's default device (lm.device.DEFAULT_DEVICE) resolves to CUDA when there is a GPU
    and to the CPU otherwise, and a command's default scoring precision follows it (bf16 on CUDA,
    fp32 on a CPU)."""
    from lm.device import DEFAULT_DEVICE, resolve_device
    from lm.output import resolve_score_precision
    from service.cli import build_parser

    parser = build_parser()
    for cuda in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        for argv in (["info"], ["ppl", "--text", "x"], ["score", "--text", "x"], ["rescore", "x"],
                     ["tune", "--refs", "r", "x"], ["rescore-cuts", "--cuts", "c", "--out", "o"], ["serve"]):
            args = parser.parse_args(argv)
            device = resolve_device(args.device or DEFAULT_DEVICE)
            assert device.type == ("cuda" if cuda else "cpu"), argv
            assert resolve_score_precision(args.score_precision or "auto", device) == ("bf16" if cuda else "fp32")


def test_serve_refuses_a_bad_weights_file_or_a_missing_old_lm_in_one_line(tmp_path, capsys):
    from service.cli import main

    bad = tmp_path / "w.json"
    bad.write_text('{"lm_weight": "x"}')
    assert main(["serve", "--weights", str(bad), "--port", "1"]) == 2
    assert "w.json: field lm_weight: expected a finite number" in capsys.readouterr().err
    assert main(["serve", "--old-lm", str(tmp_path / "none.arpa"), "--port", "1"]) == 2
    assert "none.arpa: no such file" in capsys.readouterr().err
