"""The resume state of a training run: everything needed to continue it exactly, mid-epoch included.

Layout of ``OUT/resume/`` (also a checkpoint directory: ``--model OUT/resume`` loads the latest
weights)::

    config.json, model.safetensors   the model when the state was saved (:mod:`lm.checkpoint`)
    optimizer.safetensors            Adam's per-parameter state, ``state.{index}.{key}`` (each
                                     flattened), and every process's torch generators:
                                     ``rng.{rank}.cpu`` and ``rng.{rank}.cuda.{device}`` (uint8 ``(n,)``)
    state.json                       {"param_groups": Adam's hyper-parameters,
                                      "train_config": the TrainConfig fields,
                                      "epoch": epochs completed,
                                      "step": optimizer steps taken in all epochs,
                                      "batches_done": batches of epoch ``epoch + 1`` that each
                                          process has trained on (0 at an epoch boundary),
                                      "loss_sum", "token_count", "seconds": that partial epoch's
                                          summed training NLL and tokens (all processes together)
                                          and training time,
                                      "lr", "best_valid_ppl", "metrics": the learning rate, best
                                          validation perplexity and per-epoch metrics so far,
                                      "world_size": processes that trained,
                                      "rng": one {"python": random.getstate(),
                                                  "numpy": numpy.random.get_state()} per rank,
                                          as JSON lists}

The batches of an epoch are a deterministic function of the epoch's seed, so a resumed run skips
the first ``batches_done`` of them and, with the generators restored, continues as if it had never
stopped. CUDA generators are saved when CUDA has been initialised (a run that never used it has
not drawn from them).

Saving is atomic: the files are written to ``resume.tmp/`` (``state.json`` last), then
``resume/`` becomes ``resume.old/`` and ``resume.tmp/`` becomes ``resume/``. Whatever a kill
leaves, :func:`find_resume` picks the newest complete directory.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file

from lm.checkpoint import read_config, save_checkpoint
from lm.config import ModelConfig, TrainConfig
from lm.model import LanguageModel
from lm.vocab import Vocabulary

RESUME = "resume"
STATE = "state.json"
OPTIMIZER = "optimizer.safetensors"
#: training options that may change between the sessions of one run without changing its numbers
FREE_OPTIONS = ("epochs", "num_threads", "device", "checkpoint_every_steps", "checkpoint_every_minutes", "max_steps",
                "eval_max_elements", "tf32")

#: one process's random generators: {"cpu": uint8 tensor, "cuda": [uint8 tensor per device],
#: "python": random.getstate() as lists, "numpy": numpy.random.get_state() as lists}
RngState = dict[str, Any]


@dataclass
class TrainState:
    """Where a training run stands (mutable: the training loop advances it).

    ``loss_sum``/``token_count`` hold this process's running sums of the partial epoch; in a saved
    state they are the totals of all processes (rank 0 carries them after a resume).
    """

    lr: float
    epoch: int = 0
    step: int = 0
    batches_done: int = 0
    loss_sum: float = 0.0
    token_count: int = 0
    seconds: float = 0.0
    best_valid_ppl: float | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    world_size: int = 1

    def finish_epoch(self, metrics: dict[str, Any]) -> None:
        """Record a completed epoch and clear the partial-epoch counters."""
        self.epoch = metrics["epoch"]
        self.metrics.append(metrics)
        self.batches_done, self.loss_sum, self.token_count, self.seconds = 0, 0.0, 0, 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainState:
        """Read the fields of ``state.json`` (states saved before a field existed get its default)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# ---------------------------------------------------------------------- random generators
def capture_rng() -> RngState:
    """This process's torch (CPU and initialised CUDA devices), Python and NumPy generator states."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return {"cpu": torch.get_rng_state(), "cuda": cuda, "python": [version, list(internal), gauss],
            "numpy": [name, keys.tolist(), pos, has_gauss, cached]}


def restore_rng(saved: RngState) -> None:
    """Set the generators :func:`capture_rng` read (CUDA devices beyond those present are skipped)."""
    torch.set_rng_state(saved["cpu"])
    if saved.get("cuda") and torch.cuda.is_available():
        for device, value in enumerate(saved["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(value, device)
    if saved.get("python"):
        version, internal, gauss = saved["python"]
        random.setstate((version, tuple(internal), gauss))
    if saved.get("numpy"):
        name, keys, pos, has_gauss, cached = saved["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# ---------------------------------------------------------------------- save / find / load
def save_resume(out: Path, model: LanguageModel, optimizer: torch.optim.Optimizer, vocab: Vocabulary,
                cfg: TrainConfig, state: TrainState, training: dict[str, Any], rngs: list[RngState]) -> Path:
    """Write ``out/resume`` atomically (see the module docstring); ``rngs[r]`` is rank ``r``'s."""
    final, tmp, old = out / RESUME, out / f"{RESUME}.tmp", out / f"{RESUME}.old"
    if (tmp / STATE).is_file():  # a complete save whose renames a kill interrupted: the newest, keep it
        _promote(tmp, final, old)
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(tmp, model, vocab, training)
    opt = optimizer.state_dict()
    tensors = {f"state.{index}.{key}": value.detach().cpu().reshape(-1).contiguous()
               for index, entries in opt["state"].items() for key, value in entries.items()}
    for rank, rng in enumerate(rngs):
        tensors[f"rng.{rank}.cpu"] = rng["cpu"]
        tensors.update({f"rng.{rank}.cuda.{device}": value for device, value in enumerate(rng["cuda"])})
    save_file(tensors, str(tmp / OPTIMIZER))
    meta = {"param_groups": opt["param_groups"], "train_config": cfg.to_dict(), **state.to_json(),
            "rng": [{"python": rng["python"], "numpy": rng["numpy"]} for rng in rngs]}
    (tmp / f"{STATE}.tmp").write_text(json.dumps(meta) + "\n", encoding="utf-8")
    (tmp / f"{STATE}.tmp").replace(tmp / STATE)
    _promote(tmp, final, old)
    return final


