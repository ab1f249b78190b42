from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lm.checkpoint import load_checkpoint
from lm.config import ModelConfig, TrainConfig
from lm.train import train
from tests.factories import free_port, patterned_sentences, write_text

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def corpus(tmp_path):
    return (write_text(tmp_path / "train.txt", patterned_sentences(300, seed=1)),
            write_text(tmp_path / "valid.txt", patterned_sentences(60, seed=2)))


def config(corpus, **changes):
    train_path, valid_path = corpus
    return TrainConfig(train=str(train_path), valid=str(valid_path), epochs=3, batch_size=10, lr=1e-2, seed=3,
                       **changes)


@pytest.mark.parametrize("fields, detach", [({"mode": "afp", "rho": 2, "hidden": 16}, False),
                                            ({"mode": "afp", "rho": 3, "hidden": 16}, True),
                                            ({"mode": "exact", "cell": "lstm", "hidden": 16}, False),
                                            ({"arch": "ffnn", "order": 3, "hidden": 16}, False)])
def test_training_learns_and_keeps_best_checkpoint(tmp_path, corpus, fields, detach):
    result = train(ModelConfig(**fields), config(corpus, detach=detach), tmp_path / "run", progress=False)
    ppl = [m["valid_ppl"] for m in result.metrics]
    assert len(ppl) == 3
    assert ppl[-1] < ppl[0] and min(ppl) < 6.0  # the grammar has ~16 words; a learnt model does far better
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.training["best_valid_ppl"] == pytest.approx(min(ppl))
    assert loaded.training["train_config"]["detach"] is detach


def test_resume_continues_exactly(tmp_path, corpus):
    fields = ModelConfig(mode="afp", rho=2, hidden=12, cell="gru")
    straight = train(fields, config(corpus, lr_decay=0.5), tmp_path / "a", progress=False)
    train(fields, config(corpus, lr_decay=0.5).replace(epochs=2), tmp_path / "b", progress=False)
    resumed = train(fields, config(corpus, lr_decay=0.5), tmp_path / "b", resume=True, progress=False)
    assert [m["valid_ppl"] for m in resumed.metrics] == pytest.approx([m["valid_ppl"] for m in straight.metrics],
                                                                      rel=1e-9)
    with pytest.raises(ValueError, match="training option.*lr"):
        train(fields, config(corpus, lr_decay=0.5).replace(lr=0.5), tmp_path / "b", resume=True, progress=False)


def test_torchrun_ddp_two_cpu_processes(tmp_path, corpus):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
               "-m", "service.cli", "train", "--train", str(corpus[0]), "--valid", str(corpus[1]),
               "--out", str(tmp_path / "ddp"), "--rho", "2", "--hidden", "16", "--epochs", "2",
               "--batch-size", "10", "--lr", "0.01", "--device", "cpu"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count('"best_valid_ppl"') == 1  # rank 0 reports, rank 1 stays quiet
    metrics = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [m["world_size"] for m in metrics] == [2, 2]
    # 300 sentences / 10 = 30 batches, 15 per rank: every training token was seen once, summed over ranks
    assert metrics[0]["train_tokens"] == sum(len(s) + 1 for s in patterned_sentences(300, seed=1))
    assert metrics[1]["valid_ppl"] < metrics[0]["valid_ppl"]
    loaded = load_checkpoint(tmp_path / "ddp")
    assert loaded.config.rho == 2 and loaded.config.mode == "afp"


def test_cli_train_with_json_config_and_flag_override(tmp_path, corpus):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"model": {"cell": "elman", "hidden": 12, "mode": "afp", "rho": 2},
                               "train": {"train": str(corpus[0]), "valid": str(corpus[1]), "epochs": 1}}))
    from service.cli import main

    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--hidden", "10"]) == 0
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.config.hidden == 10 and loaded.config.rho == 2
    assert loaded.training["command"].startswith("afp train --config")


