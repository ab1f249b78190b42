from __future__ import annotations

import json

import pytest
import torch

from lm.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from lm.corpus import encode
from tests.factories import collate, CELL_CONFIGS, make_model, random_sentences, saved_model, tiny_vocab


@pytest.mark.parametrize("fields", [
    {"mode": "afp", "rho": 2, **CELL_CONFIGS["scrn-learned"]},
    {"mode": "afp", "rho": 3, **CELL_CONFIGS["lstm-3layers"]},
    {"mode": "exact", "cell": "gru", "tie_weights": True},
    {"arch": "ffnn", "order": 3, "tie_weights": True, "embedding": 8},
    {"mode": "afp", "rho": 2, "cell": "gru", "softmax": "adaptive", "cutoffs": (5, 10), "div_value": 2.0, "adaptive_input": True},
], ids=["scrn", "lstm-stack", "gru-tied", "ffnn-tied", "gru-adaptive-input"])
def test_round_trip_gives_identical_scores(tmp_path, fields):
    vocab = tiny_vocab()
    model = make_model(vocab, **fields)
    save_checkpoint(tmp_path / "m", model, vocab, {"epochs": 3})
    loaded = load_checkpoint(tmp_path / "m")
    batch = collate(encode(random_sentences(4), vocab).ids)
    with torch.no_grad():
        expected = model.token_logprobs(batch.inputs, batch.targets, batch.lengths)
        got = loaded.model.token_logprobs(batch.inputs, batch.targets, batch.lengths)
    assert torch.equal(expected, got)
    assert loaded.config == model.config and loaded.vocab == vocab and loaded.training == {"epochs": 3}
    if fields.get("tie_weights"):
        assert loaded.model.output_layer.weight is loaded.model.embedding.weight
    info = loaded.info()
    assert info["vocab_size"] == vocab.size and info["rho"] == fields.get("rho")


def test_weights_file_is_safetensors_not_pickle(tmp_path):
    directory = saved_model(tmp_path / "m")
    head = (directory / "model.safetensors").read_bytes()[:16]
    assert not head.startswith(b"\x80")  # a pickle protocol header
    header_len = int.from_bytes(head[:8], "little")
    header = json.loads((directory / "model.safetensors").read_bytes()[8:8 + header_len])
    assert "embedding.weight" in header


def test_missing_and_broken_checkpoints_name_the_file(tmp_path):
    with pytest.raises(CheckpointError, match="config.json: no such file"):
        load_checkpoint(tmp_path / "nothing")
    directory = saved_model(tmp_path / "m")
    (directory / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="model.safetensors: cannot load"):
        load_checkpoint(directory)
    (directory / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"config.json:1: invalid JSON"):
        load_checkpoint(directory)


def test_config_mismatch_is_reported(tmp_path):
    directory = saved_model(tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config["model"]["hidden"] = 16
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="does not match"):
        load_checkpoint(directory)
    config["model"]["hidden"] = 8
    config["model"]["flavour"] = "x"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown field.*flavour"):
        load_checkpoint(directory)
    config["model"].pop("flavour")
    config["vocab"]["words"] = config["vocab"]["words"][:-1]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="vocabulary has"):
        load_checkpoint(directory)


@pytest.mark.parametrize("fields, message", [
    ({"cell": "transformer"}, "cell: must be one of"),
    ({"mode": "afp"}, "rho: must be an integer"),
    ({"mode": "exact", "rho": 3}, "rho: only used"),
    ({"arch": "ffnn", "order": 1}, "order: must be an integer >= 2"),
    ({"cell": "scrn"}, "context_units"),
    ({"dropout": 1.5}, "dropout"),
    ({"hidden": 0}, "hidden"),
])
def test_bad_model_configs_raise_value_error(fields, message):
    from lm.config import ModelConfig

    with pytest.raises(ValueError, match=message):
        ModelConfig(vocab_size=10, **fields)


def test_tying_needs_matching_widths():
    from lm.config import ModelConfig
    from lm.model import build_model

    with pytest.raises(ValueError, match="tie_weights"):
        build_model(ModelConfig(vocab_size=10, cell="scrn", context_units=2, tie_weights=True))


def test_only_a_shape_mismatch_is_reported_as_a_config_mismatch(tmp_path, monkeypatch):
    directory = saved_model(tmp_path / "m")
    config = json.loads((directory / "config.json").read_text())
    config["model"]["hidden"] = 16
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"does not match .*embedding.weight is \[16, 8\] in the weights but "
                                              r"\[16, 16\] by the config"):
        load_checkpoint(directory)
    config["model"]["hidden"] = 8
    (directory / "config.json").write_text(json.dumps(config))

    def failing_load(*args, **kwargs):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr("lm.checkpoint.load_model", failing_load)
    with pytest.raises(RuntimeError, match="^CUDA error: out of memory$") as info:
        load_checkpoint(directory)
    assert not isinstance(info.value, CheckpointError)
