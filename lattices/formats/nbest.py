"""N-best lists: ESPnet n-best folders, SRILM n-best files and a JSON form, read into lattices.

An n-best list is a lattice too (:func:`nbest_to_lattice`): a prefix tree over the hypotheses'
words, and from the state each hypothesis ends in an epsilon arc into a final state of its own,
carrying that hypothesis's named first-pass scores. So every path is exactly one hypothesis and
the existing rescoring engine handles n-best input unchanged.

Data (frozen): :class:`NBestHypothesis` ``(words, scores)`` and :class:`NBestList`
``(key, hypotheses)``, hypotheses in the recogniser's order (rank 1 first). Scores are natural
log, higher is better. All hypotheses of a list have the same score names.

Readers (every malformed input raises :class:`LatticeFormatError` naming file or field and line):

* ESPnet (:func:`read_espnet_nbest`): a decode folder ``DIR`` holding ``1best_recog/``,
  ``2best_recog/``, ... ``Nbest_recog/``, each with
    ``text``    ``uttid w1 w2 ...`` (a line with only the uttid is an empty hypothesis);
    ``score``   ``uttid tensor(-46.6314)`` (the total; a plain number is accepted too);
    ``scores``  optional, ``uttid {"decoder": "tensor(-0.3654)", "ctc": "tensor(-0.0041)", ...}``
                (values strings ``tensor(x)``/numbers, or numbers; Python's ``repr`` of a dict of
                tensors is accepted as well).
  A hypothesis's named scores are its ``scores`` entries when ``1best_recog/scores`` exists
  (every folder must have one then), else ``{"score": total}``. Utterances come in the order of
  ``1best_recog/text``; an utterance missing from deeper folders has fewer hypotheses (but none
  may be missing from folder k and present in k+1), and the folder numbers have no gaps.

* SRILM (:func:`read_srilm_nbest`), one list per file, the key being the file name without
  extensions. The three formats of SRILM's manual page nbest-format(5):
    ``NBestList1.0`` header, then ``(score) w1 w2 ...``: ``score`` is a composite
      acoustic/LM score in *bytelog*: "a logarithm to base 1.0001, divided by 1024 and rounded
      to an integer" -> named score ``score``.
    ``NBestList2.0`` header, then ``(score) w1 ( st: st1 et: et1 g: g1 a: a1 ) w2 ...``: start
      and end times, LM and acoustic bytelog scores per word -> ``acoustic`` (sum of ``a:``) and
      ``lm`` (sum of ``g:``). As SRILM's ``NBestHyp::parse`` does, a unit whose start time is not
      after the previous word's end time is a phone or HMM state inside that word and is skipped.
    no header, ``ascore lscore nwords w1 w2 ...``: acoustic and LM log probabilities in
      *log10* (the form ``ngram -rescore`` and ``nbest-lattice`` write) -> ``acoustic`` and
      ``lm``; ``nwords`` must equal the number of words (counted with or without ``<s>``/``</s>``).
  Conversion to natural log: ``ln = bytelog * 1024 / 10000.5`` (SRILM's ``BytelogToLogP`` in
  ``Prob.h``, ``10000.5`` being its value of ``1 / ln(1.0001)``) and ``ln = log10 * ln(10)``.
  ``<s>`` at the start and ``</s>`` at the end of a hypothesis are removed (their scores stay
  in the sums). Without a header, a first line starting with ``(`` is read as NBestList1.0, as
  SRILM does.

* JSON (:func:`nbest_from_json`), for HTTP clients::

    {"key": "utt1",                               # required, a non-empty string
     "hypotheses": [                              # required, a non-empty list, rank 1 first
        {"words": "A B C",                        # required: a string (split at white space)
                                                  #   or a list of non-empty strings; "" is empty
         "scores": {"decoder": -1.2, "ctc": -0.5, "lm": -20.1},    # optional, finite numbers,
         "total": -12.78},                                         #   the same names in each
        {"words": ["A", "B", "D"], "scores": {...}, "total": ...}]}   # optional: the recogniser's
                                                  #   total (every hypothesis or none), see below

  Several lists: a JSON list of such objects, or ``{"nbest": [...]}``. No other names are
  allowed; errors carry the JSON path as ``field`` (``hypotheses[3].scores.ctc``, prefixed with
  ``[i].`` or ``nbest[i].`` for several lists). Without ``scores`` the lattice has no named
  scores, so its named scores are zero ``acoustic`` and ``graph``.

The recogniser's own combination: where a list carries each hypothesis's total beside its named
scores (ESPnet's ``score`` and ``scores`` files, JSON ``total``), :func:`first_pass_weights`
solves ``total = sum_k w_k * score_k`` for the weights and the lattice keeps them in
``meta["first_pass_weights"]``; rescoring with untuned weights uses them
(:meth:`lattices.rescore.RescoreOptions.weights`), so the first pass is kept as the recogniser
weighed it, not at weights nobody chose.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lattices.lattice import EPSILON, Lattice, LatticeFormatError, describe

#: natural log of one bytelog unit: SRILM's BytelogToLogP is bytelog * 1024 / 10000.5 / ln(10) in log10
BYTELOG_TO_LN = 1024.0 / 10000.5
LOG10_TO_LN = math.log(10.0)
SENTENCE_START, SENTENCE_END = "<s>", "</s>"


@dataclass(frozen=True)
class NBestHypothesis:
    """One hypothesis: its words, its named scores (natural log, higher is better) and, where the
    recogniser wrote it, its total score (ESPnet's ``score`` beside ``scores``), from which
    :func:`first_pass_weights` recovers the recogniser's combination."""

    words: tuple[str, ...]
    scores: dict[str, float]
    total: float | None = None


@dataclass(frozen=True)
class NBestList:
    """The hypotheses of one utterance, in the recogniser's order (rank 1 first)."""

    key: str
    hypotheses: tuple[NBestHypothesis, ...]

    def to_lattice(self) -> Lattice:
        return nbest_to_lattice(self)


#: recovered weights are rounded to this many decimals (a recogniser's configuration writes
#: weights like 0.6 or 0.3; rounding makes every list of one decode give the same weights)
WEIGHT_DECIMALS = 3


def first_pass_weights(nbest: NBestList) -> dict[str, float] | None:
    """The recogniser's own weights ``w`` with ``total = sum_k w_k * score_k`` for every hypothesis
    of ``nbest`` (least squares, rounded to :data:`WEIGHT_DECIMALS` decimals), or None where the
    list cannot tell them: no totals, fewer hypotheses than scores, collinear scores, a total that
    is no such sum (residual above ``1e-3 * (1 + max|total|)``, e.g. a length bonus) or a negative
    weight. ESPnet's LibriSpeech lists give ``{"decoder": 0.6, "ctc": 0.4, "lm": 0.6}``."""
    hyps = nbest.hypotheses
    names = list(hyps[0].scores) if hyps else []
    if not names or len(hyps) < len(names) or any(h.total is None for h in hyps):
        return None
    a = torch.tensor([[h.scores[n] for n in names] for h in hyps], dtype=torch.float64)
    b = torch.tensor([h.total for h in hyps], dtype=torch.float64)
    if int(torch.linalg.matrix_rank(a)) < len(names):
        return None
    w = torch.linalg.lstsq(a, b.unsqueeze(1)).solution.squeeze(1)
    if float((a @ w - b).abs().max()) > 1e-3 * (1.0 + float(b.abs().max())) or bool((w < -1e-6).any()):
        return None
    return {n: round(max(float(v), 0.0), WEIGHT_DECIMALS) for n, v in zip(names, w)}


# ---------------------------------------------------------------------------------- to a lattice
def check_score_names(nbest: NBestList, source: str | None = None) -> list[str]:
    """The score names shared by all hypotheses (in the first one's order); raises if they differ."""
    if not nbest.hypotheses:
        raise LatticeFormatError("an n-best list needs at least one hypothesis", source=source, key=nbest.key)
    names = list(nbest.hypotheses[0].scores)
    expected = set(names)
    for rank, hyp in enumerate(nbest.hypotheses[1:], 2):
        if hyp.scores.keys() != expected:
            extra = sorted(set(hyp.scores) - expected)
            if extra:
                message, name = f"hypothesis {rank} has score {extra[0]!r}, which hypothesis 1 lacks", extra[0]
            else:
                name = sorted(expected - set(hyp.scores))[0]
                message = f"hypothesis {rank} lacks score {name!r}, which hypothesis 1 has"
            raise LatticeFormatError(message, source=source, key=nbest.key, field=name)
    return names


def nbest_to_lattice(nbest: NBestList) -> Lattice:
    """The lattice whose paths are exactly the hypotheses of ``nbest``.

    States: ``0`` is the start (the empty prefix), one state per distinct non-empty word prefix,
    and one final state per hypothesis; ``num_states = 1 + prefixes + len(hypotheses)``. Arcs: the
    prefix tree's word arcs, then per hypothesis an epsilon arc (word 0) from the state of its
    last word (the start for an empty hypothesis) to its final state. That epsilon arc carries
    the hypothesis's named scores in ``scores``; every other arc has 0 for every name, and all
    final weights (``final_scores``, ``final_acoustic``, ``final_graph``) are 0, as are
    ``acoustic`` and ``graph``. Duplicate word sequences stay separate paths.
    ``final_extra["hypothesis"]``: int64 ``(F,)``, the 0-based rank of the hypothesis ending at
    each final state; ``meta["nbest"]``: the number of hypotheses; ``meta["first_pass_weights"]``:
    the recogniser's combination where the totals tell it (:func:`first_pass_weights`). Symbols: ``("<eps>", words in
    order of first appearance)``.
    """
    names = check_score_names(nbest)
    ids, symbols = {EPSILON: 0}, [EPSILON]
    children: dict[tuple[int, int], int] = {}
    src: list[int] = []
    dst: list[int] = []
    words: list[int] = []
    ends: list[int] = []
    finals: list[int] = []
    num_states = 1
    for rank, hyp in enumerate(nbest.hypotheses):
        state = 0
        for word in hyp.words:
            wid = ids.get(word)
            if wid is None:
                if not isinstance(word, str) or word.split() != [word]:
                    raise LatticeFormatError(f"hypothesis {rank + 1} has word {word!r}; words are non-empty "
                                             "strings without white space", key=nbest.key)
                wid = ids[word] = len(symbols)
                symbols.append(word)
            nxt = children.get((state, wid))
            if nxt is None:
                nxt = children[(state, wid)] = num_states
                num_states += 1
                src.append(state)
                dst.append(nxt)
                words.append(wid)
            state = nxt
        ends.append(len(src))
        src.append(state)
        dst.append(num_states)
        words.append(0)
        finals.append(num_states)
        num_states += 1
    a, f = len(src), len(finals)
    try:
        matrix = torch.tensor([[hyp.scores[name] for name in names] for hyp in nbest.hypotheses],
                              dtype=torch.float64).reshape(f, len(names))
    except (TypeError, ValueError, OverflowError, RuntimeError):
        raise LatticeFormatError("scores must be numbers", key=nbest.key) from None
    if not bool(torch.isfinite(matrix).all()):
        rank, column = (~torch.isfinite(matrix)).nonzero()[0].tolist()
        raise LatticeFormatError(f"hypothesis {rank + 1} has score {float(matrix[rank, column])}, scores must be "
                                 "finite", key=nbest.key, field=names[column])
    end_arcs = torch.tensor(ends, dtype=torch.int64)
    meta: dict[str, Any] = {"nbest": f}
    recovered = first_pass_weights(nbest)
    if recovered is not None:
        meta["first_pass_weights"] = recovered
    scores = {}
    for column, name in enumerate(names):
        values = torch.zeros(a, dtype=torch.float64)
        values[end_arcs] = matrix[:, column]
        scores[name] = values
    zeros_a, zeros_f = torch.zeros(a, dtype=torch.float64), torch.zeros(f, dtype=torch.float64)
    return Lattice(
        key=nbest.key, num_states=num_states, start=0,
        src=torch.tensor(src, dtype=torch.int64), dst=torch.tensor(dst, dtype=torch.int64),
        words=torch.tensor(words, dtype=torch.int64), acoustic=zeros_a, graph=zeros_a,
        finals=torch.tensor(finals, dtype=torch.int64), final_acoustic=zeros_f, final_graph=zeros_f,
        symbols=tuple(symbols), meta=meta,
        final_extra={"hypothesis": torch.arange(f, dtype=torch.int64)},
        scores=scores, final_scores={name: zeros_f for name in names})


# ---------------------------------------------------------------------------------- shared helpers
def _finite(text: str, what: str, fail: Any) -> float:
    try:
        value = float(text)
    except (ValueError, OverflowError):
        raise fail(f"{what} {_short(text)!r} is not a number") from None
    if not math.isfinite(value):
        raise fail(f"{what} is {value}, scores must be finite")
    return value


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _strip_boundaries(words: list[str]) -> list[str]:
    if words and words[0] == SENTENCE_START:
        words = words[1:]
    if words and words[-1] == SENTENCE_END:
        words = words[:-1]
    return words


def _lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers (``\\r`` of CRLF files removed)."""
    return [(number, line.rstrip("\r")) for number, line in enumerate(text.split("\n"), 1) if line.strip()]


# ---------------------------------------------------------------------------------- SRILM
_HEADERS = {"NBestList1.0": 1, "NBestList2.0": 2}
_DECIPHER_SCORE = re.compile(r"\(([^()\s]+)\)")
_WORD_FIELDS = ("(", "st:", None, "et:", None, "g:", None, "a:", None, ")")


def read_srilm_nbest(text: str, source: str | None = None, key: str | None = None) -> NBestList:
    """One SRILM n-best list (any of the three formats in the module docstring).

    ``key`` defaults to the file name of ``source`` without extensions (SRILM keeps one list per
    file), else ``"nbest"``."""
    if key is None:
        key = (Path(source).name.split(".")[0] if source else "") or "nbest"
    lines = _lines(text)
    fmt = 0
    if lines and lines[0][1].split()[0] in _HEADERS:
        fmt = _HEADERS[lines[0][1].split()[0]]
        if len(lines[0][1].split()) > 1:
            raise LatticeFormatError("the header line holds nothing but the header", source=source, key=key,
                                     line=lines[0][0])
        lines = lines[1:]
    elif lines and lines[0][1].lstrip().startswith("("):
        fmt = 1
    if not lines:
        raise LatticeFormatError("holds no hypotheses", source=source, key=key)
    hypotheses = []
    for number, line in lines:
        def fail(message: str, number: int = number) -> LatticeFormatError:
            return LatticeFormatError(message, source=source, key=key, line=number)

        fields = line.split()
        if fields[0] in _HEADERS:
            raise fail(f"{fields[0]} header inside the list (one list per file)")
        if fmt == 0:
            words, scores = _plain_hypothesis(fields, fail)
        else:
            match = _DECIPHER_SCORE.fullmatch(fields[0])
            if match is None:
                raise fail(f"expected a bytelog score in parentheses such as (-12345), got {_short(fields[0])!r}")
            total = _finite(match.group(1), "score", fail) * BYTELOG_TO_LN
            if fmt == 1:
                words, scores = fields[1:], {"score": total}
            else:
                words, scores = _decipher2_hypothesis(fields[1:], fail)
        hypotheses.append(NBestHypothesis(tuple(_strip_boundaries(words)), scores))
    nbest = NBestList(key, tuple(hypotheses))
    check_score_names(nbest, source)
    return nbest


def _plain_hypothesis(fields: list[str], fail: Any) -> tuple[list[str], dict[str, float]]:
    if len(fields) < 3:
        raise fail("expected 'acoustic-score lm-score nwords words...' (log10 scores)")
    acoustic = _finite(fields[0], "acoustic score", fail) * LOG10_TO_LN
    lm = _finite(fields[1], "LM score", fail) * LOG10_TO_LN
    if not fields[2].isdigit() or not fields[2].isascii():
        raise fail(f"the word count {_short(fields[2])!r} is not a non-negative integer")
    words, count = fields[3:], int(fields[2])
    if count not in (len(words), len(_strip_boundaries(words))):
        raise fail(f"the word count is {count}, but {len(words)} words follow")
    return words, {"acoustic": acoustic, "lm": lm}


def _decipher2_hypothesis(fields: list[str], fail: Any) -> tuple[list[str], dict[str, float]]:
    if len(fields) % 11:
        raise fail("NBestList2.0 words are written 'word ( st: S et: E g: G a: A )': 11 fields each, "
                   f"but {len(fields)} fields follow the score")
    words, acoustic, lm, previous_end = [], 0.0, 0.0, -1.0
    for i in range(0, len(fields), 11):
        unit = fields[i:i + 11]
        for offset, expected in enumerate(_WORD_FIELDS, 1):
            if expected is not None and unit[offset] != expected:
                raise fail(f"word {i // 11 + 1} ({_short(unit[0])!r}): expected {expected!r}, "
                           f"got {_short(unit[offset])!r}")
        start = _finite(unit[3], "start time", fail)
        end = _finite(unit[5], "end time", fail)
        if start > previous_end:  # a word; otherwise a phone or state inside the previous word
            words.append(unit[0])
            lm += _finite(unit[7], "LM score g:", fail)
            acoustic += _finite(unit[9], "acoustic score a:", fail)
            previous_end = end
    return words, {"acoustic": acoustic * BYTELOG_TO_LN, "lm": lm * BYTELOG_TO_LN}


def looks_like_srilm_nbest(lines: list[str]) -> bool:
    """Whether non-blank text lines look like an SRILM n-best list (for format guessing)."""
    if not lines:
        return False
    first = lines[0].split()
    if first[0] in _HEADERS:
        return True
    match = _DECIPHER_SCORE.fullmatch(first[0])
    if match:
        try:
            return math.isfinite(float(match.group(1)))
        except ValueError:
            return False
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or not fields[2].isdigit() or not fields[2].isascii():
            return False
        try:
            scores = [float(fields[0]), float(fields[1])]
        except ValueError:
            return False
        if all(s.isdigit() for s in fields[:2]):  # OpenFst arcs start with two state ids
            return False
        if not all(map(math.isfinite, scores)):
            return False
        if int(fields[2]) not in (len(fields) - 3, len(_strip_boundaries(fields[3:]))):
            return False
    return True


# ---------------------------------------------------------------------------------- ESPnet
_KBEST = re.compile(r"([1-9][0-9]*)best_recog")
_TENSOR = re.compile(r"tensor\(\s*([^(),\s]+)\s*(?:,[^()]*)?\)")
#: what ESPnet itself writes in a ``scores`` line, ``{"decoder": "tensor(-9.85)", "ctc": ...}``: read
#: by one match and ``float`` (5 times faster than ``json.loads`` and a check per value); any other
#: line, or a value that is not a finite float, goes the general way, which names what is wrong
_PLAIN_SCORES = re.compile(r'\{"\w+": "tensor\([-+.\w]+\)"(?:, "\w+": "tensor\([-+.\w]+\)")*\}')
_PLAIN_SCORE = re.compile(r'"(\w+)": "tensor\(([-+.\w]+)\)"')


def is_espnet_nbest_dir(path: str | Path) -> bool:
    """Whether ``path`` is an ESPnet decode folder with ``1best_recog/text``."""
    try:
        return (Path(path) / "1best_recog" / "text").is_file()
    except (OSError, TypeError, ValueError):
        return False


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise LatticeFormatError("no such file", source=str(path)) from None
    except UnicodeDecodeError as err:
        raise LatticeFormatError(f"not UTF-8 text (byte {err.start})", source=str(path)) from None
    except OSError as err:
        raise LatticeFormatError(f"cannot read: {err.strerror}", source=str(path)) from None


def _read_table(path: Path) -> dict[str, tuple[int, str]]:
    """``uttid rest`` lines: uttid -> (line number, rest), in file order."""
    table: dict[str, tuple[int, str]] = {}
    for number, line in _lines(_read_text(path)):
        parts = line.strip().split(maxsplit=1)
        if parts[0] in table:
            raise LatticeFormatError(f"utterance {parts[0]!r} is listed twice (also on line {table[parts[0]][0]})",
                                     source=str(path), line=number, key=parts[0])
        table[parts[0]] = (number, parts[1] if len(parts) > 1 else "")
    return table


def _espnet_number(value: Any, fail: Any, what: str) -> float:
    if isinstance(value, bool):
        raise fail(f"{what} must be a number, got {value}")
    if isinstance(value, (int, float)):
        try:
            value = float(value)
        except OverflowError:
            raise fail(f"{what} is too large for a float") from None
        if not math.isfinite(value):
            raise fail(f"{what} is {value}, scores must be finite")
        return value
    if not isinstance(value, str):
        raise fail(f"{what} must be a number or 'tensor(number)', got {type(value).__name__}")
    text = value.strip()
    match = _TENSOR.fullmatch(text)
    return _finite(match.group(1) if match else text, what, fail)


def _espnet_scores(text: str, fail: Any) -> dict[str, float]:
    if _PLAIN_SCORES.fullmatch(text):
        try:
            scores = {name: float(value) for name, value in _PLAIN_SCORE.findall(text)}
        except ValueError:
            pass  # a value float() does not read: the general way names it
        else:
            if all(map(math.isfinite, scores.values())):
                return scores
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        try:  # Python's repr of a dict of tensors: {'decoder': tensor(-0.3654), ...}
            obj = ast.literal_eval(_TENSOR.sub(r"\1", text))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise fail("expected a JSON object of named scores such as "
                       '{"decoder": "tensor(-0.37)", "ctc": -0.1}') from None
    if not isinstance(obj, dict):
        raise fail(f"expected an object of named scores, got {type(obj).__name__}")
    scores = {}
    for name, value in obj.items():
        if not isinstance(name, str) or not name:
            raise fail(f"score names must be non-empty strings, got {name!r}")
        scores[name] = _espnet_number(value, fail, f"score {name!r}")
    return scores


def read_espnet_nbest(directory: str | Path) -> list[NBestList]:
    """The n-best lists of an ESPnet decode folder (see the module docstring), in utterance order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LatticeFormatError("is not a directory (expected a folder holding 1best_recog/, 2best_recog/...)",
                                 source=str(directory))
    found = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _KBEST.fullmatch(p.name)) and p.is_dir())
    if not found or found[0] != 1:
        raise LatticeFormatError("has no 1best_recog folder", source=str(directory))
    for expected, k in enumerate(found, 1):
        if k != expected:
            raise LatticeFormatError(f"{expected}best_recog is missing, but {k}best_recog exists",
                                     source=str(directory))
    named = (directory / "1best_recog" / "scores").is_file()
    order: list[str] = []
    lists: dict[str, list[NBestHypothesis]] = {}
    for k in found:
        folder = directory / f"{k}best_recog"
        text_path, score_path = folder / "text", folder / ("scores" if named else "score")
        texts, values = _read_table(text_path), _read_table(score_path)
        total_path = folder / "score"
        totals = _read_table(total_path) if named and total_path.is_file() else {}
        text_source, score_source = str(text_path), str(score_path)
        for uttid, (number, _) in values.items():
            if uttid not in texts:
                raise LatticeFormatError(f"utterance {uttid!r} is not in {folder.name}/text", source=score_source,
                                         line=number, key=uttid)
        for uttid, (number, rest) in texts.items():
            if k == 1:
                order.append(uttid)
                lists[uttid] = []
            problem = ("is not in 1best_recog/text" if uttid not in lists
                       else f"has no hypothesis in {len(lists[uttid]) + 1}best_recog" if len(lists[uttid]) != k - 1
                       else f"is not in {folder.name}/{score_path.name}" if uttid not in values else None)
            if problem:
                raise LatticeFormatError(f"utterance {problem}", source=text_source, line=number, key=uttid)
            score_line, score_text = values[uttid]

            def fail(message: str, line: int = score_line, uttid: str = uttid) -> LatticeFormatError:
                return LatticeFormatError(message, source=score_source, line=line, key=uttid)

            scores = _espnet_scores(score_text, fail) if named else {"score": _espnet_number(score_text, fail, "score")}
            total = None
            if uttid in totals:
                total_line, total_text = totals[uttid]
                total = _espnet_number(total_text, lambda m: LatticeFormatError(
                    m, source=str(total_path), line=total_line, key=uttid), "score")
            if k > 1 and scores.keys() != lists[uttid][0].scores.keys():
                raise fail(f"has score names {sorted(scores)}, but the 1best hypothesis has "
                           f"{sorted(lists[uttid][0].scores)}")
            lists[uttid].append(NBestHypothesis(tuple(rest.split()), scores, total))
    return [NBestList(uttid, tuple(lists[uttid])) for uttid in order]