def test_cli_train_rejects_bad_options(tmp_path, corpus, capsys):
    from service.cli import main

    assert main(["train", "--train", str(corpus[0]), "--out", str(tmp_path / "x"), "--mode", "afp", "--rho", "0"]) == 2
    assert "rho: must be an integer >= 1" in capsys.readouterr().err
    assert main(["train", "--train", str(corpus[0]), "--out", str(tmp_path / "x"), "--cell", "qrnn"]) == 2
    assert "cell: must be one of" in capsys.readouterr().err
    assert main(["train", "--train", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "x")]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err
    assert not (tmp_path / "x" / "config.json").exists()


def test_bf16_autocast_trains_as_well_as_fp32_and_keeps_float32_weights(tmp_path, corpus):
    fields = ModelConfig(mode="afp", rho=2, hidden=16)
    fp32 = train(fields, config(corpus), tmp_path / "fp32", progress=False)
    bf16 = train(fields, config(corpus, precision="bf16"), tmp_path / "bf16", progress=False)
    ppl32, ppl16 = ([m["valid_ppl"] for m in r.metrics] for r in (fp32, bf16))
    assert ppl16 != ppl32  # bfloat16 really ran (rounded matmuls give other numbers)
    assert ppl16 == pytest.approx(ppl32, rel=0.05)
    assert [m["precision"] for m in bf16.metrics] == ["bf16"] * 3
    loaded = load_checkpoint(tmp_path / "bf16")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    assert loaded.training["train_config"]["precision"] == "bf16"


def test_precision_is_checked_and_fixed_across_resume(tmp_path, corpus):
    with pytest.raises(ValueError, match="precision: must be one of"):
        config(corpus, precision="fp16")
    fields = ModelConfig(mode="afp", rho=2, hidden=12)
    train(fields, config(corpus).replace(epochs=1), tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match="training option.*precision"):
        train(fields, config(corpus, precision="bf16"), tmp_path / "run", resume=True, progress=False)
    # a run saved before the option existed resumes with the default
    state_path = tmp_path / "run" / "resume" / "state.json"
    state = json.loads(state_path.read_text())
    del state["train_config"]["precision"]
    state_path.write_text(json.dumps(state))
    resumed = train(fields, config(corpus).replace(epochs=2), tmp_path / "run", resume=True, progress=False)
    assert [m["epoch"] for m in resumed.metrics] == [1, 2]


def test_auto_precision_follows_the_device(tmp_path, corpus, monkeypatch):
    import lm.train as train_module

    assert train_module.resolve_precision("fp32", torch.device("cuda")) == "fp32"
    assert train_module.resolve_precision("bf16", torch.device("cpu")) == "bf16"
    assert train_module.resolve_precision("auto", torch.device("cuda")) == "bf16"
    fields = ModelConfig(mode="afp", rho=2, hidden=12)
    for native, expected in ((False, "fp32"), (True, "bf16")):
        monkeypatch.setattr(train_module, "native_bf16", lambda device, native=native: native)
        assert train_module.resolve_precision("auto", torch.device("cpu")) == expected
        run = train(fields, config(corpus, precision="auto").replace(epochs=1), tmp_path / expected, progress=False)
        assert [m["precision"] for m in run.metrics] == [expected]
    # an auto run resumes on a machine that resolves it otherwise (the bf16 run goes on in fp32)
    resumed = train(fields, config(corpus, precision="auto").replace(epochs=2), tmp_path / "bf16", resume=True,
                    progress=False)
    assert [m["precision"] for m in resumed.metrics] == ["bf16", "bf16"]
    monkeypatch.setattr(train_module, "native_bf16", lambda device: False)
    resumed = train(fields, config(corpus, precision="auto").replace(epochs=3), tmp_path / "bf16", resume=True,
                    progress=False)
    assert [m["precision"] for m in resumed.metrics] == ["bf16", "bf16", "fp32"]


def test_native_bf16_reads_the_cpu_flags():
    from lm.device import native_bf16

    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    expected = "avx512_bf16" in flags or "amx_bf16" in flags
    if flags:
        assert native_bf16(torch.device("cpu")) is expected
    assert native_bf16(torch.device("meta")) is False


def test_a_cuda_ordinal_the_machine_lacks_is_a_clear_error(monkeypatch):
    """(Seen on a one-GPU machine: torch's "invalid device ordinal" came out of the first tensor.)"""
    from lm.device import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0) and resolve_device("cuda").type == "cuda"
    with pytest.raises(ValueError, match=r"'cuda:7' requested but this machine has 1 CUDA device\(s\): cuda:0 to cuda:0"):
        resolve_device("cuda:7")


