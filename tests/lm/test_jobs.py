"""``afp prepare`` and ``afp train`` as library calls (:mod:`lm.jobs`): the summaries, and the
options layered as the command layers them (saved run < config file < flags; defaults last)."""

from __future__ import annotations

import json

import pytest

from lm.config import PrepareConfig
from lm.jobs import TRAIN_MODEL_DEFAULTS, TrainJob, TrainJobError, run_prepare, run_train_job, saved_run_options, \
    train_configs
from tests.factories import patterned_sentences, write_text


@pytest.fixture()
def corpus(tmp_path):
    return write_text(tmp_path / "train.txt", patterned_sentences(40, seed=1))


def test_prepare_summarises_every_split(tmp_path, corpus):
    valid = write_text(tmp_path / "valid.txt", [["the", "cat", "sat"], ["zebra"]])
    summary = run_prepare(PrepareConfig(text=(str(corpus),), out=str(tmp_path / "data"), valid=str(valid)))
    words = sum(len(s) for s in patterned_sentences(40, seed=1))
    assert summary["out"] == str(tmp_path / "data") and summary["vocab_size"] > 4
    assert summary["train"] == {"sentences": 40, "words": words, "tokens": words + 40, "oov": 0, "shards": 1}
    assert summary["valid"]["sentences"] == 2 and summary["valid"]["words"] == 4


def test_a_new_recurrent_model_gets_the_command_defaults_where_nothing_is_said(tmp_path, corpus):
    model, cfg = train_configs(TrainJob(out=str(tmp_path / "run"), train={"train": str(corpus), "epochs": None}))
    assert {k: getattr(model, k) for k in TRAIN_MODEL_DEFAULTS} == TRAIN_MODEL_DEFAULTS
    assert cfg.train == str(corpus) and cfg.epochs == 20  # None: not given, the TrainConfig default
    exact, _ = train_configs(TrainJob(out="x", model={"mode": "exact"}, train={"train": "t"}))
    assert exact.mode == "exact" and exact.rho is None and exact.cell == "gru"
    rho_only, _ = train_configs(TrainJob(out="x", model={"rho": 2, "cell": "lstm"}, train={"train": "t"}))
    assert (rho_only.mode, rho_only.rho, rho_only.cell) == ("afp", 2, "lstm")


def test_flags_override_the_config_file_and_bad_options_are_named(tmp_path):
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"model": {"cell": "elman", "hidden": 12, "rho": 2}, "train": {"train": "t", "lr": 0.5}}))
    model, cfg = train_configs(TrainJob(out="x", config=str(config), model={"hidden": 16}, train={"lr": 0.1}))
    assert (model.cell, model.hidden, model.rho, model.mode) == ("elman", 16, 2, "afp") and cfg.lr == 0.1
    for text, message in (('{"model": {}, "other": 1}', r"unknown section\(s\) \['other'\]"),
                          ("[1]", "expected a JSON object"), ("{", "invalid JSON")):
        config.write_text(text)
        with pytest.raises(TrainJobError, match=message):
            train_configs(TrainJob(out="x", config=str(config)))
    with pytest.raises(TrainJobError, match="^--mode afp needs --rho$"):
        train_configs(TrainJob(out="x", model={"arch": "ffnn", "mode": "afp"}, train={"train": "t"}))
    with pytest.raises(TrainJobError, match="^give --train FILE or --data DIR"):
        train_configs(TrainJob(out="x"))
    with pytest.raises(ValueError, match="^hidden: must be an integer >= 1, got -1$"):
        train_configs(TrainJob(out="x", model={"hidden": -1}, train={"train": "t"}))


def test_a_resumed_run_reads_its_own_options(tmp_path, corpus):
    out = str(tmp_path / "run")
    assert saved_run_options(out) is None
    job = TrainJob(out=out, model={"hidden": 8, "softmax": "full", "rho": 2},
                   train={"train": str(corpus), "epochs": 1, "device": "cpu", "max_steps": 1},
                   record={"command": "afp train ..."})
    epochs = []
    summary = run_train_job(job, on_epoch=epochs.append)
    assert summary is not None and summary["out"] == out and summary["steps"] == 1 and epochs == []
    model, train = saved_run_options(out)
    assert model["hidden"] == 8 and model["rho"] == 2 and "vocab_size" not in model
    assert train["train"] == str(corpus) and "max_steps" not in train  # a pause, not an option of the run
    resumed, cfg = train_configs(TrainJob(out=out, resume=True, train={"epochs": 2}))
    assert (resumed.hidden, resumed.rho, resumed.softmax) == (8, 2, "full") and cfg.epochs == 2
    assert cfg.train == str(corpus) and cfg.max_steps is None
