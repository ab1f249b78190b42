"""Training: Adam on sentence mini-batches, best-validation checkpoint, resumable, DDP-ready.

An output directory after ``train(...)``::

    config.json, model.safetensors   the best-validation model (a checkpoint: ``--model DIR``)
    metrics.jsonl                     one JSON object per epoch
    resume/                           the last epoch's model, optimizer and counters

Under ``torchrun`` (``WORLD_SIZE > 1``) every process trains on its share of the batches with
DistributedDataParallel (NCCL on GPUs, gloo on CPUs); rank 0 evaluates and writes files.
"""

from __future__ import annotations

import dataclasses
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
from safetensors.torch import load_file, save_file
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from lm.checkpoint import prepare_model, read_config, save_checkpoint
from lm.config import ModelConfig, TrainConfig
from lm.corpus import Batch, Corpus, EncodedCorpus, batches, encode, load_corpus
from lm.evaluate import score_corpus
from lm.model import LanguageModel, build_model
from lm.shards import open_prepared
from lm.vocab import Vocabulary

METRICS = "metrics.jsonl"
RESUME = "resume"


@dataclass(frozen=True)
class Data:
    vocab: Vocabulary
    train: Corpus
    valid: Corpus | None


@dataclass(frozen=True)
class TrainResult:
    best_valid_ppl: float | None
    epochs_run: int
    metrics: list[dict[str, Any]]
    rank: int = 0


def load_data(cfg: TrainConfig) -> Data:
    """Read the corpora and build (or read) the vocabulary; or open the prepared shards of
    ``cfg.data`` (memory-mapped, their own vocabulary and, unless ``cfg.valid``, validation split)."""
    if cfg.data is not None:
        prepared = open_prepared(cfg.data)
        train_corpus = prepared.train
        if cfg.max_train_sentences is not None:
            train_corpus = train_corpus.head(cfg.max_train_sentences)
        valid = encode(load_corpus(cfg.valid), prepared.vocab) if cfg.valid else prepared.valid
        return Data(vocab=prepared.vocab, train=train_corpus, valid=valid)
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
    return Data(vocab=vocab, train=encode(train_sentences, vocab), valid=valid)


def resolve_device(name: str) -> torch.device:
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively: CUDA, or a CPU with AVX512-BF16 or AMX
    (read from ``/proc/cpuinfo``'s flags, else torch's CPU capability)."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        return "avx512_bf16" in flags or "amx_bf16" in flags
    except OSError:
        return torch.backends.cpu.get_cpu_capability() in ("AVX512_BF16", "AMX")


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
    model_fields: dict[str, Any],
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    record: dict[str, Any] | None = None,
    progress: bool | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train a model and write the run directory described in the module docstring.

    Args:
      model_fields: :class:`ModelConfig` fields except ``vocab_size`` (taken from the data).
      cfg: the training configuration.
      resume: continue from ``out_dir/resume`` when it exists (same configs required).
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
    model_cfg = ModelConfig.from_dict({**model_fields, "vocab_size": data.vocab.size}, where="model config")
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg)
    model.reset_parameters(cfg.init_range)
    prepare_model(model, data.vocab)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = {"epoch": 0, "lr": cfg.lr, "best_valid_ppl": None, "metrics": []}
    if resume and (out / RESUME / "state.json").is_file():
        state = _load_resume(out / RESUME, model, optimizer, model_cfg, cfg, device)
    # an adaptive softmax leaves the tail clusters that a batch's targets miss without gradient
    trainer: torch.nn.Module = (DistributedDataParallel(model, find_unused_parameters=model.adaptive is not None)
                                if world > 1 else model)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        if state["epoch"] == 0:
            (out / METRICS).write_text("", encoding="utf-8")

    for epoch in range(state["epoch"] + 1, cfg.epochs + 1):
        for group in optimizer.param_groups:
            group["lr"] = state["lr"]
        started = time.perf_counter()
        loss_sum, token_count = _train_epoch(trainer, model, optimizer, data.train, cfg, epoch, rank, world,
                                             device, precision, progress)
        seconds = time.perf_counter() - started
        valid_ppl = _validate(model, data.valid, rank, world, device)
        improved = valid_ppl is None or state["best_valid_ppl"] is None or valid_ppl < state["best_valid_ppl"]
        metrics = {
            "epoch": epoch, "train_loss": loss_sum / token_count, "train_ppl": math.exp(loss_sum / token_count),
            "valid_ppl": valid_ppl, "lr": state["lr"], "seconds": seconds,
            "train_tokens": token_count, "tokens_per_second": token_count / seconds, "best": improved,
            "world_size": world, "device": str(device), "precision": precision,
        }
        if improved:
            state["best_valid_ppl"] = valid_ppl
        elif cfg.lr_decay < 1.0:
            state["lr"] *= cfg.lr_decay
        state["epoch"] = epoch
        state["metrics"].append(metrics)
        if rank == 0:
            training = {**(record or {}), "train_config": cfg.to_dict(), "epochs": epoch,
                        "best_valid_ppl": state["best_valid_ppl"], "valid": cfg.valid, "train": cfg.train}
            if improved:
                save_checkpoint(out, model, data.vocab, training)
            _save_resume(out / RESUME, model, optimizer, data.vocab, cfg, state, training)
            with (out / METRICS).open("a", encoding="utf-8") as f:
                f.write(json.dumps(metrics) + "\n")
            if on_epoch:
                on_epoch(metrics)
    if world > 1:
        dist.barrier()
    return TrainResult(best_valid_ppl=state["best_valid_ppl"], epochs_run=state["epoch"], metrics=state["metrics"],
                       rank=rank)


