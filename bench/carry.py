"""Carry a long training run from one working session to the next through git.

  python -m bench.carry pack runs/books-large/gru-h256-rho4 bench/results/books-large/carry
  python -m bench.carry unpack bench/results/books-large/carry runs/books-large/gru-h256-rho4

A session's checkout is fresh: only what is committed survives it. A run's ``resume/`` state is
the model (float32), Adam's moments (twice the model) and the generators; committing all of it
every session would add hundreds of MB to the repository. ``pack`` keeps the model in bfloat16
(half its size), the generators, the run's ``state.json``, ``config.json`` and ``metrics.jsonl``,
and drops Adam's moments. ``unpack`` rebuilds a ``resume/`` directory that ``afp train --resume``
continues from, exactly at the batch where it stopped: the data order and the generators are the
saved ones. Adam starts its moment estimates afresh (a warm restart: they settle within a few
hundred steps) from weights rounded to bfloat16 (a relative change of at most 2^-9). The run's
``metrics.jsonl`` says where each session picked up (``carried``).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

RESUME = "resume"
KEEP = ("config.json", "state.json")


def cast(source: Path, target: Path, dtype: torch.dtype) -> None:
    """The safetensors file ``source`` written to ``target`` with its floating tensors as ``dtype``
    (a kept ``model.bf16.safetensors`` back to a float32 ``model.safetensors`` that a model
    directory loads, or the other way)."""
    weights = load_file(source)
    save_file({k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}, target)


def pack(run: Path, carry: Path) -> None:
    source = run / RESUME
    if not (source / "state.json").is_file():
        raise SystemExit(f"{source}: no resume state to pack")
    tmp = carry.with_name(carry.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in KEEP:
        shutil.copy2(source / name, tmp / name)
    cast(source / "model.safetensors", tmp / "model.bf16.safetensors", torch.bfloat16)
    generators = {k: v for k, v in load_file(source / "optimizer.safetensors").items() if k.startswith("rng.")}
    save_file(generators, tmp / "rng.safetensors")
    if (run / "metrics.jsonl").is_file():
        shutil.copy2(run / "metrics.jsonl", tmp / "metrics.jsonl")
    state = json.loads((source / "state.json").read_text())
    (tmp / "CARRIED.json").write_text(json.dumps({"step": state["step"], "epoch": state["epoch"],
                                                  "batches_done": state["batches_done"],
                                                  "seconds": state["seconds"]}, indent=1) + "\n")
    shutil.rmtree(carry, ignore_errors=True)
    tmp.rename(carry)
    print(f"packed {source} (step {state['step']}) into {carry}")


def unpack(carry: Path, run: Path) -> None:
    target = run / RESUME
    if (target / "state.json").is_file():
        raise SystemExit(f"{target} exists: the run is already here (remove it to unpack the carried state)")
    target.mkdir(parents=True)
    for name in KEEP:
        shutil.copy2(carry / name, target / name)
    cast(carry / "model.bf16.safetensors", target / "model.safetensors", torch.float32)
    shutil.copy2(carry / "rng.safetensors", target / "optimizer.safetensors")  # no moments: Adam restarts them
    if (carry / "metrics.jsonl").is_file():
        shutil.copy2(carry / "metrics.jsonl", run / "metrics.jsonl")
    print(f"unpacked {carry} into {target}: continue with afp train ... --resume")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["pack", "unpack"])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    (pack if args.action == "pack" else unpack)(args.source, args.target)


if __name__ == "__main__":
    main()
