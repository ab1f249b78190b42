"""Lattice file formats: Kaldi text, HTK SLF, k2 dicts, OpenFst text and JSON.

Each format module reads into :class:`lattices.lattice.Lattice` objects and writes them back;
malformed input raises :class:`lattices.lattice.LatticeFormatError` naming the source, lattice
key, line and field. This module dispatches by format name, undoes gzip, and guesses a format
from content when asked to (``"auto"``).

  ``read_lattices(data, "kaldi", symbols)``   bytes or text -> list of lattices
  ``write_lattices(lattices, "htk")``         lattices -> bytes (one SLF each for HTK: see there)
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Sequence
from pathlib import Path

from lattices.lattice import Lattice, LatticeFormatError

FORMATS = ("kaldi", "htk", "k2", "openfst", "json")


def _decode(data: bytes | str, source: str | None) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LatticeFormatError(f"not UTF-8 text (byte {err.start}); binary Kaldi archives must be converted "
                                 f"with 'lattice-copy ark:IN ark,t:OUT'", source=source) from None


def maybe_gunzip(data: bytes | str, source: str | None = None) -> bytes | str:
    """Decompress gzip data (detected by its magic bytes); anything else is returned as it is."""
    if isinstance(data, bytes) and data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise LatticeFormatError(f"corrupt gzip data: {err}", source=source) from None
    return data


def guess_format(data: bytes | str) -> str:
    """The most likely format of (decompressed) lattice data, from its first lines."""
    if isinstance(data, bytes):
        if data[:2] == b"PK" or data[:1] == b"\x80":
            return "k2"  # torch.save zip archive (or a legacy pickle, which read_k2 refuses)
        data = data[:4096].decode("utf-8", errors="replace")
    head = data.lstrip()
    if head[:1] in "{[":
        return "json"
    lines = [line for line in head.splitlines()[:40] if line.strip() and not line.lstrip().startswith("#")]
    if any(line.split("=")[0].strip() in ("VERSION", "UTTERANCE", "N", "lmscale", "base") for line in lines if "=" in line):
        return "htk"
    if lines and not lines[0].split()[0].lstrip("-").isdigit():
        return "kaldi"  # a key line first
    return "openfst"


def read_lattices(data: bytes | str, fmt: str = "auto", symbols: Sequence[str] | None = None,
                  source: str | None = None, key: str | None = None) -> list[Lattice]:
    """Parse lattices of format ``fmt`` (one of :data:`FORMATS` or ``"auto"``).

    ``symbols`` is the word symbol table (id -> word) for formats that store integer word ids
    (Kaldi ``.int`` archives, OpenFst, k2). ``key`` names a lattice in formats without keys
    (OpenFst, k2); it defaults to the source's file name.
    """
    data = maybe_gunzip(data, source)
    if fmt == "auto":
        fmt = guess_format(data)
    if key is None:
        key = Path(source).name.split(".")[0] if source else "lattice"
    if fmt == "kaldi":
        from lattices.formats.kaldi import read_kaldi

        return read_kaldi(_decode(data, source), symbols, source)
    if fmt == "htk":
        from lattices.formats.htk import read_htk

        return [read_htk(_decode(data, source), source)]
    if fmt == "openfst":
        from lattices.formats.openfst import read_openfst

        return [read_openfst(_decode(data, source), symbols, source, key=key)]
    if fmt == "k2":
        from lattices.formats.k2 import load_k2_bytes

        return load_k2_bytes(data if isinstance(data, bytes) else data.encode(), symbols, source, key=key)
    if fmt == "json":
        return read_json_lattices(_decode(data, source), source)
    raise LatticeFormatError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)} or auto", source=source)


def read_json_lattices(text: str, source: str | None = None) -> list[Lattice]:
    """One lattice object, a list of them, or ``{"lattices": [...]}``."""
    from lattices.formats.jsonfmt import lattice_from_json

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise LatticeFormatError(f"invalid JSON: {err.msg}", source=source, line=err.lineno) from None
    if isinstance(obj, dict) and "lattices" in obj:
        obj = obj["lattices"]
    items = obj if isinstance(obj, list) else [obj]
    out = []
    for i, item in enumerate(items):
        try:
            out.append(lattice_from_json(item, source))
        except LatticeFormatError as err:
            raise (err if isinstance(obj, dict) else LatticeFormatError(
                err.reason, source=source, key=err.key, field=f"[{i}]" + (f".{err.field}" if err.field else ""))) from None
    return out


def read_lattice_file(path: str | Path, fmt: str = "auto", symbols: Sequence[str] | None = None) -> list[Lattice]:
    """Read a lattice file (gzip or not)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LatticeFormatError("no such file", source=str(path)) from None
    except OSError as err:
        raise LatticeFormatError(f"cannot read: {err.strerror}", source=str(path)) from None
    return read_lattices(data, fmt, symbols, source=str(path))


def write_lattices(lattices: Sequence[Lattice], fmt: str) -> bytes:
    """Serialize lattices in ``fmt``. HTK and OpenFst hold one lattice per file: several are
    written one after another, each ending with a blank line, which is how this project reads
    them back only one at a time; use :func:`write_lattice_files` for one file each."""
    if fmt == "kaldi":
        from lattices.formats.kaldi import write_kaldi

        return write_kaldi(lattices).encode("utf-8")
    if fmt == "htk":
        from lattices.formats.htk import write_htk

        return "\n".join(write_htk(lattice) for lattice in lattices).encode("utf-8")
    if fmt == "openfst":
        from lattices.formats.openfst import write_openfst

        return "\n".join(write_openfst(lattice) for lattice in lattices).encode("utf-8")
    if fmt == "k2":
        import torch

        from lattices.formats.k2 import write_k2

        buffer = io.BytesIO()
        torch.save(write_k2(lattices), buffer)
        return buffer.getvalue()
    if fmt == "json":
        from lattices.formats.jsonfmt import lattice_to_json

        items = [lattice_to_json(lattice) for lattice in lattices]
        return (json.dumps(items[0] if len(items) == 1 else {"lattices": items}) + "\n").encode("utf-8")
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
