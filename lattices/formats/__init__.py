"""Lattice file formats: Kaldi text and binary, HTK SLF, k2 dicts, OpenFst text and JSON; n-best lists.

Each format module reads into :class:`lattices.lattice.Lattice` objects and writes them back;
malformed input raises :class:`lattices.lattice.LatticeFormatError` naming the source, lattice
key, line and field. This module dispatches by format name, undoes gzip, and guesses a format
from content when asked to (``"auto"``).

  ``read_lattices(data, "kaldi", symbols)``   bytes or text -> list of lattices
  ``read_json_value(obj, "auto", symbols)``   a parsed JSON value (a lattice, an n-best list, a
                                              k2 dict, or a list of them) -> list of lattices
  ``read_lattice_file(path, "auto")``        a file, or an ESPnet n-best directory
  ``write_lattices(lattices, "htk")``         lattices -> bytes (one SLF each for HTK: see there)
  ``output_format("auto", lattice)``          the format a rescored lattice goes back in

Kaldi archives are text (``ark,t:``) or binary (``ark:``, what decoders write to ``lat.*.gz``):
bytes that start with a key, a space and an OpenFst FST are read by
:mod:`lattices.formats.kaldi_binary`, and ``write_lattices(lattices, "kaldi", binary=True)``
writes that form.

N-best lists are read as lattices too (:mod:`lattices.formats.nbest`: each list becomes a
lattice whose paths are its hypotheses): ``"nbest-json"`` and ``"srilm-nbest"`` are formats of
:func:`read_lattices`, and ``"espnet-nbest"`` is a *directory* format: :func:`read_lattice_file`
given an ESPnet decode folder (``1best_recog/``, ``2best_recog/``...) reads it. They are read
only (:data:`READ_FORMATS`); :data:`FORMATS` are the formats that are read and written.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattices.lattice import Lattice, LatticeFormatError
from lattices.ops import check_deadline

if TYPE_CHECKING:
    from lattices.formats.nbest import NBestList

FORMATS = ("kaldi", "htk", "k2", "openfst", "json")
#: formats that can be read: :data:`FORMATS` and the n-best forms ("espnet-nbest" names a directory)
READ_FORMATS = (*FORMATS, "nbest-json", "srilm-nbest", "espnet-nbest")
_NBEST_JSON = re.compile(r'"(?:hypotheses|nbest)"\s*:')
_LATTICE_JSON = re.compile(r'"(?:arcs|finals|lattices)"\s*:')


def _decode(data: bytes | str, source: str | None) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LatticeFormatError(f"not UTF-8 text (byte {err.start}), nor a binary Kaldi archive (a key, a space, "
                                 "then an OpenFst binary FST) or a k2 file (torch.save)", source=source) from None


def maybe_gunzip(data: bytes | str, source: str | None = None) -> bytes | str:
    """Decompress gzip data (detected by its magic bytes); anything else is returned as it is."""
    if isinstance(data, bytes) and data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise LatticeFormatError(f"corrupt gzip data: {err}", source=source) from None
    return data


def guess_format(data: bytes | str) -> str:
    """The most likely format of (decompressed) lattice data, from its first lines.

    JSON is ``"nbest-json"`` when a ``"hypotheses"`` or ``"nbest"`` name comes before any
    ``"arcs"``, ``"finals"`` or ``"lattices"`` name in the first 4096 characters, else
    ``"json"``. Text is ``"srilm-nbest"`` when its first non-blank line is an ``NBestList1.0`` /
    ``NBestList2.0`` header or a ``(bytelog)`` score, or when every line looks like
    ``number number nwords w1 .. w_nwords`` (not two state ids, as OpenFst arcs start). Bytes
    that start with a key, a space and an OpenFst FST are a binary Kaldi archive (``"kaldi"``);
    blank data is an empty Kaldi archive (``"kaldi"``: no lattices)."""
    if isinstance(data, bytes):
        from lattices.formats.kaldi_binary import looks_like_kaldi_binary

        if looks_like_kaldi_binary(data):
            return "kaldi"
        if data[:2] == b"PK" or data[:1] == b"\x80":
            return "k2"  # torch.save zip archive (or a legacy pickle, which read_k2 refuses)
        data = data[:4096].decode("utf-8", errors="replace")
    head = data.lstrip()
    if not head:
        return "kaldi"
    if head[0] in "{[":
        window = head[:4096]
        nbest, lattice = _NBEST_JSON.search(window), _LATTICE_JSON.search(window)
        if nbest and (lattice is None or nbest.start() < lattice.start()):
            return "nbest-json"
        return "json"
    if _looks_like_srilm(head):
        return "srilm-nbest"
    lines = [line for line in head.splitlines()[:40] if line.strip() and not line.lstrip().startswith("#")]
    if any(line.split("=")[0].strip() in ("VERSION", "UTTERANCE", "N", "lmscale", "base") for line in lines if "=" in line):
        return "htk"
    if lines and not lines[0].split()[0].lstrip("-").isdigit():
        return "kaldi"  # a key line first
    return "openfst"


def _looks_like_srilm(head: str) -> bool:
    from lattices.formats.nbest import looks_like_srilm_nbest

    window = head[:4096]
    lines = window.splitlines()
    if len(head) > len(window) and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut
    return looks_like_srilm_nbest([line for line in lines[:40] if line.strip()])


def read_lattices(data: bytes | str, fmt: str = "auto", symbols: Sequence[str] | None = None,
                  source: str | None = None, key: str | None = None, deadline: float | None = None,
                  keep: Callable[[], bool] | None = None) -> list[Lattice]:
    """Parse lattices of format ``fmt`` (one of :data:`READ_FORMATS` but ``"espnet-nbest"``, or ``"auto"``).

    ``symbols`` is the word symbol table (id -> word) for formats that store integer word ids
    (Kaldi ``.int`` archives, OpenFst, k2). ``key`` names a lattice in formats without keys
    (OpenFst, k2); it defaults to the source's file name. ``deadline`` (``time.monotonic()``
    seconds): the archive formats (Kaldi, JSON, n-best lists) check it between lattices and raise
    :class:`~lattices.ops.DeadlineExceeded` once it has passed. ``keep``: called once per lattice,
    in order; only the lattices it says yes to are returned (a Kaldi archive skips the others
    before parsing them, other formats after).
    """
    data = maybe_gunzip(data, source)
    if fmt == "auto":
        fmt = guess_format(data)
    if keep is not None and fmt != "kaldi":  # only Kaldi archives skip lattices unparsed
        return [lattice for lattice in read_lattices(data, fmt, symbols, source, key, deadline) if keep()]
    if key is None:
        key = Path(source).name.split(".")[0] if source else "lattice"
    if fmt == "kaldi":
        from lattices.formats.kaldi import read_kaldi
        from lattices.formats.kaldi_binary import looks_like_kaldi_binary, read_kaldi_binary

        if isinstance(data, bytes) and looks_like_kaldi_binary(data):
            return read_kaldi_binary(data, symbols, source, deadline, keep)
        return read_kaldi(_decode(data, source), symbols, source, deadline, keep)
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
        return read_json_lattices(_decode(data, source), source, deadline)
    if fmt == "nbest-json":
        from lattices.formats.nbest import nbest_from_json

        return nbest_lattices(nbest_from_json(_decode(data, source), source), source, deadline)
    if fmt == "k2" and isinstance(data, str):  # the JSON form, as text
        return read_json_value(_parse_json(data, source), "k2", symbols, source, deadline)
    if fmt == "srilm-nbest":
        from lattices.formats.nbest import read_srilm_nbest

        return nbest_lattices([read_srilm_nbest(_decode(data, source), source, key)], source)
    if fmt == "espnet-nbest":
        raise LatticeFormatError("espnet-nbest is a directory format: give read_lattice_file the folder holding "
                                 "1best_recog/, 2best_recog/...", source=source)
    raise LatticeFormatError(f"unknown format {fmt!r}; expected one of {', '.join(READ_FORMATS)} or auto",
                             source=source)


def nbest_lattices(lists: Sequence[NBestList], source: str | None, deadline: float | None = None) -> list[Lattice]:
    """The lattice of each n-best list (errors located in ``source``; ``deadline`` as :func:`read_lattices`)."""
    from lattices.formats.nbest import nbest_to_lattice

    out = []
    try:
        for nbest in lists:
            check_deadline(deadline)
            out.append(nbest_to_lattice(nbest))
    except LatticeFormatError as err:
        raise err.located(source=source) from None
    return out


def _parse_json(text: str, source: str | None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise LatticeFormatError(f"invalid JSON: {err.msg}", source=source, line=err.lineno) from None
    except RecursionError:  # as lattice_from_json and nbest_from_json say it
        raise LatticeFormatError("invalid JSON: nested too deeply", source=source) from None


def guess_json_format(obj: Any) -> str:
    """The format of a parsed JSON value: ``"nbest-json"`` (an n-best list: ``hypotheses``, or
    ``{"nbest": [...]}``), ``"k2"`` (:func:`lattices.formats.k2.is_k2_json`) or ``"json"``; a list
    by its first item."""
    from lattices.formats.k2 import is_k2_json

    first = obj[0] if isinstance(obj, list) and obj else obj
    if isinstance(first, dict) and ("hypotheses" in first or "nbest" in first):
        return "nbest-json"
    return "k2" if is_k2_json(obj) else "json"


def read_json_value(obj: Any, fmt: str = "auto", symbols: Sequence[str] | None = None, source: str | None = None,
                    deadline: float | None = None) -> list[Lattice]:
    """The lattices of a parsed JSON value (what an HTTP client sends as ``lattice``): a JSON
    lattice, a list of them or ``{"lattices": [...]}`` (``"json"``); an n-best list or a list of
    them (``"nbest-json"``); a k2 dict in JSON form or a list of them (``"k2"``, keys
    ``lattice-0``, ``lattice-1``...); ``"auto"`` tells them apart (:func:`guess_json_format`).
    The one dispatcher of JSON input: :func:`read_lattices` parses JSON text and comes here."""
    if fmt == "auto":
        fmt = guess_json_format(obj)
    if fmt == "nbest-json":
        from lattices.formats.nbest import nbest_from_json

        return nbest_lattices(nbest_from_json(obj, source), source, deadline)
    if fmt == "k2":
        from lattices.formats.k2 import k2_dict_from_json, read_k2

        items = obj if isinstance(obj, list) else [obj]
        out = []
        for i, item in enumerate(items):
            check_deadline(deadline)
            out.extend(read_k2(k2_dict_from_json(item, source=source), symbols, source, key=f"lattice-{i}"))
        return out
    if fmt == "json":
        return _json_lattices(obj, source, deadline)
    raise LatticeFormatError(f"a {fmt} lattice is text, not a JSON value; formats of JSON values: json, nbest-json, "
                             f"k2 or auto", source=source)


def read_json_lattices(text: str, source: str | None = None, deadline: float | None = None) -> list[Lattice]:
    """One lattice object, a list of them, or ``{"lattices": [...]}`` (``deadline``: as :func:`read_lattices`)."""
    return _json_lattices(_parse_json(text, source), source, deadline)


def _json_lattices(obj: Any, source: str | None, deadline: float | None) -> list[Lattice]:
    from lattices.formats.jsonfmt import lattice_from_json

    if isinstance(obj, dict) and "lattices" in obj:
        obj = obj["lattices"]
    items = obj if isinstance(obj, list) else [obj]
    out = []
    for i, item in enumerate(items):
        check_deadline(deadline)
        try:
            out.append(lattice_from_json(item, source))
        except LatticeFormatError as err:
            raise (err if isinstance(obj, dict) else LatticeFormatError(
                err.reason, source=source, key=err.key, field=f"[{i}]" + (f".{err.field}" if err.field else ""))) from None
    return out


def read_lattice_file(path: str | Path, fmt: str = "auto", symbols: Sequence[str] | None = None,
                      keep: Callable[[], bool] | None = None) -> list[Lattice]:
    """Read a lattice file (gzip or not), or an ESPnet n-best folder (a directory: ``fmt`` auto
    or espnet-nbest); ``keep`` as :func:`read_lattices`."""
    path = Path(path)
    if fmt == "espnet-nbest" or path.is_dir():
        from lattices.formats.nbest import read_espnet_nbest

        if fmt not in ("auto", "espnet-nbest"):
            raise LatticeFormatError(f"a directory is read as an ESPnet n-best directory, not {fmt}", source=str(path))
        lists = read_espnet_nbest(path)
        if not lists:
            raise LatticeFormatError("no n-best list found (an ESPnet n-best directory holds 1best_recog/ ... "
                                     "Nbest_recog/ with text, score and scores files)", source=str(path))
        return nbest_lattices([n for n in lists if keep is None or keep()], str(path))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LatticeFormatError("no such file", source=str(path)) from None
    except OSError as err:
        raise LatticeFormatError(f"cannot read: {err.strerror}", source=str(path)) from None
    return read_lattices(data, fmt, symbols, source=str(path), keep=keep)


def output_format(fmt: str, first: Lattice | None) -> str:
    """The format rescored lattices are written in: the input's (``fmt``, or for ``"auto"`` the
    format ``first`` was read from, by its meta); an n-best list's hypotheses as a JSON lattice."""
    if fmt in ("nbest-json", "srilm-nbest", "espnet-nbest") or (first is not None and "nbest" in first.meta):
        return "json"  # the lattice of an n-best list's hypotheses
    if fmt != "auto" or first is None:
        return fmt
    meta = first.meta
    if "kaldi_type" in meta:
        return "kaldi"
    if "htk_words_on" in meta:
        return "htk"
    if "openfst_type" in meta:
        return "openfst"
    if any(k.startswith("k2") for k in meta):
        return "k2"
    return "json"


def write_lattices(lattices: Sequence[Lattice], fmt: str, *, binary: bool = False) -> bytes:
    """Serialize lattices in ``fmt``. HTK and OpenFst hold one lattice per file: several are
    written one after another, each ending with a blank line, which is how this project reads
    them back only one at a time (``afp.jobs.write_rescored`` writes one file each). ``binary``
    writes a binary Kaldi archive (``fmt`` must be ``"kaldi"``; words as ids into each lattice's
    own symbol table)."""
    if binary:
        if fmt != "kaldi":
            raise ValueError(f"binary output exists for the kaldi format only, not {fmt!r}")
        from lattices.formats.kaldi_binary import write_kaldi_binary

        return write_kaldi_binary(lattices)
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
