"""Training: Adam on sentence mini-batches, best-validation checkpoint, resumable, DDP-ready.

An output directory after ``train(...)``::

    config.json, model.safetensors   the best-validation model (a checkpoint: ``--model DIR``)
    metrics.jsonl                     one JSON object per epoch
    resume/                           the latest model, optimizer, counters and random generators
                                      (:mod:`lm.resume`): saved at every epoch end, every
                                      ``checkpoint_every_steps`` steps or ``checkpoint_every_minutes``,
                                      and when ``max_steps`` stops the run

Under ``torchrun`` (``WORLD_SIZE > 1``) every process trains on its share of the batches with
DistributedDataParallel (NCCL on GPUs, gloo on CPUs) and validates its share of the validation
sentences (the sums are all-reduced); rank 0 writes files.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from lm.checkpoint import prepare_model, save_checkpoint, warm_start
from lm.config import ModelConfig, TrainConfig
from lm.corpus import Batch, Corpus, batches, encode, load_corpus
from lm.device import native_bf16, resolve_device, tf32_matmuls
from lm.evaluate import corpus_logprob
from lm.model import LanguageModel, build_model
from lm.resume import TrainState, capture_rng, find_resume, load_resume, save_resume
from lm.shards import open_prepared
from lm.vocab import Vocabulary

METRICS = "metrics.jsonl"


@dataclass(frozen=True)
class Data:
    """The corpora and vocabulary of a run; ``unk_types``: how many distinct training words the
    vocabulary maps to ``<unk>`` (None when unknown: shards prepared before it was counted)."""

    vocab: Vocabulary
    train: Corpus
    valid: Corpus | None
    unk_types: int | None = None


@dataclass(frozen=True)
class TrainResult:
    best_valid_ppl: float | None
    epochs_run: int
    metrics: list[dict[str, Any]]
    rank: int = 0
    steps: int = 0
    #: which weights the run directory's model holds (the closing line of ``afp train`` says it)
    saved: str = ""


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam over ``model``'s parameters, fused (one kernel for the whole update) where every
    parameter is a floating tensor on the CPU or a CUDA device, as in training. The fused update
    is the same algorithm as the default one (its results differ by rounding only); on this
    project's CPU it took 0.024 s a step instead of 0.14 for the 11.9M weights of a GRU-256 with
    a 44k-word adaptive softmax, about 7% of a training step (issue 30's AFP-4 twin)."""
    params = list(model.parameters())
    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused or None)



def load_data(cfg: TrainConfig) -> Data:
    """Read the corpora and build (or read) the vocabulary; or open the prepared shards of
    ``cfg.data`` (memory-mapped, their own vocabulary and, unless ``cfg.valid``, validation split)."""
    if cfg.data is not None:
        prepared = open_prepared(cfg.data)
        train_corpus = prepared.train
        if cfg.max_train_sentences is not None:
            train_corpus = train_corpus.head(cfg.max_train_sentences)
        valid = encode(load_corpus(cfg.valid), prepared.vocab) if cfg.valid else prepared.valid
        return Data(vocab=prepared.vocab, train=train_corpus, valid=valid,
                    unk_types=prepared.meta["splits"]["train"].get("unk_types"))
    train_sentences = load_corpus(cfg.train)
    if cfg.max_train_sentences is not None:
        train_sentences = train_sentences[: cfg.max_train_sentences]
    if not train_sentences:
        raise ValueError(f"{cfg.train}: no sentences")
    if cfg.words_txt:
        vocab = Vocabulary.from_words_txt(cfg.words_txt)
    else:
        vocab = Vocabulary.from_sentences(train_sentences, max_size=cfg.max_vocab, min_count=cfg.min_count)
    valid = encode(load_corpus(cfg.valid), vocab) if cfg.valid else None
    unknown = {w for sentence in train_sentences for w in sentence if not vocab.is_known(w) and w != vocab.unk}
    return Data(vocab=vocab, train=encode(train_sentences, vocab), valid=valid, unk_types=len(unknown))


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto`` is ``bf16`` where :func:`native_bf16`, else ``fp32``; others stay as they are."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16(device) else "fp32"