def test_tf32_is_on_only_inside_cuda_training_steps(tmp_path, corpus, monkeypatch):
    import lm.train as train_module

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with train_module.tf32_matmuls(True):
        assert matmul.fp32_precision == "tf32"
    assert matmul.fp32_precision == before
    with train_module.tf32_matmuls(False):
        assert matmul.fp32_precision == before
    seen = []
    real_step = train_module.train_step
    monkeypatch.setattr(train_module, "train_step", lambda *a, **k: (seen.append(matmul.fp32_precision),
                                                                     real_step(*a, **k))[1])
    run = train(ModelConfig(mode="afp", rho=2, hidden=12), config(corpus).replace(epochs=1, device="cpu"),
                tmp_path / "run", progress=False)
    assert seen and set(seen) == {before}  # a CPU run leaves float32 matmuls alone
    assert [m["tf32"] for m in run.metrics] == [False]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_tf32_training_on_cuda_stays_within_tolerance_of_ieee_float32(tmp_path, corpus):
    fields = ModelConfig(mode="afp", rho=2, hidden=64)
    ieee = train(fields, config(corpus, device="cuda", tf32=False), tmp_path / "ieee", progress=False)
    tf32 = train(fields, config(corpus, device="cuda", tf32=True), tmp_path / "tf32", progress=False)
    assert [m["tf32"] for m in tf32.metrics] == [True] * 3
    assert [m["valid_ppl"] for m in tf32.metrics] == pytest.approx([m["valid_ppl"] for m in ieee.metrics], rel=0.02)


def test_train_takes_a_model_config_and_fills_in_the_vocabulary_size(tmp_path, corpus):
    from lm.model import build_model

    template = ModelConfig(mode="afp", rho=2, hidden=8)
    assert template.vocab_size is None
    with pytest.raises(ValueError, match="vocab_size: not set"):
        build_model(template)
    run = train(template, config(corpus).replace(epochs=1), tmp_path / "run", progress=False)
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.config == template.replace(vocab_size=loaded.vocab.size) and run.epochs_run == 1
    with pytest.raises(ValueError, match=f"vocab_size: the model config says 7 but the vocabulary has {loaded.vocab.size}"):
        train(template.replace(vocab_size=7), config(corpus).replace(epochs=1), tmp_path / "other", progress=False)


def test_training_records_how_many_words_it_maps_to_unk_and_the_penalty_follows(tmp_path):
    """min_count 2 on a text with 3 distinct words seen once: they map to <unk>, the record says
    3, and the model's default unknown-word penalty is -log 3 (each unknown word gets a third of
    <unk>'s probability)."""
    import math

    from lm.checkpoint import load_checkpoint
    from lm.config import ModelConfig, TrainConfig
    from lm.shards import prepare
    from lm.config import PrepareConfig

    text = write_text(tmp_path / "train.txt", [["a", "b", "a", "b"], ["a", "rare1"], ["b", "rare2", "rare3", "<unk>"]])
    cfg = TrainConfig(train=str(text), epochs=1, batch_size=2, min_count=2, device="cpu")
    train(ModelConfig(cell="gru", hidden=4, mode="afp", rho=2), cfg, tmp_path / "run")
    loaded = load_checkpoint(tmp_path / "run")
    assert loaded.training["unk_types"] == 3
    assert loaded.default_unk_penalty == pytest.approx(-math.log(3))
    assert loaded.info()["default_unk_penalty"] == pytest.approx(-math.log(3))
    meta = prepare(PrepareConfig(text=(str(text),), out=str(tmp_path / "data"), min_count=2))
    assert meta["splits"]["train"]["unk_types"] == 3


