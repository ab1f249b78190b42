"""Sortable keys of n-gram rows, shared by the Kneser-Ney builder, the store and pruning (so that
none of them imports another for it): :class:`Packer` packs rows of word ids into keys whose
order is the rows' order, :func:`find_keys` looks keys up in a sorted array."""

from __future__ import annotations

import numpy as np

__all__ = ["Packer", "find_keys"]


class Packer:
    """Rows of ``n`` ids (each below ``2**bits``) as sortable keys, row order = key order."""

    def __init__(self, n: int, bits: int) -> None:
        self.n, self.bits = n, bits
        self.wide = n * bits > 64

    def pack(self, rows: np.ndarray) -> np.ndarray:
        """int ``(N, n)`` -> keys ``(N,)``."""
        if self.wide:
            data = np.ascontiguousarray(rows.astype(">u4"))
            return data.view(np.dtype((np.void, 4 * self.n))).ravel()
        keys = np.zeros(rows.shape[0], dtype=np.uint64)
        for column in range(self.n):
            keys = (keys << np.uint64(self.bits)) | rows[:, column].astype(np.uint64)
        return keys

    def unpack(self, keys: np.ndarray) -> np.ndarray:
        """keys ``(N,)`` -> int64 ``(N, n)``."""
        if self.wide:
            return np.frombuffer(keys.tobytes(), dtype=">u4").reshape(-1, self.n).astype(np.int64)
        mask = np.uint64((1 << self.bits) - 1)
        out = np.empty((keys.shape[0], self.n), dtype=np.int64)
        for column in range(self.n - 1, -1, -1):
            out[:, column] = (keys & mask).astype(np.int64)
            keys = keys >> np.uint64(self.bits)
        return out


def find_keys(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions int64 ``(M,)`` of ``wanted`` ``(M,)`` in sorted ``keys`` ``(K,)``, and bool
    ``(M,)`` whether each is there (positions of absent ones are meaningless)."""
    if keys.shape[0] == 0:
        return np.zeros(wanted.shape[0], dtype=np.int64), np.zeros(wanted.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(keys, wanted), keys.shape[0] - 1)
    return at, keys[at] == wanted
