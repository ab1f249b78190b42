"""The ARPA back-off n-gram format: the subset read, its word conventions, its error and the writer.

The one reader is :func:`lm.ngram.store.read_arpa_store`, and :class:`lm.ngram.store.StoreScorer`
scores what it reads; the Kneser-Ney builder (:mod:`lm.ngram.kneser_ney`) writes the format. This
module holds what they share, so none imports another's internals.

The format (as SRILM and KenLM write it), the subset read::

    any text (ignored) up to the line \\data\\
    \\data\\
    ngram 1=<count>                 one line per order, orders 1..N, each once
    ...
    ngram N=<count>

    \\1-grams:
    <log10 p> <w1> [<log10 backoff>]
    ...
    \\N-grams:
    <log10 p> <w1> .. <wN>          the highest order has no back-off weights
    \\end\\                          anything after it is ignored

Fields are separated by whitespace, lines by ``\\n``, blank lines are ignored, sections come in
order 1..N and hold exactly as many entries as the header says. Every number is finite (a
log-probability may be ``-inf``), every word of a higher-order n-gram must be among the
unigrams, ``</s>`` must be one, and no n-gram may be listed twice. Text is UTF-8;
gzip-compressed input is recognised by its magic bytes. Any violation raises
:class:`ArpaFormatError` naming the source and line.

Probabilities (standard back-off, as SRILM and KenLM compute them), in natural log:

* ``P(w | h) = p(h w)`` when the n-gram ``h w`` is listed, else ``bo(h) + P(w | h[1:])``,
  recursively down to the unigram ``p(w)``; ``bo`` of a context that is not listed, or is listed
  without a back-off field, is 0. Only the last ``order - 1`` tokens of a history matter.
* ``<s>`` is a context-only token: as a target it always gets :data:`LOG_FLOOR` (the file's
  unigram of ``<s>``, usually ``-99``, is kept but never used for prediction).
* An unknown word is scored as ``<unk>`` when the file has ``<unk>``. Without it, an unknown word
  maps to an extra ``<unk>`` id that has no n-grams: as a target it gets exactly
  :data:`LOG_FLOOR` (SRILM's ``-99`` log10 "zero probability", converted to natural log), whatever
  the context, and in a history it matches no n-gram, so the prediction backs off past it.

The tests check the batched scorer against a dict-based reading of this definition
(``tests/lm/ngram_reference.py``).
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
#: the unknown-word symbols recognised, in order of preference (Kaldi recipes use ``<UNK>`` or
#: ``<SPOKEN_NOISE>``; ``lm.vocab``'s symbol tables and the ARPA readers agree on them)
UNK_SYMBOLS = (UNK, "<UNK>", "[unk]", "<SPOKEN_NOISE>")
LOG10 = math.log(10.0)
#: natural-log probability of a word the model cannot predict (``<s>``; an unknown word when the
#: file has no ``<unk>``): SRILM's -99 in log10.
LOG_FLOOR = -99.0 * LOG10

def unk_symbol(words) -> str:
    """The unknown-word symbol of a vocabulary or an ARPA file's unigrams: the first of
    :data:`UNK_SYMBOLS` among ``words`` (a collection of str), else ``<unk>`` (then absent)."""
    return next((u for u in UNK_SYMBOLS if u in words), UNK)


#: a ``\\data\\`` header line, ``ngram N=COUNT``
NGRAM_COUNT_LINE = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


class ArpaFormatError(ValueError):
    """An ARPA file is malformed; the message starts with the source and, where there is one, the line."""


def write_arpa_file(path: str | Path, counts: Sequence[int],
                    sections: Iterable[tuple[int, np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """Write a back-off ARPA file, the one writer (``afp ngram``'s Kneser-Ney models,
    :func:`lm.ngram.kneser_ney.write_arpa`, and any other model held as arrays); gzip-compressed
    when ``path`` ends in ``.gz``.

    ``counts``: the n-grams of each order (the ``\\data\\`` header). ``sections``: the lines in
    file order, as pieces ``(n, log10_probs, grams, log10_backoffs)``: float ``(k,)``, the words of
    ``k`` n-grams of order ``n`` (``(k, n)`` strings) and float ``(k,)`` back-off weights, NaN for
    none; an order's pieces follow each other, orders ascending (an order without pieces is
    written empty). Numbers are written as ``%.10g``; the caller keeps the counts and the lines
    in agreement (the reader checks them)."""
    path = Path(path)
    handle = gzip.open(path, "wt", encoding="utf-8", compresslevel=6) if path.suffix == ".gz" else \
        path.open("w", encoding="utf-8")
    with handle as out:
        out.write("\\data\\\n" + "".join(f"ngram {n}={c}\n" for n, c in enumerate(counts, 1)))
        written = 0  # the highest order whose section header is written
        for n, logp, grams, backoffs in sections:
            if not written < n <= len(counts) and n != written:
                raise ValueError(f"ARPA sections out of order: order {n} after {written} (orders 1..{len(counts)})")
            for m in range(written + 1, n + 1):
                out.write(f"\n\\{m}-grams:\n")
            written = n
            out.write("".join(f"{lp:.10g}\t{' '.join(gram)}" + (f"\t{b:.10g}\n" if b == b else "\n")
                              for lp, gram, b in zip(logp.tolist(), grams.tolist(), backoffs.tolist())))
        for m in range(written + 1, len(counts) + 1):
            out.write(f"\n\\{m}-grams:\n")
        out.write("\n\\end\\\n")
