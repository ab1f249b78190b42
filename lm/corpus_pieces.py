"""A prepared corpus (:mod:`lm.shards`) in compressed pieces, for a machine that starts bare: a
lent GPU whose every call carries at most 64 MiB. The 71M tokens of the books corpus are 285 MB
as ``afp prepare`` writes them and about 92 MB in pieces.

:func:`pack` writes ``PIECES.json`` (the prepared ``meta.json`` and every piece's name, split,
sentences, words, bytes and SHA-256), the ``words.txt``, and ``corpus-NNN.npz`` pieces of at most
``piece_bytes`` each: numpy's compressed archives (zip, deflate) of

    tokens   uint16 ``(W,)`` when the vocabulary has fewer than 65,535 words (uint32 otherwise):
             word ids, an OOV word as the dtype's largest value
    lengths  uint16 ``(S,)`` (uint32 when a sentence has more than 65,535 words): each sentence's words

A piece holds whole sentences of one shard. :func:`unpack` checks every piece against its digest
and writes the prepared directory back, one shard per piece: ``afp train --data`` reads it as
it read the original (the same sentences in the same order, so the same batches and the same
resume positions).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from lm.carry import digest, fresh_folder, put_in_place, read_piece
from lm.shards import META, OFFSET_DTYPE, OOV_ID, TOKEN_DTYPE, VOCAB, open_prepared

__all__ = ["PIECES", "PIECE_BYTES", "PiecesError", "pack", "unpack"]

PIECES = "PIECES.json"
PIECE_BYTES = 60 << 20
_BYTES_PER_WORD = 1.6  # a first guess at a compressed word's size; a piece over the limit is cut in two


class PiecesError(ValueError):
    """A missing or damaged piece, or a target that already holds prepared data."""


def pack(prepared: str | Path, out: str | Path, piece_bytes: int = PIECE_BYTES) -> dict[str, Any]:
    """Pack the prepared directory ``prepared`` into ``out`` (replaced whole); returns the record."""
    data = open_prepared(prepared)
    out = Path(out)
    tmp = fresh_folder(out)
    shutil.copy2(data.directory / VOCAB, tmp / VOCAB)
    wide = data.vocab.size >= np.iinfo(np.uint16).max
    pieces: list[dict[str, Any]] = []
    for split, corpus in (("train", data.train), ("valid", data.valid)):
        for shard in corpus.shards if corpus is not None else ():
            first = 0
            while first < shard.sentences:
                first = _write_pieces(tmp, split, shard, first, piece_bytes, wide, pieces)
    record = {"format": "afp-corpus-pieces/1", "meta": data.meta, "pieces": pieces}
    (tmp / PIECES).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    put_in_place(tmp, out)
    return record


def _write_pieces(out: Path, split: str, shard: Any, first: int, piece_bytes: int, wide: bool,
                  pieces: list[dict[str, Any]]) -> int:
    """One piece from sentence ``first`` of ``shard`` (as many sentences as may fit, fewer when it
    comes out over ``piece_bytes``); returns the next sentence."""
    offsets = shard.offsets
    budget = int(offsets[first]) + max(1, int(piece_bytes / _BYTES_PER_WORD))
    last = max(first + 1, int(np.searchsorted(offsets, budget, side="right")) - 1)
    last = min(last, shard.sentences)
    while True:
        start, end = int(offsets[first]), int(offsets[last])
        ids = np.asarray(shard.tokens[start:end])
        dtype = np.uint32 if wide else np.uint16
        tokens = np.where(ids == OOV_ID, np.iinfo(dtype).max, ids).astype(dtype)
        lengths = np.diff(offsets[first:last + 1])
        lengths = lengths.astype(np.uint16 if int(lengths.max()) <= np.iinfo(np.uint16).max else np.uint32)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, tokens=tokens, lengths=lengths)
        blob = buffer.getvalue()
        if len(blob) <= piece_bytes or last == first + 1:
            break
        last = first + (last - first) // 2
    name = f"corpus-{len(pieces):03d}.npz"
    (out / name).write_bytes(blob)
    pieces.append({"name": name, "split": split, "sentences": last - first, "words": end - start,
                   "oov": int(np.count_nonzero(ids == OOV_ID)), "bytes": len(blob),
                   "sha256": digest(blob)})
    return last


def unpack(pieces_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the prepared directory ``out`` from the pieces in ``pieces_dir`` (each checked);
    returns its ``meta.json``. ``out`` must not hold prepared data."""
    pieces_dir, out = Path(pieces_dir), Path(out)
    try:
        record = json.loads((pieces_dir / PIECES).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PiecesError(f"{pieces_dir}: no {PIECES}: not a packed corpus") from None
    if (out / META).is_file():
        raise PiecesError(f"{out}: already holds prepared data ({META})")
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads(json.dumps(record["meta"]))
    shards: dict[str, list[dict[str, Any]]] = {split: [] for split in meta["splits"]}
    for piece in record["pieces"]:
        blob = read_piece(pieces_dir / piece["name"], piece["sha256"], PIECES, PiecesError)
        with np.load(io.BytesIO(blob)) as arrays:
            tokens, lengths = arrays["tokens"], arrays["lengths"]
        ids = tokens.astype(TOKEN_DTYPE)
        ids[tokens == np.iinfo(tokens.dtype).max] = OOV_ID
        stem = f"{piece['split']}-{len(shards[piece['split']]):05d}"
        ids.tofile(out / f"{stem}.tokens.int32")
        np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(OFFSET_DTYPE).tofile(out / f"{stem}.offsets.int64")
        shards[piece["split"]].append({"tokens": f"{stem}.tokens.int32", "offsets": f"{stem}.offsets.int64",
                                       "sentences": piece["sentences"], "words": piece["words"], "oov": piece["oov"]})
    for split, entries in shards.items():
        meta["splits"][split]["shards"] = entries
    shutil.copy2(pieces_dir / VOCAB, out / VOCAB)
    (out / f"{META}.tmp").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    (out / f"{META}.tmp").replace(out / META)
    open_prepared(out)  # the sizes, ids and offsets checked as afp train will read them
    return meta
