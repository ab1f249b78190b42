"""Rescoring a lhotse ``CutSet`` whose cuts name their lattices; WER against the supervisions.

A cut names its lattice in ``cut.custom``:

  ``lattice``         path of the lattice file (relative paths are taken from the manifest's folder)
  ``lattice_format``  optional, one of the lattice formats (default: guessed from the content)
  ``lattice_key``     optional, which lattice of an archive (default: the cut id, else the only one)

The output CutSet is the input with ``custom["hypothesis"]`` (the rescored 1-best, words joined
by spaces) and ``custom["rescore"]`` (its scores and the expansion statistics) on every cut.
Cuts whose supervisions carry text are scored against it with kaldialign's edit distance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattices.formats import read_lattice_file
from lattices.lattice import Lattice, LatticeFormatError
from lattices.rescore import RescoreOptions, rescore
from lattices.scorer import ContextScorer


@dataclass
class WordErrors:
    """Accumulated edit-distance counts."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    reference_words: int = 0
    utterances: int = 0

    def add(self, reference: Sequence[str], hypothesis: Sequence[str]) -> None:
        import kaldialign

        result = kaldialign.edit_distance(list(reference), list(hypothesis))
        self.substitutions += result["sub"]
        self.deletions += result["del"]
        self.insertions += result["ins"]
        self.reference_words += len(reference)
        self.utterances += 1

    @property
    def wer(self) -> float | None:
        errors = self.substitutions + self.deletions + self.insertions
        return errors / self.reference_words if self.reference_words else None

    def to_json(self) -> dict[str, Any]:
        return {"wer": self.wer, "substitutions": self.substitutions, "deletions": self.deletions,
                "insertions": self.insertions, "reference_words": self.reference_words, "utterances": self.utterances}


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
    errors, cache, out = WordErrors(), {}, []
    show = sys.stderr.isatty() if progress is None else progress
    for cut in tqdm(cuts, desc="rescoring cuts", unit="cut", disable=not show):
        result = rescore(_lattice_for(cut, base, symbols, cache), scorer, options, device=device)[0]
        hypothesis = result.best.words
        summary = {**result.best.to_json(), "expanded_arcs": result.stats["expanded_arcs"],
                   "expanded_states": result.stats["expanded_states"], "oov": result.stats["oov"]}
        summary.pop("words")
        reference = " ".join(s.text for s in cut.supervisions if s.text).split()
        if reference:
            errors.add(reference, hypothesis)
        out.append(cut.with_custom("hypothesis", " ".join(hypothesis)).with_custom("rescore", summary))
    CutSet.from_cuts(out).to_file(out_path)
    return {"cuts": len(out), "out": str(out_path), **errors.to_json()}
