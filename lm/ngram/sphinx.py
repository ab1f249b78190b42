"""PocketSphinx's binary trie language model (``*.lm.bin``, the ``en-us.lm.bin`` its decoder ships),
read into arrays and written as ARPA: the decoder's own LM, to subtract as the old LM (``--old-lm``)
when rescoring its lattices. PocketSphinx's own ARPA writer crashes on ``en-us.lm.bin`` (its header
over-counts the 2-grams by 6); this reader takes each level's true size from the trie itself.

The trie holds the 2-grams PocketSphinx inserted so that every 3-gram is reachable (probability:
the back-off value quantized to a 2-gram bin; back-off weight 0), so the model written is the
decoder's exactly, quantized values included. Values are stored in units of log base 1.0001
(:data:`LOG10_BASE` log10 each).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lm.ngram.arpa import write_arpa_file

__all__ = ["LOG10_BASE", "SphinxTrie", "read_sphinx_trie", "write_trie_arpa"]

#: one unit of PocketSphinx's log base 1.0001, in log10
LOG10_BASE = math.log10(1.0001)
_TRIE_MAGIC = b"Trie Language Model"
_QUANT_BITS = 16


@dataclass(frozen=True)
class SphinxTrie:
    """A PocketSphinx/sphinxbase binary trie LM (``*.lm.bin``) read into arrays.

    ``words``: the unigrams, id order. ``grams[n-1]``: int64 ``(count_n, n)`` word ids in ARPA
    order (history first). ``log10_probs[n-1]``, ``log10_backoffs[n-1]``: float64 ``(count_n,)``
    (back-offs all 0 for the highest order). ``header_counts``: the counts the file claims.
    """

    words: tuple[str, ...]
    grams: list[np.ndarray]
    log10_probs: list[np.ndarray]
    log10_backoffs: list[np.ndarray]
    header_counts: tuple[int, ...]


def _bits(max_value: int) -> int:
    return int(max_value).bit_length()


def _bitfield(mem: np.ndarray, start: int, count: int, total_bits: int, offset: int, width: int) -> np.ndarray:
    """Field ``offset .. offset + width`` bits of ``count`` little-endian packed records of
    ``total_bits`` each, from byte ``start`` (sphinxbase's ``bitarr_read_int25/57``)."""
    if width == 0:
        return np.zeros(count, dtype=np.int64)
    bit = np.arange(count, dtype=np.uint64) * np.uint64(total_bits) + np.uint64(offset)
    byte = (bit >> np.uint64(3)).astype(np.int64) + start
    value = np.zeros(count, dtype=np.uint64)
    for k in range(8):
        value |= mem[byte + k].astype(np.uint64) << np.uint64(8 * k)
    return ((value >> (bit & np.uint64(7))) & np.uint64((1 << width) - 1)).astype(np.int64)


def read_sphinx_trie(path: str | Path) -> SphinxTrie:
    """Read a trie ``lm.bin`` (the layout of pocketsphinx 5's ``lm_trie.c``/``lm_trie_quant.c``,
    little-endian): the magic ``Trie Language Model``; order (uint8); counts (uint32 each); an
    int32; the quantization tables (float32: per middle order 2^16 probability then 2^16 back-off
    centres, then 2^16 for the highest order); ``count_1 + 1`` unigrams ``(prob f32, backoff f32,
    next u32)``; per middle order ``(1 + count_n)`` packed records ``word | backoff code (16) | prob
    code (16) | next``, and for the highest order ``word | prob code``, each array padded to bytes
    plus 8; then the words (uint32 byte count, NUL-terminated strings). Values are in log base
    1.0001. The trie is keyed by the *last* word first: the path ``w3 -> w2 -> w1`` is the 3-gram
    ``w1 w2 w3``. A level's true size is the parent level's last ``next`` pointer."""
    data = Path(path).read_bytes()
    if not data.startswith(_TRIE_MAGIC):
        raise ValueError(f"{path}: not a PocketSphinx trie LM (no {_TRIE_MAGIC.decode()!r} header)")
    pos = len(_TRIE_MAGIC)
    order = data[pos]
    counts = struct.unpack_from(f"<{order}I", data, pos + 1)
    pos += 1 + 4 * order + 4
    num_quant = (order - 2) * 2 * (1 << _QUANT_BITS) + (1 << _QUANT_BITS)
    quant = np.frombuffer(data, dtype="<f4", count=num_quant, offset=pos).astype(np.float64)
    pos += 4 * num_quant
    unigrams = np.frombuffer(data, dtype=[("prob", "<f4"), ("bo", "<f4"), ("next", "<u4")], count=counts[0] + 1,
                             offset=pos)
    pos += 12 * (counts[0] + 1)
    mem = np.frombuffer(data, dtype=np.uint8)
    word_bits = _bits(counts[0])
    paths = [np.arange(counts[0], dtype=np.int64)[:, None]]  # trie paths, last word first
    probs = [unigrams["prob"][:-1].astype(np.float64)]
    backoffs = [unigrams["bo"][:-1].astype(np.float64)]
    next_pointers = unigrams["next"].astype(np.int64)
    for n in range(2, order + 1):
        size = int(next_pointers[-1])
        middle = n < order
        next_bits = _bits(counts[n]) if middle else 0
        total = word_bits + (2 * _QUANT_BITS + next_bits if middle else _QUANT_BITS)
        parents = np.searchsorted(next_pointers, np.arange(size), side="right") - 1
        words = _bitfield(mem, pos, size, total, 0, word_bits)
        paths.append(np.concatenate([paths[-1][parents], words[:, None]], axis=1))
        table = (n - 2) * 2 * (1 << _QUANT_BITS)
        if middle:
            backoffs.append(quant[table + (1 << _QUANT_BITS) + _bitfield(mem, pos, size, total, word_bits, 16)])
            probs.append(quant[table + _bitfield(mem, pos, size, total, word_bits + 16, 16)])
            next_pointers = _bitfield(mem, pos, size + 1, total, word_bits + 32, next_bits)
        else:
            backoffs.append(np.zeros(size))
            probs.append(quant[table + _bitfield(mem, pos, size, total, word_bits, 16)])
        pos += ((1 + counts[n - 1]) * total + 7) // 8 + 8
    (num_bytes,) = struct.unpack_from("<I", data, pos)
    words_text = data[pos + 4:pos + 4 + num_bytes].decode("utf-8").split("\0")
    if len(words_text) != counts[0] + 1 or words_text[-1] or pos + 4 + num_bytes != len(data):
        raise ValueError(f"{path}: trie layout not understood (word table at byte {pos} does not fit)")
    grams = [p[:, ::-1].copy() for p in paths]
    return SphinxTrie(tuple(words_text[:-1]), grams, [p * LOG10_BASE for p in probs],
                      [b * LOG10_BASE for b in backoffs], tuple(counts))


def write_trie_arpa(trie: SphinxTrie, out: str | Path) -> None:
    """The trie as an ARPA file (:func:`lm.ngram.arpa.write_arpa_file`, gzip for ``.gz``), each
    order sorted by word ids."""
    words = np.array(trie.words, dtype=object)

    def sections() -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        for n, (grams, probs, backoffs) in enumerate(zip(trie.grams, trie.log10_probs, trie.log10_backoffs), 1):
            order = np.lexsort(grams.T[::-1])
            yield n, probs[order], words[grams[order]], backoffs[order] if n < len(trie.grams) else \
                np.full(order.shape[0], np.nan)

    write_arpa_file(out, [len(g) for g in trie.grams], sections())
