"""Devices: which one to run on, whether it computes bfloat16 natively, and TF32 matmuls.

Serves training (:mod:`lm.train`), scoring and the service alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

#: every door's device when none is given: the first CUDA device when there is one, else the CPU
DEFAULT_DEVICE = "auto"


def resolve_device(name: str) -> torch.device:
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    if name == DEFAULT_DEVICE:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"device {name!r} requested but this machine has {count} CUDA device(s): "
                         f"cuda:0 to cuda:{count - 1}")
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


@contextmanager
def tf32_matmuls(enabled: bool) -> Iterator[None]:
    """Within the block, float32 CUDA matmuls may use TF32 tensor cores (PyTorch's
    ``torch.backends.cuda.matmul.fp32_precision``, restored afterwards); nothing when not enabled."""
    if not enabled:
        yield
        return
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        matmul.fp32_precision = before
