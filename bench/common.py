"""Shared helpers of the benchmarks: paths, environment record, JSON output."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "bench" / "results"
SHARED_DATA = Path(os.environ.get("AFP_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def python_path(tree: Path = REPO_ROOT) -> str:
    """``PYTHONPATH`` for a child that runs ``tree``'s code: ``tree`` first, then whatever this
    process was given (packages installed beside the interpreter, as on a machine without a venv)."""
    return os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])


def ami_lattice_files() -> list[Path]:
    """The real AMI lattices of ``../shared/data/lattices``: every ``ami-htk/*.lat.gz`` and
    ``ami-kaldi/1.lat``; an empty list when they are absent."""
    files = sorted((SHARED_DATA / "lattices" / "ami-htk").glob("*.lat.gz")) + [SHARED_DATA / "lattices" / "ami-kaldi" / "1.lat"]
    return files if len(files) >= 2 and all(f.is_file() for f in files) else []


def environment() -> dict[str, Any]:
    """What the numbers were measured on: torch version, threads, CPU, GPU name when present."""
    import torch

    env: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), e.g. ``AMD EPYC``; None where it is not told."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def write_text(path: Path, text: str) -> None:
    """Write ``path`` (UTF-8) whole or not at all: a temporary file renamed; its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")  # several benchmark processes may write
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_json(path: Path, data: Any) -> None:
    """``data`` as JSON indented by 1, by :func:`write_text`."""
    write_text(path, json.dumps(data, indent=1) + "\n")


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """How a benchmark was asked for, as its JSON records it: ``python -m MODULE ARGS`` (``argv``
    None: this process's arguments)."""
    return " ".join(["python -m", module, *(sys.argv[1:] if argv is None else argv)])


def shown(path: Path) -> str:
    """``path`` as results show it: relative to the checkout when inside it, else as given."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """A training run's per-epoch metrics (``metrics.jsonl``); empty when it has not started."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def trained(run_dir: Path, epochs: int) -> bool:
    """Whether a training run has ``epochs`` epochs of metrics and its weights: a committed
    ``metrics.jsonl`` without the (gitignored) ``model.safetensors`` must be trained again."""
    return len(read_metrics(run_dir)) >= epochs and (run_dir / "model.safetensors").is_file()


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (imported only by benchmarks that plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, write as PNG and close."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


#: 1-based line ranges of the books of ``books/valid.txt`` the LibriSpeech mixtures use: Little Men
#: (held-out text for mixture weights) and The Portrait of a Lady (the clean evaluation book: the
#: Sherlock Holmes stories between them are partly inside books-large)
BOOKS_EM_LINES = (1, 4406)
BOOKS_PORTRAIT_LINES = (10572, 17246)


def afp(*argv: str) -> str:
    """Run this checkout's ``afp`` command; its stdout (a failure stops the benchmark with its stderr)."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", "service.cli", *argv], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"afp {' '.join(argv)} failed:\n{done.stderr}")
    return done.stdout


def afp_ppl(model: Path, text: Path) -> dict[str, Any]:
    """``afp ppl --model MODEL --text TEXT --json``: ``{"ppl", "tokens", "oov", ...}``."""
    return json.loads(afp("ppl", "--model", str(model), "--text", str(text), "--json").strip().splitlines()[-1])


def line_range(path: Path, first: int, last: int | None, out: Path) -> Path:
    """Lines ``first..last`` (1-based, inclusive; ``None``: to the end) of ``path``, written to ``out``."""
    write_text(out, "".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[first - 1:last]))
    return out


def cast_weights(weights: Path, target: Path, dtype: str = "bfloat16") -> None:
    """``weights`` (a model's safetensors) written to ``target`` with its floating-point tensors as
    ``dtype``: ``bfloat16`` stores a model in half the size (a model loads it as float32);
    ``float32`` makes kept bfloat16 weights a model directory's ``model.safetensors`` again."""
    import torch
    from safetensors.torch import load_file, save_file

    cast = getattr(torch, dtype)
    tensors = {k: v.to(cast) if v.is_floating_point() else v for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(target), metadata={"format": "afp-rescore/1"})
