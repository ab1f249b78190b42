"""Word error rate: reference transcripts, hypothesis-to-reference matching, edit-distance counts.

Reference formats (:func:`read_references`, detected from the file name, then the content):

``text`` (Kaldi)
    One utterance per line: ``uttid w1 w2 ...``. A line with only the id is an empty reference.
``trn`` (sclite)
    One utterance per line: ``w1 w2 ... (id)``, the id in parentheses at the end of the line.
    sclite's ids are ``speaker-utterance``: ESPnet writes ``1272-128104-0000`` as
    ``(1272-128104-1272-128104-0000)``. :func:`match_references` finds such an id from the bare
    utterance id (the unique reference id ending in ``-`` + key).
lhotse manifests (``.jsonl``, ``.jsonl.gz``, ``.json``)
    A ``SupervisionSet`` gives ``supervision id -> text``; a ``CutSet`` gives that for its
    supervisions and also ``cut id -> the texts of its supervisions joined in time order`` (where a
    cut has the id of a supervision, as ``trim_to_supervisions`` makes them, the supervision's
    own text is the reference). Supervisions without text are left out.

The format is chosen from the name first (the manifest suffixes; ``.trn``), else from the
content: ``trn`` when every non-empty line ends with a parenthesised id, Kaldi ``text``
otherwise (so a Kaldi transcript with a ``(noise)`` tag at the end of some line stays Kaldi). Words are split on
whitespace and kept as they are (no case or punctuation normalisation). Lines are read as UTF-8.

Case: LibriSpeech's references are upper case and PocketSphinx writes lower case. When the
hypotheses are written in another case than the references (:func:`case_differs`), ``afp wer``
and ``afp tune`` compare words without regard to case, as sclite's ``-i`` does, and say so; words
in the same case are compared exactly.

Counts are kaldialign's (Levenshtein with unit costs for substitution, insertion and deletion,
the same as Kaldi's ``compute-wer``): :func:`word_errors` for one utterance, summed over many
as :class:`WerStats` (``sum(...)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from afp.significance import Comparison

MANIFEST_SUFFIXES = (".jsonl.gz", ".jsonl", ".json")
_TRN_LINE = re.compile(r"^(?P<text>.*?)\s*\((?P<id>[^()\s]*)\)\s*$")
_MAX_LISTED = 5


class ReferencesError(ValueError):
    """A reference file cannot be read, or hypotheses cannot be matched to references.

    The message names the file and line (reading) or the keys (matching)."""


@dataclass(frozen=True)
class WerStats:
    """Word error counts of one utterance or summed over many (``+``; ``sum()`` works too).

    ``errors = substitutions + insertions + deletions``; ``sentences`` counts utterances and
    ``sentence_errors`` those with at least one error.
    """

    errors: int = 0
    substitutions: int = 0
    insertions: int = 0
    deletions: int = 0
    ref_words: int = 0
    sentences: int = 0
    sentence_errors: int = 0

    def __post_init__(self) -> None:
        assert self.errors == self.substitutions + self.insertions + self.deletions, (
            f"errors {self.errors} != substitutions {self.substitutions} + insertions {self.insertions} "
            f"+ deletions {self.deletions}")

    @classmethod
    def zero(cls) -> WerStats:
        """No utterances, no errors (the start of a sum)."""
        return cls()

    @property
    def wer(self) -> float:
        """Word error rate in percent, ``100 * errors / ref_words``. With no reference words: 0.0
        when there are no errors either, else ``inf``."""
        if self.ref_words == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return 100.0 * self.errors / self.ref_words

    def __add__(self, other: WerStats) -> WerStats:
        if not isinstance(other, WerStats):
            return NotImplemented
        return WerStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __radd__(self, other: Any) -> WerStats:
        if isinstance(other, int) and other == 0:  # sum() starts from 0
            return self
        return NotImplemented

    def to_json(self) -> dict[str, Any]:
        """The counts and ``wer`` (percent; ``None`` when there are no reference words)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["wer"] = self.wer if self.ref_words else None
        return out