# ---------------------------------------------------------------------------------- JSON
_LIST_NAMES = ("key", "hypotheses")
_HYP_NAMES = ("words", "scores", "total")


def _path_name(name: str) -> str:
    return f".{name}" if name.isidentifier() else f"[{json.dumps(name)}]"


def nbest_from_json(obj: Any, source: str | None = None) -> list[NBestList]:
    """N-best lists from the JSON form in the module docstring (a parsed object or text)."""
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            obj = json.loads(obj)
        except (ValueError, RecursionError) as exc:
            raise LatticeFormatError(f"not valid JSON: {getattr(exc, 'msg', exc)}", source=source,
                                     line=getattr(exc, "lineno", None)) from None
    if isinstance(obj, dict) and "nbest" in obj:
        unknown = [name for name in obj if name != "nbest"]
        if unknown:
            raise LatticeFormatError("unknown name next to 'nbest' (nothing else is allowed there)", source=source,
                                     field=str(unknown[0]))
        if not isinstance(obj["nbest"], list):
            raise LatticeFormatError(f"must be a list, got {describe(obj['nbest'])}", source=source, field="nbest")
        return [_list_from_json(item, source, f"nbest[{i}]") for i, item in enumerate(obj["nbest"])]
    if isinstance(obj, list):
        return [_list_from_json(item, source, f"[{i}]") for i, item in enumerate(obj)]
    return [_list_from_json(obj, source, "")]


