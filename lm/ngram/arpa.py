"""The ARPA back-off n-gram format: the subset read, its word conventions and its error.

The one reader is :func:`lm.ngram.store.read_arpa_store` (and :func:`lm.ngram.store.parse_arpa_store`
for text, bytes or lines); :mod:`lm.ngram`'s dict-based model is built from what it reads. This
module holds what both need, so neither imports the other's internals.

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
"""

from __future__ import annotations

import math
import re

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
