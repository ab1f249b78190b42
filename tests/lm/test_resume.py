"""Interrupted training: step checkpoints, ``max_steps``, exact mid-epoch resume, a real SIGKILL.

Exactness is checked bit for bit (``torch.equal``, ``==`` on metrics): a resumed run restores the
weights and Adam's state byte for byte (safetensors), every random generator (so dropout draws the
same masks), and the partial epoch's loss sums (JSON round-trips a float exactly), then performs the
very same float operations in the same order on the same machine and thread count. Any tolerance
would hide a lost generator state or a skipped batch, whose effects are far larger than rounding.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import lm.resume
import lm.train
from lm.config import ModelConfig, TrainConfig
from lm.resume import find_resume
from lm.train import StepCheckpoints, train
from tests.factories import patterned_sentences, write_text

REPO = Path(__file__).resolve().parents[2]
FIELDS = ModelConfig(mode="afp", rho=2, hidden=12, cell="gru", dropout=0.3)


@pytest.fixture()
def corpus(tmp_path):
    return (write_text(tmp_path / "train.txt", patterned_sentences(120, seed=1)),
            write_text(tmp_path / "valid.txt", patterned_sentences(30, seed=2)))


def config(corpus, **changes) -> TrainConfig:
    """3 epochs of 12 batches (36 optimizer steps)."""
    train_path, valid_path = corpus
    fields = {"epochs": 3, "batch_size": 10, "lr": 1e-2, "lr_decay": 0.5, "seed": 3, **changes}
    return TrainConfig(train=str(train_path), valid=str(valid_path), **fields)


def weights(run: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The best checkpoint's and the last (resume) weights of a run directory."""
    return load_file(str(run / "model.safetensors")), load_file(str(run / "resume" / "model.safetensors"))


def assert_same_run(a: Path, b: Path) -> None:
    metrics = [[json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] for run in (a, b)]
    assert [m["epoch"] for m in metrics[1]] == [1, 2, 3]
    for key in ("train_loss", "valid_ppl", "train_tokens", "lr", "best"):
        assert [m[key] for m in metrics[1]] == [m[key] for m in metrics[0]], key
    for left, right in zip(weights(a), weights(b)):
        assert left.keys() == right.keys()
        assert all(torch.equal(left[name], right[name]) for name in left)


def test_a_run_stopped_mid_epoch_resumes_exactly(tmp_path, corpus):
    train(FIELDS, config(corpus), tmp_path / "straight", progress=False)
    # stop in epoch 1 (step 7), resume and stop in epoch 2 (step 17), then finish; saving every 4 steps
    first = train(FIELDS, config(corpus, max_steps=7, checkpoint_every_steps=4), tmp_path / "cut", progress=False)
    assert (first.steps, first.epochs_run, first.metrics) == (7, 0, [])
    state = json.loads((tmp_path / "cut" / "resume" / "state.json").read_text())
    assert (state["epoch"], state["step"], state["batches_done"]) == (0, 7, 7)
    assert state["token_count"] > 0 and len(state["rng"]) == 1
    second = train(FIELDS, config(corpus, max_steps=17, checkpoint_every_steps=4), tmp_path / "cut", resume=True,
                   progress=False)
    assert (second.steps, second.epochs_run) == (17, 1)
    assert (tmp_path / "cut" / "metrics.jsonl").read_text().count("\n") == 1
    last = train(FIELDS, config(corpus), tmp_path / "cut", resume=True, progress=False)
    assert (last.steps, last.epochs_run) == (36, 3)
    assert_same_run(tmp_path / "straight", tmp_path / "cut")


def test_without_the_saved_generators_the_resumed_run_differs(tmp_path, corpus, monkeypatch):
    """The exactness above depends on the random state: dropout makes it matter."""
    train(FIELDS, config(corpus, epochs=1), tmp_path / "straight", progress=False)
    train(FIELDS, config(corpus, epochs=1, max_steps=5), tmp_path / "cut", progress=False)
    monkeypatch.setattr(lm.resume, "restore_rng", lambda saved: None)
    train(FIELDS, config(corpus, epochs=1), tmp_path / "cut", resume=True, progress=False)
    straight, cut = (weights(tmp_path / run)[1] for run in ("straight", "cut"))
    assert not all(torch.equal(straight[name], cut[name]) for name in straight)