def word_errors(ref: Sequence[str], hyp: Sequence[str], ignore_case: bool = False) -> WerStats:
    """The edit-distance counts of one hypothesis against its reference (lists of words);
    ``ignore_case``: words equal but for case match (``str.casefold``)."""
    import kaldialign

    for name, words in (("ref", ref), ("hyp", hyp)):
        if isinstance(words, str):
            raise TypeError(f"{name} must be a list of words, not a string: {words[:40]!r}")
    if ignore_case:
        ref, hyp = [w.casefold() for w in ref], [w.casefold() for w in hyp]
    result = kaldialign.edit_distance(list(ref), list(hyp))
    errors = result["sub"] + result["ins"] + result["del"]
    return WerStats(errors=errors, substitutions=result["sub"], insertions=result["ins"], deletions=result["del"],
                    ref_words=len(ref), sentences=1, sentence_errors=int(errors > 0))


def case_differs(refs: Iterable[Sequence[str]], hyps: Iterable[Sequence[str]]) -> bool:
    """Whether the hypotheses are written in another case than the references: more of the
    hypotheses' distinct words match a reference word only without regard to case than match one
    exactly (lower-case PocketSphinx output against upper-case LibriSpeech references)."""
    exact = {w for words in refs for w in words}
    folded = {w.casefold() for w in exact}
    vocab = {w for words in hyps for w in words}
    same = sum(1 for w in vocab if w in exact)
    other = sum(1 for w in vocab if w not in exact and w.casefold() in folded)
    return other > same


#: what a report says when words were compared without regard to case
CASE_NOTE = "the hypotheses are in another case than the references: words compared without regard to case (sclite -i)"