def _distributed(cfg: TrainConfig) -> tuple[int, int, torch.device]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = resolve_device(cfg.device)
    if world <= 1:
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def train(
    model_config: ModelConfig,
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    record: dict[str, Any] | None = None,
    progress: bool | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train a model and write the run directory described in the module docstring.

    Every process builds the same initial weights (from ``cfg.seed``), then seeds the torch
    generator that training draws from (dropout) with ``cfg.seed + rank``, so ranks drop out
    different units; the batch order is the epoch's seed's, whatever the rank.

    Args:
      model_config: what to train; its ``vocab_size`` is left unset (None) and becomes the size of the
        vocabulary built from or read with the data (a different number set there is an error).
      cfg: the training configuration.
      resume: continue from ``out_dir/resume`` when it exists (same configs required), exactly
        where it stopped, mid-epoch included.
      record: extra facts stored in the checkpoint's ``training`` record (e.g. the command).
      progress: show a tqdm bar; None shows one when stderr is a terminal.
      on_epoch: called with each epoch's metrics (rank 0 only).
    """
    out = Path(out_dir)
    rank, world, device = _distributed(cfg)
    precision = resolve_precision(cfg.precision, device)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    data = load_data(cfg)
    record = {**(record or {}), "unk_types": data.unk_types}
    if model_config.vocab_size not in (None, data.vocab.size):
        raise ValueError(f"vocab_size: the model config says {model_config.vocab_size} but the vocabulary has "
                         f"{data.vocab.size} words; leave it unset")
    model_cfg = model_config.replace(vocab_size=data.vocab.size)
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg)
    model.reset_parameters(cfg.init_range)
    prepare_model(model, data.vocab)
    if cfg.init_from is not None:
        record.update(warm_start(model, cfg.init_from, data.vocab))
    model.to(device)
    torch.manual_seed(cfg.seed + rank)  # dropout: a stream per rank (the weights above are the same on all)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    state = TrainState(lr=cfg.lr, world_size=world)
    saved = find_resume(out) if resume else None
    if saved is not None:
        state = load_resume(saved, model, optimizer, model_cfg, cfg, device, rank, world)
    # an adaptive softmax leaves the tail clusters that a batch's targets miss without gradient
    trainer: torch.nn.Module = (DistributedDataParallel(model, find_unused_parameters=model.adaptive is not None)
                                if world > 1 else model)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        _write_metrics(out, state.metrics)

    def save() -> None:  # collective under DDP: every rank calls it at the same step
        _save_state(out, model, optimizer, data.vocab, cfg, state, _record(record, cfg, state), rank, world, device)

    checkpoints = StepCheckpoints(cfg, world, device)
    saved_at: int | None = None
    for epoch in range(state.epoch + 1, cfg.epochs + 1):
        if cfg.max_steps is not None and state.step >= cfg.max_steps:
            break
        for group in optimizer.param_groups:
            group["lr"] = state.lr
        with tf32_matmuls(cfg.tf32 and device.type == "cuda"):
            finished = _train_epoch(trainer, model, optimizer, data.train, cfg, epoch, state, rank, world, device,
                                    precision, progress, checkpoints, save)
        if not finished:
            # max_steps reached within the epoch (a pause: --resume continues): validate the weights
            # as they are, keep them as the model if they are the best (or there is no validation),
            # then save the resume state (validation draws no random numbers: resuming stays exact)
            valid_ppl = _validate(model, data.valid, rank, world, cfg)
            better = valid_ppl is None or state.best_valid_ppl is None or valid_ppl < state.best_valid_ppl
            if better and valid_ppl is not None:
                state.best_valid_ppl = valid_ppl
            save()
            if better:
                if rank == 0:
                    save_checkpoint(out, model, data.vocab, _record(record, cfg, state))
                saved_at = state.step
            break
        valid_ppl = _validate(model, data.valid, rank, world, cfg)
        improved = valid_ppl is None or state.best_valid_ppl is None or valid_ppl < state.best_valid_ppl
        loss_sum, token_count, seconds = state.loss_sum, state.token_count, state.seconds
        metrics = {
            "epoch": epoch, "train_loss": loss_sum / token_count, "train_ppl": math.exp(loss_sum / token_count),
            "valid_ppl": valid_ppl, "lr": state.lr, "seconds": seconds,
            "train_tokens": token_count, "tokens_per_second": token_count / seconds, "best": improved,
            "world_size": world, "device": str(device), "precision": precision,
            "tf32": cfg.tf32 and device.type == "cuda",
        }
        if improved:
            state.best_valid_ppl = valid_ppl
        elif cfg.lr_decay < 1.0:
            state.lr *= cfg.lr_decay
        state.finish_epoch(metrics)
        if rank == 0 and improved:
            save_checkpoint(out, model, data.vocab, _record(record, cfg, state))
        if improved:
            saved_at = state.step
        save()
        checkpoints.restart()
        if rank == 0:
            with (out / METRICS).open("a", encoding="utf-8") as f:
                f.write(json.dumps(metrics) + "\n")
            if on_epoch:
                on_epoch(metrics)
    if world > 1:
        dist.barrier()
    if rank == 0 and not (out / "config.json").is_file():  # nothing ran (already at max_steps or epochs)
        save_checkpoint(out, model, data.vocab, _record(record, cfg, state))
        saved_at = state.step
    if saved_at is None:
        saved = (f"{out}: the model saved before" + (" (the last weights; no validation data)" if data.valid is None
                                                    else f", the best by validation (ppl {state.best_valid_ppl:.2f})"))
    elif data.valid is None:
        saved = f"{out}: the last weights (step {saved_at}; no validation data)"
    else:
        saved = f"{out}: the best by validation (step {saved_at}, ppl {state.best_valid_ppl:.2f})"
    return TrainResult(best_valid_ppl=state.best_valid_ppl, epochs_run=state.epoch, metrics=state.metrics,
                       rank=rank, steps=state.step, saved=saved)


def _record(record: dict[str, Any] | None, cfg: TrainConfig, state: TrainState) -> dict[str, Any]:
    """The checkpoint's ``training`` record."""
    return {**(record or {}), "train_config": cfg.to_dict(), "epochs": state.epoch, "steps": state.step,
            "best_valid_ppl": state.best_valid_ppl, "valid": cfg.valid, "train": cfg.train, "data": cfg.data}


def _write_metrics(out: Path, metrics: list[dict[str, Any]]) -> None:
    """Rewrite ``metrics.jsonl`` from the (saved) metrics: a run killed between its resume save and
    its metrics line then neither loses nor repeats a line."""
    tmp = out / (METRICS + ".tmp")
    tmp.write_text("".join(json.dumps(m) + "\n" for m in metrics), encoding="utf-8")
    tmp.replace(out / METRICS)


class StepCheckpoints:
    """When a resume state is due within an epoch: after every ``cfg.checkpoint_every_steps``
    optimizer steps and/or once ``cfg.checkpoint_every_minutes`` have passed since the last save.
    Under DDP rank 0's clock decides for all (a broadcast per step when minutes are set)."""

    def __init__(self, cfg: TrainConfig, world: int, device: torch.device,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_steps = cfg.checkpoint_every_steps
        self.every_seconds = None if cfg.checkpoint_every_minutes is None else 60.0 * cfg.checkpoint_every_minutes
        self.world, self.device, self.clock = world, device, clock
        self.restart()

    def restart(self) -> None:
        """Count the minutes from now (a save just happened)."""
        self.last = self.clock()

    def due(self, step: int) -> bool:
        """Whether to save after global step ``step`` (the same answer on every rank)."""
        due = self.every_steps is not None and step % self.every_steps == 0
        if not due and self.every_seconds is not None:
            due = self.clock() - self.last >= self.every_seconds
            if self.world > 1:
                flag = torch.tensor([float(due)], device=self.device)
                dist.broadcast(flag, src=0)
                due = bool(flag.item())
        if due:
            self.restart()
        return due


def _train_epoch(trainer: torch.nn.Module, model: LanguageModel, optimizer: torch.optim.Optimizer,
                 corpus: Corpus, cfg: TrainConfig, epoch: int, state: TrainState, rank: int, world: int,
                 device: torch.device, precision: str, progress: bool | None, checkpoints: StepCheckpoints,
                 save: Callable[[], None]) -> bool:
    """Train on epoch ``epoch``'s batches from ``state.batches_done`` on, advancing ``state``.

    Returns True when the batches ran out (under DDP the loss sum and token count are then
    all-reduced), False when ``cfg.max_steps`` stopped it first.
    """
    from tqdm import tqdm

    model.train()
    planned = batches(corpus, cfg.batch_size, shuffle=True, seed=cfg.seed * 1000 + epoch, rank=rank, world_size=world,
                      max_tokens=cfg.batch_tokens)
    total = len(planned)
    stream = itertools.islice(planned, state.batches_done, None)  # a resumed epoch skips what it trained on
    show = (sys.stderr.isatty() if progress is None else progress) and rank == 0
    bar = tqdm(stream, total=total, initial=state.batches_done, desc=f"epoch {epoch}", unit="batch",
               disable=not show, leave=False)
    started = time.perf_counter()
    for batch in bar:
        if cfg.max_steps is not None and state.step >= cfg.max_steps:
            state.seconds += time.perf_counter() - started
            return False
        state.loss_sum += float(train_step(trainer, optimizer, batch.to(device), cfg.detach, cfg.clip, precision))
        state.token_count += batch.num_tokens
        state.batches_done += 1
        state.step += 1
        if show:
            bar.set_postfix(ppl=f"{math.exp(state.loss_sum / state.token_count):.1f}", refresh=False)
        if checkpoints.due(state.step):
            state.seconds += time.perf_counter() - started
            save()
            started = time.perf_counter()
    state.seconds += time.perf_counter() - started
    if world > 1:
        totals = torch.tensor([state.loss_sum, float(state.token_count)], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        state.loss_sum, state.token_count = float(totals[0]), int(totals[1])
    return True


def train_step(trainer: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, detach: bool, clip: float,
               precision: str) -> Tensor:
    """One optimisation step on a batch (already on the model's device): forward (under bfloat16
    autocast when ``precision == "bf16"``), mean token NLL backward, clipping, optimizer step.

    ``trainer`` is the model or its DDP wrapper. Returns the batch's summed NLL, a detached
    float32 scalar.
    """
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(batch.inputs.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        logprobs = trainer(batch.inputs, batch.targets, batch.lengths, detach)
    nll = -logprobs.float().sum()
    (nll / batch.num_tokens).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(trainer.parameters(), clip)
    optimizer.step()
    return nll.detach()


def _validate(model: LanguageModel, valid: Corpus | None, rank: int, world: int,
              cfg: TrainConfig) -> float | None:
    """Validation perplexity, every rank scoring its share of the sentences (the same on all ranks)."""
    if valid is None:
        return None
    logprob, tokens = corpus_logprob(model, valid, rank, world, max_elements=cfg.eval_max_elements)
    return math.exp(-logprob / tokens) if tokens else float("nan")


def _save_state(out: Path, model: LanguageModel, optimizer: torch.optim.Optimizer, vocab: Vocabulary,
                cfg: TrainConfig, state: TrainState, training: dict[str, Any], rank: int, world: int,
                device: torch.device) -> None:
    """Save the resume state: every rank's generators and partial-epoch sums are gathered, rank 0 writes."""
    rngs = [capture_rng()]
    saved = state
    if world > 1:
        rngs = [None] * world
        dist.all_gather_object(rngs, capture_rng())
        totals = torch.tensor([state.loss_sum, float(state.token_count)], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        saved = dataclasses.replace(state, loss_sum=float(totals[0]), token_count=int(totals[1]))
    if rank == 0:
        save_resume(out, model, optimizer, vocab, cfg, saved, training, rngs)
