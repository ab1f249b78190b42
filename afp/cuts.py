"""Rescoring a lhotse ``CutSet`` whose cuts name their lattices; WER against the supervisions.

A cut names its lattice in ``cut.custom``:

  ``lattice``         path of the lattice file (relative paths are taken from the manifest's folder)
  ``lattice_format``  optional, one of the lattice formats (default: guessed from the content)
  ``lattice_key``     optional, which lattice of an archive (default: the cut id, else the only one)

The output CutSet is the input with ``custom["hypothesis"]`` (the rescored 1-best, words joined
by spaces) and ``custom["rescore"]`` (its scores and the expansion statistics) on every cut.
Cuts whose supervisions carry text are scored against it (:mod:`afp.wer`). The summary's
``wer`` is a fraction (errors / reference words), ``None`` without reference words.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lattices.formats import read_lattice_file
from lattices.lattice import Lattice, LatticeFormatError
from lattices.rescore import RescoreOptions, rescore
from lattices.scorer import ContextScorer
from afp.wer import WerStats, cut_reference, word_errors


class CutLatticeError(ValueError):
    """A cut does not name a readable lattice; the message names the cut."""


def _lattice_for(cut: Any, base: Path, symbols: Sequence[str] | None, cache: dict[Path, list[Lattice]]) -> Lattice:
    custom = cut.custom or {}
    if "lattice" not in custom:
        raise CutLatticeError(f"cut {cut.id!r}: custom['lattice'] is missing (the lattice path)")
    path = Path(custom["lattice"])
    path = path if path.is_absolute() else base / path
    if path not in cache:
        cache.clear()  # keep one archive in memory at a time
        try:
            cache[path] = read_lattice_file(path, custom.get("lattice_format", "auto"), symbols)
        except LatticeFormatError as err:
            raise CutLatticeError(f"cut {cut.id!r}: {err}") from None
    lattices = cache[path]
    key = custom.get("lattice_key")
    if key is None and len(lattices) == 1:
        return lattices[0]
    wanted = key if key is not None else cut.id
    for lattice in lattices:
        if lattice.key == wanted:
            return lattice
    raise CutLatticeError(f"cut {cut.id!r}: {path} has no lattice with key {wanted!r}")


def rescore_cuts(cuts_path: str | Path, out_path: str | Path, scorer: ContextScorer, options: RescoreOptions,
                 symbols: Sequence[str] | None = None, device: str | None = None,
                 progress: bool | None = None) -> dict[str, Any]:
    """Rescore every cut's lattice, write the CutSet with hypotheses, return a summary with WER."""
    import sys

    from lhotse import CutSet, load_manifest
    from tqdm import tqdm

    cuts_path = Path(cuts_path)
    try:
        cuts = load_manifest(cuts_path)
    except Exception as err:  # lhotse raises many types for unreadable manifests
        raise CutLatticeError(f"{cuts_path}: not a readable lhotse manifest: {err}") from None
    if not isinstance(cuts, CutSet):
        raise CutLatticeError(f"{cuts_path}: expected a CutSet, got {type(cuts).__name__}")
    base = cuts_path.resolve().parent
    errors, cache, out = WerStats.zero(), {}, []
    show = sys.stderr.isatty() if progress is None else progress
    for cut in tqdm(cuts, desc="rescoring cuts", unit="cut", disable=not show):
        result = rescore(_lattice_for(cut, base, symbols, cache), scorer, options, device=device)[0]
        hypothesis = result.best.words
        summary = {**result.best.to_json(), "expanded_arcs": result.stats["expanded_arcs"],
                   "expanded_states": result.stats["expanded_states"], "oov": result.stats["oov"]}
        summary.pop("words")
        reference = cut_reference(cut)
        if reference:
            errors = errors + word_errors(reference, hypothesis)
        out.append(cut.with_custom("hypothesis", " ".join(hypothesis)).with_custom("rescore", summary))
    CutSet.from_cuts(out).to_file(out_path)
    return {"cuts": len(out), "out": str(out_path), **_summary(errors)}


def _summary(errors: WerStats) -> dict[str, Any]:
    """The WER part of ``afp rescore-cuts``'s summary (``wer`` a fraction, as it always was)."""
    return {"wer": errors.errors / errors.ref_words if errors.ref_words else None,
            "substitutions": errors.substitutions, "deletions": errors.deletions, "insertions": errors.insertions,
            "reference_words": errors.ref_words, "utterances": errors.sentences}
