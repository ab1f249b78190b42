"""Carry a training run between machines that start bare: its resume state packed small, in pieces.

A run's ``OUT/resume/`` (:mod:`lm.resume`) is the model in float32, Adam's moments (twice the
model) and the generators. Moving it whole between working sessions (through git) or between a
CPU machine and a lent GPU (whose calls carry 64 MiB in and return files of 16 MiB at most) costs
too much. :func:`pack` keeps what continuing needs:

    CARRIED.json                 what is here: the step, epoch and batches done, the training
                                 seconds, each piece's name, size and SHA-256, and the whole
                                 weights file's SHA-256
    config.json, state.json      the resume state's own (the model, the data position, the options)
    metrics.jsonl                the run's per-epoch metrics, when it has them
    rng.safetensors              every process's torch generators
    model.bf16.safetensors.NNN   the weights in bfloat16 (half of float32), cut into pieces of at
                                 most ``piece_bytes`` (default 15 MiB)

:func:`unpack` checks every piece against its digest, joins them, casts the weights back to
float32 and writes a ``resume/`` directory that ``afp train ... --resume`` continues from, at the
batch where the packed run stopped (the data order and the generators are the saved ones). Adam
starts its moment estimates afresh (a warm restart: they settle within a few hundred steps) from
weights rounded to bfloat16 (a relative change of at most 2^-9). A carried state of a GRU-512
with an adaptive input and softmax over 44k words is 16 MB.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, load_file, save, save_file

__all__ = ["CARRIED", "PIECE_BYTES", "CarryError", "pack", "unpack"]

CARRIED = "CARRIED.json"
WEIGHTS = "model.bf16.safetensors"
PIECE_BYTES = 15 << 20
_KEEP = ("config.json", "state.json")


class CarryError(ValueError):
    """A carried state that is missing a piece, damaged, or a run that is already there."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack(run: str | Path, carry: str | Path, piece_bytes: int = PIECE_BYTES) -> dict[str, Any]:
    """Pack ``run``'s ``resume/`` into the folder ``carry`` (replaced whole, atomically); returns
    what ``CARRIED.json`` says."""
    run, carry = Path(run), Path(carry)
    source = run / "resume"
    if not (source / "state.json").is_file():
        raise CarryError(f"{source}: no resume state to pack (afp train saves it every --checkpoint-every-minutes)")
    if piece_bytes < 1:
        raise CarryError(f"piece_bytes must be positive, got {piece_bytes}")
    tmp = carry.with_name(carry.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in _KEEP:
        shutil.copy2(source / name, tmp / name)
    if (run / "metrics.jsonl").is_file():
        shutil.copy2(run / "metrics.jsonl", tmp / "metrics.jsonl")
    weights = save({k: v.to(torch.bfloat16) if v.is_floating_point() else v
                    for k, v in load_file(source / "model.safetensors").items()})
    pieces = []
    for index, start in enumerate(range(0, len(weights), piece_bytes)):
        chunk = weights[start:start + piece_bytes]
        name = f"{WEIGHTS}.{index:03d}"
        (tmp / name).write_bytes(chunk)
        pieces.append({"name": name, "bytes": len(chunk), "sha256": _sha256(chunk)})
    generators = {k: v for k, v in load_file(source / "optimizer.safetensors").items() if k.startswith("rng.")}
    save_file(generators, tmp / "rng.safetensors")
    state = json.loads((source / "state.json").read_text(encoding="utf-8"))
    record = {"format": "afp-carry/1", "step": state["step"], "epoch": state["epoch"],
              "batches_done": state["batches_done"], "seconds": state["seconds"],
              "weights": {"dtype": "bfloat16", "bytes": len(weights), "sha256": _sha256(weights), "pieces": pieces}}
    (tmp / CARRIED).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(carry, ignore_errors=True)
    tmp.rename(carry)
    return record


def unpack(carry: str | Path, run: str | Path) -> dict[str, Any]:
    """Rebuild ``run/resume`` from the packed folder ``carry`` (and ``run/metrics.jsonl``);
    returns what ``CARRIED.json`` says. Refuses to overwrite a resume state that is there."""
    carry, run = Path(carry), Path(run)
    try:
        record = json.loads((carry / CARRIED).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CarryError(f"{carry}: no {CARRIED}: not a packed training state") from None
    target = run / "resume"
    if (target / "state.json").is_file():
        raise CarryError(f"{target}: a resume state is there already (remove it to unpack {carry})")
    parts = []
    for piece in record["weights"]["pieces"]:
        path = carry / piece["name"]
        if not path.is_file():
            raise CarryError(f"{path}: missing piece of the carried weights")
        data = path.read_bytes()
        if _sha256(data) != piece["sha256"]:
            raise CarryError(f"{path}: damaged (its SHA-256 is not the one {CARRIED} records)")
        parts.append(data)
    weights = b"".join(parts)
    if _sha256(weights) != record["weights"]["sha256"]:
        raise CarryError(f"{carry}: the joined weights do not match {CARRIED}'s SHA-256")
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in _KEEP:
        shutil.copy2(carry / name, tmp / name)
    save_file({k: v.to(torch.float32) if v.is_floating_point() else v for k, v in load(weights).items()},
              tmp / "model.safetensors")
    shutil.copy2(carry / "rng.safetensors", tmp / "optimizer.safetensors")  # no moments: Adam restarts them
    if (carry / "metrics.jsonl").is_file():
        shutil.copy2(carry / "metrics.jsonl", run / "metrics.jsonl")
    tmp.rename(target)
    return record