def test_cli_train_defaults_make_a_model_rescore_accepts(tmp_path, corpus, capsys):
    """No model option: a GRU AFP-4 with an adaptive softmax (the shipped models' kind), which
    ``afp rescore`` takes; ``--mode exact`` still trains an exact model (and no rho)."""
    from service.cli import main

    assert main(["train", "--train", str(corpus[0]), "--out", str(tmp_path / "m"), "--max-steps", "2",
                 "--hidden", "8"]) == 0
    config = load_checkpoint(tmp_path / "m").config
    assert (config.cell, config.mode, config.rho, config.softmax) == ("gru", "afp", 4, "adaptive")
    lattice = tmp_path / "lat.txt"
    lattice.write_text("u\n0 1 the 1,1,\n1 2 cat 1,1,\n2\n\n")
    capsys.readouterr()
    assert main(["rescore", "--model", str(tmp_path / "m"), str(lattice)]) == 0
    assert main(["train", "--train", str(corpus[0]), "--out", str(tmp_path / "e"), "--max-steps", "1",
                 "--hidden", "8", "--mode", "exact"]) == 0
    assert load_checkpoint(tmp_path / "e").config.rho is None
    helptext = __import__("service.cli", fromlist=["build_parser"]).build_parser()._subparsers._group_actions[0] \
        .choices["train"].format_help()
    flat = " ".join(helptext.split())
    assert "(default: None)" not in flat and not re.search(r"\(default: [^()]*\) \(default:", flat)
    assert "(default: gru)" in helptext and "(default: 4)" in helptext


@pytest.mark.parametrize("valid", [False, True])
def test_a_run_stopped_by_max_steps_leaves_a_loadable_model_and_resume_alone_continues(tmp_path, corpus, capsys,
                                                                                        valid):
    """Shards without validation, stopped by --max-steps inside the first epoch: the run directory
    holds the last weights (with validation: the best by it) and says which; ``--resume`` alone
    reads the run's options and continues past the pause to the end of its epochs."""
    from service.cli import main

    data, run = tmp_path / "data", tmp_path / "run"
    assert main(["prepare", "--text", str(corpus[0]), "--out", str(data),
                 *(["--valid", str(corpus[1])] if valid else [])]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(data), "--out", str(run), "--hidden", "8", "--epochs", "2",
                 "--batch-size", "10", "--max-steps", "3"]) == 0
    closing = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert closing["steps"] == 3
    assert ("best by validation (step 3" if valid else "the last weights (step 3; no validation data)") \
        in closing["model"]
    loaded = load_checkpoint(run)
    assert loaded.training["steps"] == 3 and loaded.config.hidden == 8
    assert main(["info", "--model", str(run)]) == 0
    assert main(["train", "--out", str(run), "--resume"]) == 0
    closing = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert closing["epochs"] == 2 and closing["steps"] > 3
    resumed = load_checkpoint(run)
    assert resumed.config.hidden == 8
    if not valid:  # the last weights: those of the run's last step
        assert resumed.training["steps"] == closing["steps"]


def test_make_optimizer_fuses_adam_and_updates_as_the_default_adam():
    from lm.model import build_model
    from lm.train import make_optimizer

    torch.manual_seed(0)
    fused_model = build_model(ModelConfig(vocab_size=50, hidden=16, mode="afp", rho=2, softmax="adaptive",
                                          cutoffs=(10, 30)))
    before = {n: p.detach().clone() for n, p in fused_model.named_parameters()}
    plain_model = build_model(fused_model.config)
    plain_model.load_state_dict(fused_model.state_dict())
    fused = make_optimizer(fused_model, 0.01, weight_decay=0.001)
    plain = torch.optim.Adam(plain_model.parameters(), lr=0.01, weight_decay=0.001)
    assert fused.defaults["fused"] is True and not plain.defaults["fused"]
    for step in range(3):
        grads = {n: torch.randn_like(p, generator=torch.Generator().manual_seed(step)) for n, p in
                 fused_model.named_parameters()}
        for model in (fused_model, plain_model):
            for name, p in model.named_parameters():
                p.grad = grads[name].clone()
        fused.step()
        plain.step()
    moved = 0
    for (name, a), b in zip(fused_model.named_parameters(), plain_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
        moved += int(not torch.equal(a, before[name]))
    assert moved == len(before)
    assert make_optimizer(torch.nn.Linear(2, 2).to(torch.float64), 0.1).defaults["fused"] is True
    assert not make_optimizer(torch.nn.Linear(2, 2, device="meta"), 0.1).defaults["fused"]
