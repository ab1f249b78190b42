"""Two gloo processes (torch.multiprocessing): per-rank dropout seeds and sharded validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.factories import free_port, patterned_sentences, random_sentences, saved_model, write_text

WORLD = 2
#: ranks fork from one server that has torch and the training code imported already (spawn re-imports
#: them, seconds per rank); the server is single-threaded, so forking it is safe. This module is not
#: preloaded: it imports tests.factories, whose torch.cuda.is_available() initialises CUDA, and a
#: process forked after that gets "CUDA error: initialization error" from Adam's capture check
START = "forkserver"
mp.set_forkserver_preload(["torch", "pytest", "lm.train", "lm.evaluate"])
BUDGET = 80  #: logits at a time in validation: a few positions per batch, so there are many batches


def run_ranks(worker, *args) -> None:
    """Run ``worker(rank, *args)`` in :data:`WORLD` processes and wait for them all."""
    mp.start_processes(worker, args=args, nprocs=WORLD, join=True, start_method=START)


def _join(rank: int, port: int) -> None:
    """What torchrun sets up, for process ``rank`` of :data:`WORLD`."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)


def _first_step_worker(rank: int, port: int, train_path: str, out: str, future: int = 0) -> None:
    """Train one step under DDP; save the first dropout mask and the parameters after the step."""
    import lm.train
    from lm.config import ModelConfig, TrainConfig

    _join(rank, port)
    masks: list[torch.Tensor] = []
    params: list[torch.Tensor] = []
    real_dropout, real_step = torch.nn.Dropout.forward, lm.train.train_step

    def dropout(self: torch.nn.Dropout, x: torch.Tensor) -> torch.Tensor:
        y = real_dropout(self, x)
        if self.training:
            masks.append(y == 0)
        return y

    def train_step(trainer, optimizer, batch, *args):
        loss = real_step(trainer, optimizer, batch, *args)
        params.extend(p.detach().clone() for p in trainer.parameters())
        return loss

    torch.nn.Dropout.forward = dropout
    lm.train.train_step = train_step
    cfg = TrainConfig(train=train_path, epochs=1, batch_size=10, max_steps=1, seed=5, device="cpu")
    lm.train.train(ModelConfig(mode="afp", rho=2, hidden=12, cell="gru", dropout=0.5, future=future), cfg,
                   Path(out) / "run", progress=False)
    torch.save({"mask": masks[0], "params": params}, Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("future", [0, 2], ids=["causal", "window"])
def test_ranks_draw_different_dropout_masks_and_keep_identical_parameters(tmp_path, future):
    # every sentence has 7 words, so both ranks' first batches (and dropout masks) have one shape
    sentences = [s[:7] for s in patterned_sentences(40, seed=1)]
    train_path = write_text(tmp_path / "train.txt", sentences)
    run_ranks(_first_step_worker, free_port(), str(train_path), str(tmp_path), future)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    assert ranks[0]["mask"].shape == ranks[1]["mask"].shape
    assert 0.3 < ranks[0]["mask"].float().mean() < 0.7  # dropout 0.5 really ran
    assert not torch.equal(ranks[0]["mask"], ranks[1]["mask"])
    assert len(ranks[0]["params"]) == len(ranks[1]["params"]) > 0
    assert all(torch.equal(a, b) for a, b in zip(ranks[0]["params"], ranks[1]["params"]))


def _validation_worker(rank: int, port: int, model_dir: str, valid_path: str, out: str) -> None:
    """Validate under DDP as training does; save the totals and how many sentences this rank scored."""
    import lm.evaluate
    from lm.checkpoint import load_checkpoint
    from lm.config import TrainConfig
    from lm.corpus import encode, read_sentences
    from lm.train import _validate

    _join(rank, port)
    dist.init_process_group("gloo")
    loaded = load_checkpoint(model_dir)
    corpus = encode(read_sentences(valid_path), loaded.vocab)
    scored: list[int] = []
    real = lm.evaluate._score_group

    def score_group(model, corpus, group, max_elements):
        scored.extend(group)
        return real(model, corpus, group, max_elements)

    lm.evaluate._score_group = score_group
    cfg = TrainConfig(train="unused", eval_max_elements=BUDGET)
    ppl = _validate(loaded.model, corpus, rank, WORLD, cfg)
    scored_by_validation = list(scored)
    logprob, tokens = lm.evaluate.corpus_logprob(loaded.model, corpus, rank, WORLD, max_elements=BUDGET)
    torch.save({"ppl": ppl, "logprob": logprob, "tokens": tokens, "scored": scored_by_validation},
               Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("fields", [{}, {"softmax": "adaptive", "cutoffs": (5, 10), "div_value": 2.0}, {"future": 2}],
                         ids=["full", "adaptive", "window"])
def test_sharded_validation_equals_the_single_process_perplexity(tmp_path, fields):
    from lm.checkpoint import load_checkpoint
    from lm.corpus import encode
    from lm.evaluate import score_corpus

    model_dir = saved_model(tmp_path / "model", cell="gru", **fields)
    sentences = random_sentences(50, seed=8, max_len=14)
    valid_path = write_text(tmp_path / "valid.txt", sentences)
    run_ranks(_validation_worker, free_port(), str(model_dir), str(valid_path), str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    loaded = load_checkpoint(model_dir)
    # one process, the same budget: each sentence is scored in the same batch, only the sum's order differs
    single = score_corpus(loaded.model, encode(sentences, loaded.vocab), max_elements=BUDGET)
    # each rank scored its own share, and the shares make up the corpus once
    assert all(len(r["scored"]) >= 10 for r in ranks)
    assert sorted(ranks[0]["scored"] + ranks[1]["scored"]) == list(range(len(sentences)))
    for r in ranks:
        assert r["tokens"] == single.tokens
        assert torch.allclose(torch.tensor(r["logprob"], dtype=torch.float64),
                              torch.tensor(single.logprob, dtype=torch.float64), rtol=1e-9, atol=0)
        # the processes' float32 matmuls may round apart (other thread counts): as close as the sums allow
        assert r["ppl"] == pytest.approx(single.ppl, rel=1e-7)


def _resume_worker(rank: int, port: int, train_path: str, valid_path: str, out: str) -> None:
    """Train straight through; then stop mid-epoch with max_steps and resume (both ranks' generators saved)."""
    from lm.config import ModelConfig, TrainConfig
    from lm.train import train

    _join(rank, port)
    fields = ModelConfig(mode="afp", rho=2, hidden=12, cell="gru", dropout=0.5)
    cfg = TrainConfig(train=train_path, valid=valid_path, epochs=2, batch_size=10, lr=1e-2, seed=5, device="cpu")
    train(fields, cfg, Path(out) / "straight", progress=False)
    cut = train(fields, cfg.replace(max_steps=6), Path(out) / "cut", progress=False)
    assert (cut.steps, cut.epochs_run) == (6, 1), (cut.steps, cut.epochs_run)
    train(fields, cfg, Path(out) / "cut", resume=True, progress=False)
    dist.destroy_process_group()


def test_a_ddp_run_stopped_mid_epoch_resumes_exactly(tmp_path):
    import json

    from safetensors.torch import load_file

    # 80 sentences: 8 batches an epoch, 4 per rank; max_steps 6 stops half-way through epoch 2
    train_path = write_text(tmp_path / "train.txt", patterned_sentences(80, seed=1))
    valid_path = write_text(tmp_path / "valid.txt", patterned_sentences(20, seed=2))
    run_ranks(_resume_worker, free_port(), str(train_path), str(valid_path), str(tmp_path))
    state = json.loads((tmp_path / "cut" / "resume" / "state.json").read_text())
    assert (state["step"], state["world_size"], len(state["rng"])) == (8, 2, 2)
    metrics = [[json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
               for run in ("straight", "cut")]
    assert [m["valid_ppl"] for m in metrics[1]] == [m["valid_ppl"] for m in metrics[0]]
    assert [m["train_tokens"] for m in metrics[1]] == [m["train_tokens"] for m in metrics[0]]
    # the partial sums were all-reduced in another order: float64 rounding only
    assert [m["train_loss"] for m in metrics[1]] == pytest.approx([m["train_loss"] for m in metrics[0]], rel=1e-12)
    straight, cut = (load_file(str(tmp_path / run / "resume" / "model.safetensors")) for run in ("straight", "cut"))
    assert all(torch.equal(straight[name], cut[name]) for name in straight)