def test_checkpoints_every_steps_and_minutes(tmp_path, corpus, monkeypatch):
    saved_at: list[tuple[int, int]] = []
    real = lm.train.save_resume

    def save_resume(out, model, optimizer, vocab, cfg, state, training, rngs):
        saved_at.append((state.step, state.batches_done))
        return real(out, model, optimizer, vocab, cfg, state, training, rngs)

    monkeypatch.setattr(lm.train, "save_resume", save_resume)
    train(FIELDS, config(corpus, epochs=2, checkpoint_every_steps=5), tmp_path / "steps", progress=False)
    # steps 5, 10, 15, 20 within epochs; the epoch ends (12, 24) with batches_done back at 0
    assert saved_at == [(5, 5), (10, 10), (12, 0), (15, 3), (20, 8), (24, 0)]
    saved_at.clear()
    train(FIELDS, config(corpus, epochs=1), tmp_path / "epochs", progress=False)
    assert saved_at == [(12, 0)]  # today's behaviour by default: epoch ends only
    saved_at.clear()
    train(FIELDS, config(corpus, epochs=1, checkpoint_every_minutes=1e-9), tmp_path / "minutes", progress=False)
    assert [step for step, _ in saved_at] == [*range(1, 13), 12]  # every step takes longer than 60 ns


def test_minutes_are_counted_from_the_last_save():
    def saves(**options) -> list[int]:
        ticks = iter(range(0, 10_000, 30))  # each reading of the clock is "30 seconds" later
        due = StepCheckpoints(TrainConfig(train="unused", **options), 1, torch.device("cpu"),
                              clock=lambda: float(next(ticks)))
        return [step for step in range(1, 9) if due.due(step)]

    assert saves(checkpoint_every_minutes=1.0) == [2, 4, 6, 8]
    assert saves(checkpoint_every_minutes=1.0, checkpoint_every_steps=3) == [2, 3, 5, 6, 8]
    assert saves() == []


def test_resume_refuses_changed_options_and_another_world_size(tmp_path, corpus):
    train(FIELDS, config(corpus, max_steps=5), tmp_path / "run", progress=False)
    with pytest.raises(ValueError, match=r"resume: cannot resume, training option\(s\) changed: batch_size, lr"):
        train(FIELDS, config(corpus).replace(lr=0.5, batch_size=7), tmp_path / "run", resume=True, progress=False)
    with pytest.raises(ValueError, match="cannot resume, the model config differs"):
        train(FIELDS.replace(hidden=10), config(corpus), tmp_path / "run", resume=True, progress=False)
    model = lm.train.build_model(lm.resume.read_config(tmp_path / "run" / "resume")[0])
    optimizer = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match="cannot resume with 2 process.*after 5 batches per process of 1 "
                                         "processes; resume it with 1"):
        lm.resume.load_resume(tmp_path / "run" / "resume", model, optimizer, model.config, config(corpus),
                              torch.device("cpu"), rank=0, world_size=2)


def test_find_resume_takes_the_newest_complete_directory(tmp_path, corpus):
    run = tmp_path / "run"
    step = lambda directory: json.loads((directory / "state.json").read_text())["step"]  # noqa: E731
    train(FIELDS, config(corpus, max_steps=3), run, progress=False)
    shutil.copytree(run / "resume", tmp_path / "at3")
    train(FIELDS, config(corpus, max_steps=5), run, resume=True, progress=False)
    assert find_resume(run) == run / "resume" and step(run / "resume") == 5
    assert not (run / "resume.tmp").exists() and not (run / "resume.old").exists()
    (run / "resume.tmp").mkdir()  # a save killed while writing: no state.json yet
    (run / "resume.tmp" / "model.safetensors").write_bytes(b"partial")
    assert find_resume(run) == run / "resume"
    # killed after writing resume.tmp whole, before renaming it: the older state is still resume/
    shutil.rmtree(run / "resume.tmp")
    (run / "resume").rename(run / "resume.tmp")
    shutil.copytree(tmp_path / "at3", run / "resume")
    assert find_resume(run) == run / "resume.tmp"
    resumed = train(FIELDS, config(corpus, max_steps=6), run, resume=True, progress=False)
    assert resumed.steps == 6 and find_resume(run) == run / "resume" and step(run / "resume") == 6
    assert not (run / "resume.tmp").exists() and not (run / "resume.old").exists()
    # killed between the two renames: only resume.old (older) and resume.tmp (newer) are left
    shutil.copytree(run / "resume", run / "resume.tmp")
    (run / "resume").rename(run / "resume.old")
    assert find_resume(run) == run / "resume.tmp"
    shutil.rmtree(run / "resume.tmp")
    assert find_resume(run) == run / "resume.old"
    assert find_resume(tmp_path / "nothing") is None