def _train_epoch(trainer: torch.nn.Module, model: LanguageModel, optimizer: torch.optim.Optimizer,
                 corpus: EncodedCorpus, cfg: TrainConfig, epoch: int, rank: int, world: int,
                 device: torch.device, precision: str, progress: bool | None) -> tuple[float, int]:
    from tqdm import tqdm

    model.train()
    loss_sum, token_count = 0.0, 0
    stream = batches(corpus, cfg.batch_size, shuffle=True, seed=cfg.seed * 1000 + epoch, rank=rank, world_size=world,
                     max_tokens=cfg.batch_tokens)
    total = len(stream)
    show = (sys.stderr.isatty() if progress is None else progress) and rank == 0
    bar = tqdm(stream, total=total, desc=f"epoch {epoch}", unit="batch", disable=not show, leave=False)
    for batch in bar:
        loss_sum += float(train_step(trainer, optimizer, batch.to(device), cfg.detach, cfg.clip, precision))
        token_count += batch.num_tokens
        if show:
            bar.set_postfix(ppl=f"{math.exp(loss_sum / token_count):.1f}", refresh=False)
    if world > 1:
        totals = torch.tensor([loss_sum, float(token_count)], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        loss_sum, token_count = float(totals[0]), int(totals[1])
    return loss_sum, token_count


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


def _validate(model: LanguageModel, valid: EncodedCorpus | None, rank: int, world: int,
              device: torch.device) -> float | None:
    if valid is None:
        return None
    ppl = torch.tensor([score_corpus(model, valid).ppl if rank == 0 else 0.0], dtype=torch.float64, device=device)
    if world > 1:
        dist.broadcast(ppl, src=0)
    return float(ppl[0])


# ---------------------------------------------------------------------- resume state
def _save_resume(directory: Path, model: LanguageModel, optimizer: torch.optim.Optimizer, vocab: Vocabulary,
                 cfg: TrainConfig, state: dict[str, Any], training: dict[str, Any]) -> None:
    save_checkpoint(directory, model, vocab, training)
    opt = optimizer.state_dict()
    tensors = {f"state.{index}.{key}": value.detach().cpu().reshape(-1).contiguous()
               for index, entries in opt["state"].items() for key, value in entries.items()}
    tensors["rng.cpu"] = torch.get_rng_state()
    save_file(tensors, str(directory / "optimizer.safetensors.tmp"))
    meta = {"param_groups": opt["param_groups"], "train_config": cfg.to_dict(), **state}
    (directory / "state.json.tmp").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    (directory / "optimizer.safetensors.tmp").replace(directory / "optimizer.safetensors")
    (directory / "state.json.tmp").replace(directory / "state.json")


def _load_resume(directory: Path, model: LanguageModel, optimizer: torch.optim.Optimizer,
                 model_cfg: ModelConfig, cfg: TrainConfig, device: torch.device) -> dict[str, Any]:
    from safetensors.torch import load_model

    saved_model_cfg, _, _ = read_config(directory)
    meta = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    if saved_model_cfg != model_cfg:
        raise ValueError(f"{directory}: cannot resume, the model config differs from the saved one")
    saved_train = meta["train_config"]
    # may change between sessions without changing the training (``auto`` precision follows the machine)
    free = ("epochs", "num_threads", "device") + (("precision",) if cfg.precision == "auto" else ())
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}  # options added since it was saved
    changed = sorted(k for k, v in cfg.to_dict().items()
                     if k not in free and saved_train.get(k, defaults[k]) != v)
    if changed:
        raise ValueError(f"{directory}: cannot resume, training option(s) changed: {', '.join(changed)}")
    load_model(model, str(directory / "model.safetensors"), device=str(device))
    tensors = load_file(str(directory / "optimizer.safetensors"))
    params = {index: p for index, p in enumerate(optimizer.param_groups[0]["params"])}
    opt_state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("state."):
            _, index, key = name.split(".", 2)
            like = params[int(index)] if key != "step" else value.reshape(())
            opt_state.setdefault(int(index), {})[key] = value.reshape(like.shape).to(
                device if key != "step" else "cpu")
    optimizer.load_state_dict({"state": opt_state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.cpu"])
    return {k: meta[k] for k in ("epoch", "lr", "best_valid_ppl", "metrics")}
