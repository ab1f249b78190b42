"""Rescoring a lhotse ``CutSet`` whose cuts name their lattices; WER against the supervisions.

A cut names its lattice in ``cut.custom``:

  ``lattice``         path of the lattice file (relative paths are taken from the manifest's folder)
  ``lattice_format``  optional, one of the lattice formats (default: guessed from the content)
  ``lattice_key``     optional, which lattice of an archive (default: the cut id, else the only one)

The output CutSet is the input with ``custom["hypothesis"]`` (the rescored 1-best, words joined
by spaces) and ``custom["rescore"]`` (its scores and the expansion statistics) on every cut.
Cuts whose supervisions carry text are scored against it (:mod:`afp.wer`). The summary's
``wer`` is in percent, as everywhere (``None`` without reference words).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from afp.jobs import Failure
from afp.wer import WerStats, cut_reference, word_errors
from lattices.formats import read_lattice_file
from lattices.lattice import Lattice, LatticeFormatError

if TYPE_CHECKING:
    from afp.rescore_job import LoadedSetup


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


def rescore_cuts(cuts_path: str | Path, out_path: str | Path, ready: LoadedSetup, progress: bool | None = None,
                 warn: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Rescore every cut's lattice, write the CutSet with hypotheses, return a summary with WER.

    The lattices go through :meth:`afp.rescore_job.LoadedSetup.outcomes`, the job code of ``afp
    rescore`` (the same model, options, old LM, features, every LM weight, workers, the untuned and
    unknown-word warnings): a cut whose
    lattice cannot be read or rescored gets ``custom["rescore"] = {"error": ...}`` and no
    hypothesis, and the job goes on. Each cut gets ``custom["hypothesis"]`` (the first LM
    weight's 1-best) and, with several weights, ``custom["hypotheses"]`` (``{"%g" % weight:
    words}``); ``custom["rescore"]`` holds the first weight's scores and ``per_lm_weight``
    (``{"%g" % weight: {"words", "score"}}``). The summary holds, per LM weight, the WER counts in percent (``wer``, as ``afp
    tune`` and ``afp wer`` report it), and ``failed``: the cuts without a hypothesis."""
    from lhotse import CutSet, load_manifest

    cuts_path = Path(cuts_path)
    try:
        cuts = load_manifest(cuts_path)
    except Exception as err:  # lhotse raises many types for unreadable manifests
        raise CutLatticeError(f"{cuts_path}: not a readable lhotse manifest: {err}") from None
    if not isinstance(cuts, CutSet):
        raise CutLatticeError(f"{cuts_path}: expected a CutSet, got {type(cuts).__name__}")
    base = cuts_path.resolve().parent
    cache: dict[Path, list[Lattice]] = {}
    symbols = ready.symbols
    weights: list[float | None] = list(ready.options.lm_weights or (None,))  # None: the untuned default, named by a result
    errors = [WerStats.zero() for _ in weights]
    fed: deque[Any] = deque()  # cuts whose lattices rescore_all has taken, in order
    out: list[Any] = []
    failed: list[str] = []

    def fail(cut: Any, message: str) -> None:
        failed.append(cut.id)
        out.append(cut.with_custom("rescore", {"error": message}))
        if warn is not None:
            warn(message)

    def lattices() -> Iterator[Lattice]:
        for cut in cuts:
            try:
                lattice = _lattice_for(cut, base, symbols, cache)
            except CutLatticeError as err:  # this cut only; the job goes on
                fail(cut, str(err))
                continue
            fed.append(cut)
            yield lattice

    for outcome in ready.outcomes(lattices(), warn, progress):
        cut = fed.popleft()
        if isinstance(outcome, Failure):
            fail(cut, f"cut {cut.id!r}: {outcome.message}")
            continue
        if warn is not None:
            ready.warn_untuned(outcome, warn)
        reference = cut_reference(cut)
        for i, result in enumerate(outcome):
            if weights[i] is None:
                weights[i] = result.lm_weight
            if reference:
                errors[i] = errors[i] + word_errors(reference, result.best.words)
        first = outcome[0]
        summary = {**first.best.to_json(), "lm_weight": first.lm_weight,
                   "expanded_arcs": first.stats["expanded_arcs"], "expanded_states": first.stats["expanded_states"],
                   "oov": first.stats["oov"],
                   "per_lm_weight": {f"{r.lm_weight:g}": {"words": " ".join(r.best.words), "score": r.best.score}
                                     for r in outcome}}
        summary.pop("words")
        cut = cut.with_custom("hypothesis", " ".join(first.best.words)).with_custom("rescore", summary)
        if len(outcome) > 1:
            cut = cut.with_custom("hypotheses", {f"{r.lm_weight:g}": " ".join(r.best.words) for r in outcome})
        out.append(cut)
    order = {cut.id: i for i, cut in enumerate(cuts)}
    out.sort(key=lambda cut: order[cut.id])  # failures found while reading come before earlier cuts' results
    CutSet.from_cuts(out).to_file(out_path)
    per_weight = [{"lm_weight": w, **e.to_json()} for w, e in zip(weights, errors)]
    return {"cuts": len(out), "out": str(out_path), "failed": len(failed), "failed_cuts": failed[:20],
            **per_weight[0], "per_lm_weight": per_weight}
