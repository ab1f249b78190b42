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

__all__ = ["CARRIED", "PIECE_BYTES", "CarryError", "digest", "fresh_folder", "pack", "put_in_place", "read_piece",
           "unpack"]

CARRIED = "CARRIED.json"
WEIGHTS = "model.bf16.safetensors"
PIECE_BYTES = 15 << 20
_KEEP = ("config.json", "state.json")


class CarryError(ValueError):
    """A carried state that is missing a piece, damaged, or a run that is already there."""


def digest(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex: what a manifest records of each piece."""
    return hashlib.sha256(data).hexdigest()


def read_piece(path: Path, sha256: str, manifest: str, error: type[ValueError] = CarryError) -> bytes:
    """The bytes of the piece ``path``, checked against the ``sha256`` that ``manifest`` records;
    ``error`` naming the file when it is missing or damaged."""
    if not path.is_file():
        raise error(f"{path}: missing piece (listed in {manifest})")
    data = path.read_bytes()
    if digest(data) != sha256:
        raise error(f"{path}: damaged (its SHA-256 is not the one {manifest} records)")
    return data


def fresh_folder(final: Path) -> Path:
    """An empty folder beside ``final`` to write into before :func:`put_in_place` (a leftover of
    an interrupted write removed)."""
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def put_in_place(tmp: Path, final: Path) -> None:
    """The whole folder ``tmp`` becomes ``final`` (what was there replaced)."""
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def _cast(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}


def pack(run: str | Path, carry: str | Path, piece_bytes: int = PIECE_BYTES) -> dict[str, Any]:
    """Pack ``run``'s ``resume/`` into the folder ``carry`` (replaced whole, atomically); returns
    what ``CARRIED.json`` says."""
    run, carry = Path(run), Path(carry)
    source = run / "resume"
    if not (source / "state.json").is_file():
        raise CarryError(f"{source}: no resume state to pack (afp train saves it every --checkpoint-every-minutes)")
    if piece_bytes < 1:
        raise CarryError(f"piece_bytes must be positive, got {piece_bytes}")
    tmp = fresh_folder(carry)
    _copy_state(source, run, tmp, tmp)
    weights = save(_cast(load_file(source / "model.safetensors"), torch.bfloat16))
    pieces = []
    for index, start in enumerate(range(0, len(weights), piece_bytes)):
        chunk = weights[start:start + piece_bytes]
        name = f"{WEIGHTS}.{index:03d}"
        (tmp / name).write_bytes(chunk)
        pieces.append({"name": name, "bytes": len(chunk), "sha256": digest(chunk)})
    generators = {k: v for k, v in load_file(source / "optimizer.safetensors").items() if k.startswith("rng.")}
    save_file(generators, tmp / "rng.safetensors")
    state = json.loads((source / "state.json").read_text(encoding="utf-8"))
    record = {"format": "afp-carry/1", "step": state["step"], "epoch": state["epoch"],
              "batches_done": state["batches_done"], "seconds": state["seconds"],
              "weights": {"dtype": "bfloat16", "bytes": len(weights), "sha256": digest(weights), "pieces": pieces}}
    (tmp / CARRIED).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    put_in_place(tmp, carry)
    return record


def _copy_state(source: Path, run: Path, to: Path, metrics_to: Path) -> None:
    """The resume state's own files (:data:`_KEEP`) from ``source`` into ``to``, and the run's
    ``metrics.jsonl`` (in ``run``) into ``metrics_to`` when there is one."""
    for name in _KEEP:
        shutil.copy2(source / name, to / name)
    if (run / "metrics.jsonl").is_file():
        shutil.copy2(run / "metrics.jsonl", metrics_to / "metrics.jsonl")


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
    weights = b"".join(read_piece(carry / piece["name"], piece["sha256"], CARRIED)
                       for piece in record["weights"]["pieces"])
    if digest(weights) != record["weights"]["sha256"]:
        raise CarryError(f"{carry}: the joined weights do not match {CARRIED}'s SHA-256")
    tmp = fresh_folder(target)
    _copy_state(carry, carry, tmp, run)
    save_file(_cast(load(weights), torch.float32), tmp / "model.safetensors")
    shutil.copy2(carry / "rng.safetensors", tmp / "optimizer.safetensors")  # no moments: Adam restarts them
    tmp.rename(target)
    return record