@pytest.mark.slow
def test_afp_train_killed_by_sigkill_resumes_exactly(tmp_path, corpus, capsys):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    flags = ["--valid", str(corpus[1]), "--rho", "2", "--cell", "gru", "--hidden", "12", "--dropout", "0.3",
             "--epochs", "3", "--batch-size", "5", "--lr", "0.01", "--lr-decay", "0.5", "--seed", "3",
             "--device", "cpu", "--num-threads", "1", "--precision", "fp32"]

    def afp_train(out: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "service.cli", "train", "--train", str(corpus[0]), "--out", str(out),
                *flags, *extra]

    run = tmp_path / "killed"
    process = subprocess.Popen(afp_train(run, "--checkpoint-every-steps", "1"), env=env, cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while find_resume(run) is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)  # polling for the first step checkpoint, not waiting for it to happen
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, stderr.decode()[-3000:]
    killed_at = json.loads((find_resume(run) / "state.json").read_text())
    assert 1 <= killed_at["step"] < 72  # 3 epochs x 24 batches: it was stopped part-way

    # the resumed and the straight run in this process (a new process is what the kill needed)
    from service.cli import main

    threads = torch.get_num_threads()
    try:
        assert main(afp_train(run, "--checkpoint-every-steps", "1", "--resume")[3:]) == 0
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["steps"] == 72
        assert main(afp_train(tmp_path / "straight")[3:]) == 0
    finally:
        torch.set_num_threads(threads)
    assert_same_run(tmp_path / "straight", run)


def test_generator_states_round_trip_through_json():
    import random

    import numpy as np

    from lm.resume import capture_rng, restore_rng

    saved = capture_rng()
    saved.update(json.loads(json.dumps({key: saved[key] for key in ("python", "numpy")})))  # as state.json has them
    expected = (torch.rand(4), random.random(), np.random.rand())
    restore_rng(saved)
    got = (torch.rand(4), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1:] == expected[1:]


def test_a_resume_state_from_before_step_checkpoints_still_resumes(tmp_path, corpus):
    from safetensors.torch import save_file

    # on the CPU: the old format kept the CPU generator only, so a CUDA run's dropout could not resume exactly
    train(FIELDS, config(corpus, device="cpu"), tmp_path / "straight", progress=False)
    train(FIELDS, config(corpus, epochs=1, device="cpu"), tmp_path / "old", progress=False)
    resume = tmp_path / "old" / "resume"  # rewrite it as the epoch-only format wrote it
    state = json.loads((resume / "state.json").read_text())
    old_keys = ("param_groups", "train_config", "epoch", "lr", "best_valid_ppl", "metrics")
    (resume / "state.json").write_text(json.dumps({key: state[key] for key in old_keys}))
    tensors = load_file(str(resume / "optimizer.safetensors"))
    tensors["rng.cpu"] = tensors.pop("rng.0.cpu")
    save_file(tensors, str(resume / "optimizer.safetensors"))
    resumed = train(FIELDS, config(corpus, device="cpu"), tmp_path / "old", resume=True, progress=False)
    assert resumed.steps == 24  # steps before the old state are unknown: counted from there
    assert_same_run(tmp_path / "straight", tmp_path / "old")


def test_init_from_starts_from_a_checkpoint_at_another_rho(tmp_path, corpus):
    """--init-from: the run's first weights are the checkpoint's (one Adam step moves each by at
    most lr from there, a fresh run's are farther), at another rho; recorded in config.json."""
    from lm.checkpoint import read_config

    train(FIELDS, config(corpus, epochs=1), tmp_path / "base", progress=False)
    base = load_file(str(tmp_path / "base" / "model.safetensors"))
    rho3 = FIELDS.replace(rho=3)
    for name, init in (("warm", str(tmp_path / "base")), ("cold", None)):
        train(rho3, config(corpus, epochs=1, max_steps=1, init_from=init), tmp_path / name, progress=False)
    moved = {name: max((load_file(str(tmp_path / name / "resume" / "model.safetensors"))[k] - base[k]).abs().max().item()
                       for k in base) for name in ("warm", "cold")}
    assert moved["warm"] <= 1e-2 * (1 + 1e-4) < moved["cold"]
    _, _, training = read_config(tmp_path / "warm" / "resume")
    assert training["init_from"] == str(tmp_path / "base") and training["init_model"].startswith("AFP-2")


def test_init_from_refuses_another_vocabulary_or_shape(tmp_path, corpus):
    from lm.checkpoint import CheckpointError

    train(FIELDS, config(corpus, epochs=1), tmp_path / "base", progress=False)
    with pytest.raises(CheckpointError, match=r"embedding.weight is \[16, 12\] in the weights but \[16, 16\]"):
        train(FIELDS.replace(hidden=16), config(corpus, epochs=1, init_from=str(tmp_path / "base")),
              tmp_path / "wide", progress=False)
    other = (write_text(tmp_path / "other.txt", [s + ["zebra"] for s in patterned_sentences(120, seed=1)]), corpus[1])
    with pytest.raises(CheckpointError, match="vocabulary"):
        train(FIELDS, config(other, epochs=1, init_from=str(tmp_path / "base")), tmp_path / "words", progress=False)
