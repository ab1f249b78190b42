"""``afp prepare`` and ``afp train`` as library calls: the options a command gives, resolved the
way the command resolves them, and the summary it prints.

    from lm.config import PrepareConfig
    from lm.jobs import TrainJob, run_prepare, run_train_job

    run_prepare(PrepareConfig(text=("train.txt",), out="data", valid="valid.txt"))
    run_train_job(TrainJob(out="run", train={"data": "data", "epochs": 2}, model={"hidden": 128}))

A :class:`TrainJob`'s options are the flags' (None: not given), layered as ``afp train`` layers
them: a resumed run's own saved options, under a ``--config`` file's, under the flags; then,
for a new recurrent model, :data:`TRAIN_MODEL_DEFAULTS` where nothing was said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lm.config import ModelConfig, PrepareConfig, TrainConfig

__all__ = ["TRAIN_MODEL_DEFAULTS", "TrainJob", "TrainJobError", "run_prepare", "run_train_job", "saved_run_options",
           "train_configs"]

#: what ``afp train`` trains when the command line names no model (the shipped models' kind: a GRU
#: AFP-4 with an adaptive softmax, models/librispeech); the ModelConfig defaults stay the library's
TRAIN_MODEL_DEFAULTS: dict[str, Any] = {"cell": "gru", "mode": "afp", "rho": 4, "hidden": 256, "softmax": "adaptive"}


class TrainJobError(ValueError):
    """Training options that cannot be used; the message names them (or the file at fault)."""


def run_prepare(cfg: PrepareConfig) -> dict[str, Any]:
    """Tokenize a corpus into shards (:func:`lm.shards.prepare`, ``cfg`` a
    :class:`lm.config.PrepareConfig`); the summary ``afp prepare`` prints: ``out``, ``vocab_size``
    and per split its ``sentences``, ``words``, ``tokens``, ``oov`` and number of ``shards``."""
    from lm.shards import prepare

    meta = prepare(cfg)
    summary: dict[str, Any] = {"out": cfg.out, "vocab_size": meta["vocab"]["size"]}
    for name, split in meta["splits"].items():
        summary[name] = {key: split[key] for key in ("sentences", "words", "tokens", "oov")}
        summary[name]["shards"] = len(split["shards"])
    return summary


@dataclass(frozen=True)
class TrainJob:
    """An ``afp train`` job: the run directory ``out``; ``model`` and ``train``, the
    :class:`lm.config.ModelConfig` and :class:`lm.config.TrainConfig` fields given (None: not
    given); ``config``: a JSON file ``{"model": {...}, "train": {...}}`` under them; ``resume``:
    continue ``out``'s run (its saved options under everything given); ``record``: facts kept
    in the checkpoint's training record (the command)."""

    out: str
    model: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)
    config: str | None = None
    resume: bool = False
    record: Mapping[str, Any] = field(default_factory=dict)


def _read_object(path: str) -> dict[str, Any]:
    from lm.config import read_json_file

    data = read_json_file(path, TrainJobError)
    if not isinstance(data, dict):
        raise TrainJobError(f"{path}: expected a JSON object")
    return data


def saved_run_options(out: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The model and training options a run directory's resume state was saved with (None
    without one): ``afp train --out DIR --resume`` alone continues the run as it was."""
    from lm.resume import find_resume

    directory = find_resume(Path(out))
    if directory is None:
        return None
    config = _read_object(str(directory / "config.json"))
    state = _read_object(str(directory / "state.json"))
    model = dict(config.get("model", {}))
    model.pop("vocab_size", None)  # set from the data again (and checked against the saved weights)
    # --max-steps paused the run: resuming continues it (to its epochs, or a new --max-steps)
    train = {k: v for k, v in dict(state.get("train_config", {})).items() if v is not None and k != "max_steps"}
    return model, train


def train_configs(job: TrainJob) -> tuple[ModelConfig, TrainConfig]:
    """The :class:`lm.config.ModelConfig` and :class:`lm.config.TrainConfig` of ``job``, checked
    before any data is read (the vocabulary's size is checked once it is known)."""
    model_fields: dict[str, Any] = {}
    train_fields: dict[str, Any] = {}
    if job.config:
        data = _read_object(job.config)
        model_fields, train_fields = dict(data.get("model", {})), dict(data.get("train", {}))
        extra = sorted(set(data) - {"model", "train"})
        if extra:
            raise TrainJobError(f"{job.config}: unknown section(s) {extra}; expected 'model' and 'train'")
    saved = saved_run_options(job.out) if job.resume else None
    if saved is not None:  # a resume reads the run's own options; what is given again overrides them
        model_fields, train_fields = {**saved[0], **model_fields}, {**saved[1], **train_fields}
    model_fields.update({k: v for k, v in job.model.items() if v is not None})
    train_fields.update({k: v for k, v in job.train.items() if v is not None})
    if saved is None and model_fields.get("arch", "rnn") == "rnn":
        for name, value in TRAIN_MODEL_DEFAULTS.items():
            if name == "rho" and model_fields.get("mode", "afp") != "afp":
                continue
            model_fields.setdefault(name, value)
    if model_fields.get("mode") == "afp" and "rho" not in model_fields:
        raise TrainJobError("--mode afp needs --rho")
    if "rho" in model_fields and "mode" not in model_fields and model_fields.get("arch", "rnn") == "rnn":
        model_fields["mode"] = "afp"
    if "train" not in train_fields and "data" not in train_fields:
        raise TrainJobError("give --train FILE or --data DIR (or 'train' or 'data' in the config's 'train' section)")
    cfg = TrainConfig.from_dict(train_fields, where="training options")
    model = ModelConfig.from_dict(model_fields, where="model options")
    return model, cfg


def run_train_job(job: TrainJob, on_epoch: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
    """Train (:func:`lm.train.train`); the summary ``afp train`` prints (``out``, ``epochs``,
    ``steps``, ``best_valid_ppl``, ``model``: the files saved), on rank 0 of a distributed run
    (None on the others). ``on_epoch`` sees each epoch's metrics."""
    from lm.train import train

    model, cfg = train_configs(job)
    result = train(model, cfg, job.out, resume=job.resume, record=dict(job.record), on_epoch=on_epoch)
    if result.rank != 0:
        return None
    return {"out": job.out, "epochs": result.epochs_run, "steps": result.steps,
            "best_valid_ppl": result.best_valid_ppl, "model": result.saved}