def read_references(path: str | Path) -> dict[str, list[str]]:
    """Utterance id -> reference words, from a Kaldi ``text``, sclite ``trn`` or lhotse manifest
    (module docstring). Raises :class:`ReferencesError` naming the file (and line)."""
    path = Path(path)
    if path.name.endswith(MANIFEST_SUFFIXES):
        return _read_manifest(path)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise ReferencesError(f"{path}: cannot read references: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        line = _line_of_byte(path, err.start)
        raise ReferencesError(f"{path}:{line}: not UTF-8 text ({err.reason})") from None
    if not any(line.strip() for line in lines):
        raise ReferencesError(f"{path}: no references (the file is empty)")
    trn = path.suffix == ".trn" or all(_TRN_LINE.match(line) for line in lines if line.strip())
    refs: dict[str, list[str]] = {}
    seen_at: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if trn:
            match = _TRN_LINE.match(line)
            if match is None or not match["id"]:
                raise ReferencesError(f"{path}:{number}: expected sclite trn 'words ... (id)', "
                                      f"got {line[:80]!r}")
            key, words = match["id"], match["text"].split()
        else:
            key, *words = line.split()
        if key in seen_at:
            raise ReferencesError(f"{path}:{number}: utterance {key!r} again (first on line {seen_at[key]})")
        seen_at[key] = number
        refs[key] = words
    return refs


def match_references(refs: dict[str, list[str]], keys: Iterable[str]) -> dict[str, list[str]]:
    """Each hypothesis key -> its reference words: the reference with that id, else the unique
    reference whose id ends with ``"-" + key`` (sclite's ``speaker-utterance`` ids).

    Raises :class:`ReferencesError` for keys without a reference (up to five listed, and the
    count) and for a key that ends two or more reference ids."""
    by_suffix: dict[str, list[str]] = {}
    for ref_id in refs:
        for position, char in enumerate(ref_id):
            if char == "-":
                by_suffix.setdefault(ref_id[position + 1:], []).append(ref_id)
    out: dict[str, list[str]] = {}
    missing: list[str] = []
    for key in keys:
        if key in refs:
            out[key] = refs[key]
            continue
        candidates = by_suffix.get(key, [])
        if len(candidates) > 1:
            listed = ", ".join(repr(c) for c in candidates[:_MAX_LISTED])
            raise ReferencesError(f"hypothesis {key!r} matches {len(candidates)} references ({listed}): "
                                  "use exact reference ids")
        if candidates:
            out[key] = refs[candidates[0]]
        else:
            missing.append(key)
    if missing:
        listed = ", ".join(repr(k) for k in missing[:_MAX_LISTED])
        more = f" and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else ""
        raise ReferencesError(f"{len(missing)} hypothes{'is has' if len(missing) == 1 else 'es have'} no reference: "
                              f"{listed}{more} (of {len(refs)} references)")
    return out


def cut_reference(cut: Any) -> list[str] | None:
    """A lhotse cut's reference: the texts of its supervisions in time order, joined; ``None``
    when no supervision carries text."""
    texts = sorted((sup for sup in cut.supervisions if sup.text is not None), key=lambda sup: sup.start)
    return " ".join(sup.text for sup in texts).split() if texts else None


def _read_manifest(path: Path) -> dict[str, list[str]]:
    from lhotse import CutSet, SupervisionSet, load_manifest

    if not path.is_file():
        raise ReferencesError(f"{path}: cannot read references: no such file")
    try:
        manifest = load_manifest(path)
    except Exception as err:  # lhotse raises many types for unreadable manifests
        raise ReferencesError(f"{path}: not a readable lhotse manifest: {err}") from None
    refs: dict[str, list[str]] = {}
    joined: dict[str, list[str]] = {}

    def put(sup: Any) -> None:
        words = sup.text.split()
        if sup.id in refs and refs[sup.id] != words:
            raise ReferencesError(f"{path}: supervision {sup.id!r} has two different texts: "
                                  f"{' '.join(refs[sup.id])[:60]!r} and {' '.join(words)[:60]!r}")
        refs[sup.id] = words

    if isinstance(manifest, SupervisionSet):
        for sup in manifest:
            if sup.text is not None:
                put(sup)
    elif isinstance(manifest, CutSet):
        for cut in manifest:
            for sup in cut.supervisions:
                if sup.text is not None:
                    put(sup)
            words = cut_reference(cut)
            if words is not None:
                joined[cut.id] = words
    else:
        raise ReferencesError(f"{path}: expected a SupervisionSet or CutSet, got {type(manifest).__name__}")
    for cut_id, words in joined.items():  # a supervision's own text wins over a cut of the same id
        refs.setdefault(cut_id, words)
    if not refs:
        raise ReferencesError(f"{path}: no supervision carries text")
    return refs


def _line_of_byte(path: Path, offset: int) -> int:
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


# ------------------------------------------------------------------------------- hypotheses
def read_hypotheses(path: str | Path, lm_weight: float | None = None) -> dict[str, list[str]]:
    """Utterance id -> hypothesis words, from a Kaldi ``text`` or sclite ``trn`` file (as
    :func:`read_references` reads them) or from ``afp rescore --json`` output (one JSON object
    per line, ``key`` and ``best.words``; with several LM weights in it, ``lm_weight`` picks one).
    Raises :class:`ReferencesError` naming the file and line."""
    path = Path(path)
    try:
        head = path.read_text(encoding="utf-8").lstrip()[:1]
    except (OSError, UnicodeDecodeError) as err:
        raise ReferencesError(f"{path}: cannot read hypotheses: {err}") from None
    if head != "{":
        return read_references(path)
    import json

    hyps: dict[str, list[str]] = {}
    weights: set[float] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key, words, weight = row["key"], row["best"]["words"], row.get("lm_weight")
        except (ValueError, KeyError, TypeError) as err:
            if isinstance(err, ValueError) or not isinstance(row, dict) or "error" not in row:
                raise ReferencesError(f"{path}:{number}: expected an afp rescore --json line with key and "
                                      f"best.words ({err})") from None
            continue  # a failed lattice: left out, as afp rescore leaves it out of transcripts
        weights.add(weight)
        if lm_weight is not None and weight != lm_weight:
            continue
        if key in hyps:
            raise ReferencesError(f"{path}:{number}: utterance {key!r} again: the file holds several LM weights "
                                  f"({', '.join(f'{w:g}' for w in sorted(w for w in weights if w is not None))}); "
                                  f"pick one with --lm-weight")
        hyps[key] = list(words)
    if not hyps:
        raise ReferencesError(f"{path}: no hypothesis" + (f" for LM weight {lm_weight:g}" if lm_weight is not None
                                                           else ""))
    return hyps


@dataclass(frozen=True)
class Scored:
    """A system's transcripts scored against references: the total and, per utterance in the
    references' order, the word errors and the reference length (what significance tests need)."""

    total: WerStats
    keys: list[str]
    errors: list[int]
    ref_words: list[int]
    ignore_case: bool = False


def score_transcripts(refs: dict[str, list[str]], hyps: dict[str, list[str]],
                      ignore_case: bool | None = None) -> Scored:
    """Score every hypothesis against its reference (:func:`match_references`: bare ids find
    ``speaker-utterance`` references). Every hypothesis needs a reference; references without a
    hypothesis are not scored (the count is in ``total.sentences``). ``ignore_case`` None: when
    :func:`case_differs` (``Scored.ignore_case`` says which)."""
    matched = match_references(refs, hyps)
    keys = sorted(matched)
    if ignore_case is None:
        ignore_case = case_differs((matched[k] for k in keys), (hyps[k] for k in keys))
    stats = [word_errors(matched[k], hyps[k], ignore_case) for k in keys]
    return Scored(total=_sum(stats), keys=keys, errors=[s.errors for s in stats],
                  ref_words=[s.ref_words for s in stats], ignore_case=ignore_case)


def _sum(stats: Iterable[WerStats]) -> WerStats:
    total = WerStats.zero()
    for s in stats:
        total = total + s
    return total


@dataclass(frozen=True)
class SystemsReport:
    """Several systems' transcripts against one set of references (``afp wer``): ``systems``,
    ``(hypotheses file, Scored)`` each in the order given, and ``comparisons``, each later system
    against the first (:class:`afp.significance.Comparison`)."""

    refs: str
    systems: list[tuple[str, Scored]]
    comparisons: list[Comparison]

    @property
    def ignore_case(self) -> bool:
        """Whether any system's words were compared without regard to case."""
        return any(scored.ignore_case for _, scored in self.systems)

    def rows(self) -> list[dict[str, Any]]:
        """One row per system: ``hypotheses`` (the file), its :meth:`WerStats.to_json`, and after
        the first, ``against_first``."""
        rows = []
        for i, (path, scored) in enumerate(self.systems):
            row: dict[str, Any] = {"hypotheses": path, **scored.total.to_json()}
            if i > 0:
                row["against_first"] = self.comparisons[i - 1].to_json()
            rows.append(row)
        return rows

    def to_json(self) -> dict[str, Any]:
        """What ``afp wer --json`` prints: ``{"refs", "ignore_case", "systems": [row, ...]}``."""
        return {"refs": self.refs, "ignore_case": self.ignore_case, "systems": self.rows()}

    def lines(self) -> list[str]:
        """What ``afp wer`` prints: a table of WER and its breakdown, then each comparison."""
        lines = [f"note: {CASE_NOTE}"] if self.ignore_case else []
        lines.append(f"{'WER':>7} {'sub':>6} {'del':>6} {'ins':>6} {'ref words':>9} {'utts':>6}  hypotheses")
        for row in self.rows():
            lines.append(f"{row['wer']:6.2f}% {row['substitutions']:6d} {row['deletions']:6d} {row['insertions']:6d} "
                         f"{row['ref_words']:9d} {row['sentences']:6d}  {row['hypotheses']}")
        base = self.systems[0][0]
        lines += [f"{path} against {base}: {c.summary()}" for (path, _), c in zip(self.systems[1:], self.comparisons)]
        return lines


def compare_systems(refs: str | Path, hypotheses: Sequence[str | Path], lm_weight: float | None = None,
                    seed: int = 0) -> SystemsReport:
    """Score every hypotheses file (:func:`read_hypotheses`; ``lm_weight``: which one of an
    ``afp rescore --json`` file of several) against ``refs`` (:func:`read_references`), and each
    after the first against the first (:func:`afp.significance.compare`, ``seed``: the
    bootstrap's). The systems must hold the same utterances: :class:`ReferencesError` otherwise."""
    from afp.significance import compare

    references = read_references(refs)
    systems = [(str(path), score_transcripts(references, read_hypotheses(path, lm_weight))) for path in hypotheses]
    base_path, base = systems[0]
    comparisons = []
    for path, scored in systems[1:]:
        if scored.keys != base.keys:
            raise ReferencesError(f"{path} and {base_path} hold different utterances ({len(scored.keys)} and "
                                  f"{len(base.keys)}): a significance test needs the same ones")
        comparisons.append(compare(base.errors, scored.errors, base.ref_words, seed=seed))
    return SystemsReport(refs=str(refs), systems=systems, comparisons=comparisons)