def _list_from_json(obj: Any, source: str | None, prefix: str) -> NBestList:
    key = obj.get("key") if isinstance(obj, dict) and isinstance(obj.get("key"), str) else None

    def fail(message: str, path: str) -> LatticeFormatError:
        field = (f"{prefix}.{path}" if prefix and path and path[0] != "[" else prefix + path) or None
        return LatticeFormatError(message, source=source, key=key, field=field)

    if not isinstance(obj, dict):
        raise fail(f"an n-best list must be a JSON object, got {describe(obj)}", "")
    unknown = [name for name in obj if name not in _LIST_NAMES]
    if unknown:
        raise fail(f"unknown name (allowed: {', '.join(_LIST_NAMES)})", str(unknown[0]))
    for name in _LIST_NAMES:
        if name not in obj:
            raise fail("is missing", name)
    if not isinstance(obj["key"], str) or not obj["key"]:
        raise fail(f"must be a non-empty string, got {describe(obj['key'])}", "key")
    items = obj["hypotheses"]
    if not isinstance(items, list) or not items:
        raise fail(f"must be a non-empty list, got {describe(items)}", "hypotheses")
    hypotheses = []
    for i, item in enumerate(items):
        path = f"hypotheses[{i}]"
        if not isinstance(item, dict):
            raise fail(f"a hypothesis must be a JSON object, got {describe(item)}", path)
        unknown = [name for name in item if name not in _HYP_NAMES]
        if unknown:
            raise fail(f"unknown name (allowed: {', '.join(_HYP_NAMES)})", f"{path}.{unknown[0]}")
        if "words" not in item:
            raise fail("is missing", f"{path}.words")
        words = item["words"]
        if isinstance(words, str):
            words = words.split()
        elif isinstance(words, list):
            for j, word in enumerate(words):
                if not isinstance(word, str) or not word or word.split() != [word]:
                    raise fail(f"a word must be a non-empty string without white space, got {describe(word)}",
                               f"{path}.words[{j}]")
        else:
            raise fail(f"must be a string or a list of strings, got {describe(words)}", f"{path}.words")
        raw = item.get("scores", {})
        if not isinstance(raw, dict):
            raise fail(f"must be an object of named scores, got {describe(raw)}", f"{path}.scores")
        scores = {}
        for name, value in raw.items():
            if not isinstance(name, str):
                raise fail(f"score names must be strings, got {describe(name)}", f"{path}.scores")
            where = f"{path}.scores{_path_name(name)}"
            if not name:
                raise fail("score names must be non-empty", where)
            scores[name] = _json_number(value, fail, where)
        if i and scores.keys() != hypotheses[0].scores.keys():
            raise fail(f"has score names {sorted(scores)}, but hypotheses[0] has {sorted(hypotheses[0].scores)}",
                       f"{path}.scores")
        total = None if item.get("total") is None else _json_number(item["total"], fail, f"{path}.total")
        if i and (total is None) != (hypotheses[0].total is None):
            raise fail("every hypothesis gives a total, or none does", f"{path}.total")
        hypotheses.append(NBestHypothesis(tuple(words), scores, total))
    return NBestList(obj["key"], tuple(hypotheses))


def _json_number(value: Any, fail: Any, where: str) -> float:
    """A finite float from a JSON number (not a bool), or ``fail(message, where)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f"must be a number, got {describe(value)}", where)
    try:
        number = float(value)
    except OverflowError:
        raise fail("is too large for a float", where) from None
    if not math.isfinite(number):
        raise fail(f"must be finite, got {number}", where)
    return number