def _promote(tmp: Path, final: Path, old: Path) -> None:
    """Make the complete directory ``tmp`` the resume state: ``final`` -> ``old``, ``tmp`` -> ``final``."""
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def find_resume(out: Path) -> Path | None:
    """The newest complete resume directory under ``out`` (``resume.tmp`` when a save was
    interrupted after writing it whole, else ``resume``, else ``resume.old``); None if there is none."""
    for name in (f"{RESUME}.tmp", RESUME, f"{RESUME}.old"):
        if (out / name / STATE).is_file():
            return out / name
    return None


def load_resume(directory: Path, model: LanguageModel, optimizer: torch.optim.Optimizer, model_cfg: ModelConfig,
                cfg: TrainConfig, device: torch.device, rank: int = 0, world_size: int = 1) -> TrainState:
    """Load the weights, optimizer state and this rank's generators saved in ``directory``.

    Raises ``ValueError`` naming the directory when the model config or a training option that
    changes the numbers differs from the saved ones, or when a run stopped mid-epoch is resumed
    with another number of processes (its batches were dealt out to the saved number).
    """
    saved_model_cfg, _, _ = read_config(directory)
    meta = json.loads((directory / STATE).read_text(encoding="utf-8"))
    if saved_model_cfg != model_cfg:
        raise ValueError(f"{directory}: cannot resume, the model config differs from the saved one")
    saved_train = meta["train_config"]
    # ``auto`` precision follows the machine, so it may resolve otherwise in a later session
    free = FREE_OPTIONS + (("precision",) if cfg.precision == "auto" else ())
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}  # options added since it was saved
    changed = sorted(k for k, v in cfg.to_dict().items()
                     if k not in free and saved_train.get(k, defaults[k]) != v)
    if changed:
        raise ValueError(f"{directory}: cannot resume, training option(s) changed: {', '.join(changed)}")
    state = TrainState.from_json(meta)
    if state.batches_done and state.world_size != world_size:
        raise ValueError(f"{directory}: cannot resume with {world_size} process(es): the run stopped in epoch "
                         f"{state.epoch + 1} after {state.batches_done} batches per process of {state.world_size} "
                         f"processes; resume it with {state.world_size}")
    load_model(model, str(directory / "model.safetensors"), device=str(device))
    tensors = load_file(str(directory / OPTIMIZER))
    _load_optimizer(optimizer, tensors, meta["param_groups"], device)
    rng = _saved_rng(tensors, meta, rank)
    if rng is not None:  # a rank the saved run did not have keeps its fresh seed
        restore_rng(rng)
    if rank != 0:  # rank 0 carries the saved partial-epoch totals; the others add their own share
        state.loss_sum, state.token_count = 0.0, 0
    state.world_size = world_size
    return state


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                    param_groups: list[dict[str, Any]], device: torch.device) -> None:
    params = dict(enumerate(optimizer.param_groups[0]["params"]))
    opt_state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("state."):
            _, index, key = name.split(".", 2)
            like = params[int(index)] if key != "step" else value.reshape(())
            opt_state.setdefault(int(index), {})[key] = value.reshape(like.shape).to(
                device if key != "step" else "cpu")
    optimizer.load_state_dict({"state": opt_state, "param_groups": param_groups})


def _saved_rng(tensors: dict[str, torch.Tensor], meta: dict[str, Any], rank: int) -> RngState | None:
    """Rank ``rank``'s saved generators; a state saved before per-rank generators has ``rng.cpu``."""
    if rank == 0 and "rng.cpu" in tensors:
        return {"cpu": tensors["rng.cpu"]}
    if f"rng.{rank}.cpu" not in tensors:
        return None
    prefix = f"rng.{rank}.cuda."
    cuda = [tensors[f"{prefix}{i}"] for i in range(sum(name.startswith(prefix) for name in tensors))]
    rest = meta["rng"][rank] if rank < len(meta.get("rng", [])) else {}
    return {"cpu": tensors[f"rng.{rank}.cpu"], "cuda": cuda, **rest}
