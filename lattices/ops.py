"""Small tensor operations the lattice algorithms share (all on whole tensors, any device)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

# odd 63-bit multipliers of the row hash (one per column; more columns reuse them rotated)
_MULTIPLIERS = (0x5851F42D4C957F2D, 0x2545F4914F6CDD1D, 0x3C6EF372FE94F82B, 0x1B873593A5F0D3C3,
                0x61C8864680B583EB, 0x165667B19E3779F9, 0x27D4EB2F165667C5, 0x0CF1BBCDCB7A5635)


def _row_keys(rows: Any) -> Any:
    """A 64-bit hash of each row of an int64 ``(N, W)`` matrix (a torch tensor or a numpy array:
    the same operators on both; int64 arithmetic wraps around)."""
    key = rows[:, 0] * 0
    for column in range(rows.shape[1]):
        multiplier = _MULTIPLIERS[column % len(_MULTIPLIERS)]
        key = (key ^ (key >> 29)) * multiplier + rows[:, column]
    return key


def unique_rows(rows: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct rows of an int64 ``(N, W)`` matrix and each row's index among them.

    Same result as ``torch.unique(rows, dim=0, return_inverse=True)`` up to the order of the
    distinct rows, but through a 1-D unique of a row hash, which is much faster. Exact: if two
    different rows ever share a hash, it falls back to ``torch.unique(dim=0)``.
    """
    if rows.shape[0] == 0:
        return rows, torch.zeros(0, dtype=torch.int64, device=rows.device)
    keys, inverse = torch.unique(_row_keys(rows), return_inverse=True)
    first = torch.full((keys.shape[0],), rows.shape[0], dtype=torch.int64, device=rows.device)
    first = first.scatter_reduce(0, inverse, torch.arange(rows.shape[0], device=rows.device), reduce="amin")
    distinct = rows[first]
    if not torch.equal(distinct[inverse], rows):  # a hash collision: be exact
        return torch.unique(rows, dim=0, return_inverse=True)
    return distinct, inverse


def unique_rows_np(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique_rows` of a numpy int64 ``(N, W)`` matrix (same hash, same order of the
    distinct rows), for the passes that run in numpy on the CPU (:mod:`lattices.topology`)."""
    if rows.shape[0] <= 1:
        return rows, np.zeros(rows.shape[0], dtype=np.int64)
    with np.errstate(over="ignore"):
        keys = _row_keys(rows)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    distinct = rows[first]
    if not np.array_equal(distinct[inverse], rows):  # a hash collision: be exact
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    return distinct, inverse.reshape(-1)


class DeadlineExceeded(TimeoutError):
    """Work given a deadline (``time.monotonic()`` seconds) ran past it."""


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`DeadlineExceeded` once ``time.monotonic()`` passes ``deadline`` (None: never)."""
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded("the time allowed for this work ran out")
