"""The reference estimator of interpolated modified Kneser-Ney (Chen & Goodman, 1999): a small,
dict-based, independent implementation of the definition below, against which the tests check the
library's numpy estimator (:mod:`lm.ngram.kneser_ney`, ``afp ngram``) and what reads its files.
It writes nothing: every ARPA file of the tests is the library's (``tests.factories.kn_arpa``).

Sentences are encoded as by :func:`lm.corpus.encode` (``[<s>, w_1, ..., w_n, </s>]``), with the
same vocabulary as the neural models, and every sentence is independent: the history of ``w_i``
is at most the ``order - 1`` tokens before it, cut at ``<s>``. Perplexity counts the words and
one ``</s>`` per sentence, as :func:`lm.evaluate.score_corpus` does.

For order ``n`` the model interpolates

    p_n(w | h) = max(a_n(h w) - D_n(a_n(h w)), 0) / a_n(h .) + gamma_n(h) p_{n-1}(w | h'),
    gamma_n(h) = (D_n1 N_1(h .) + D_n2 N_2(h .) + D_n3+ N_3+(h .)) / a_n(h .),

where ``h'`` drops the oldest word of ``h``, ``a_n`` is the raw count at the highest order and
for n-grams starting with ``<s>``, otherwise the number of distinct words seen before the n-gram
(the continuation count), the three discounts per order come from the count-of-counts of
``a_n``, and ``p_0`` is uniform over the predictable words. A context never seen at order ``n``
passes ``p_{n-1}`` through. Every ``p_n(. | h)`` sums to one.

In back-off form (ARPA) the same probabilities are: each stored n-gram ``h w`` with
``p_n(w | h)`` and each context ``h`` seen at order ``n`` with the back-off weight ``gamma_n(h)``,
because for a word never seen after ``h`` the discounted term is zero and
``p_n(w | h) = gamma_n(h) p_{n-1}(w | h')``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Gram = tuple[int, ...]


@dataclass(frozen=True)
class _Order:
    """Adjusted counts of one order and, per context, their total and the discounted mass."""

    counts: dict[Gram, int]
    discounts: tuple[float, float, float]  # D_1, D_2, D_3+
    totals: dict[Gram, int]
    backoff_mass: dict[Gram, float]  # D_1 N_1(h .) + D_2 N_2(h .) + D_3+ N_3+(h .)

    def discount(self, count: int) -> float:
        return 0.0 if count == 0 else self.discounts[min(count, 3) - 1]


def _discounts(counts: Iterable[int]) -> tuple[float, float, float]:
    """Chen & Goodman's modified-KN discounts from the count-of-counts n_1..n_4 (clamped into
    ``(0, k)`` so that every discounted count stays positive on tiny corpora)."""
    n = Counter(c for c in counts if c <= 4)
    n1, n2, n3, n4 = (n[k] for k in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
    raw = (1 - 2 * y * n2 / n1 if n1 else 0.5, 2 - 3 * y * n3 / n2 if n2 else 1.0, 3 - 4 * y * n4 / n3 if n3 else 1.5)
    return tuple(min(max(d, 1e-3), k - 1e-3) for k, d in zip((1, 2, 3), raw, strict=True))  # type: ignore[return-value]


class KneserNey:
    """An ``order``-gram interpolated modified Kneser-Ney model over integer token ids."""

    def __init__(self, orders: list[_Order], num_words: int) -> None:
        self.orders = orders  # orders[n - 1] is order n
        self.num_words = num_words

    @property
    def order(self) -> int:
        return len(self.orders)

    @classmethod
    def fit(cls, sentences: Iterable[Sequence[int]], order: int, num_words: int, bos: int) -> KneserNey:
        """Count a corpus.

        Args:
          sentences: encoded sentences, each ``[bos, w_1, ..., eos]``.
          order: n of the model (>= 1).
          num_words: how many ids can be predicted (the uniform floor's denominator).
          bos: the sentence-start id (never predicted; n-grams starting with it keep raw counts).
        """
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        raw: list[Counter[Gram]] = [Counter() for _ in range(order)]
        for sentence in sentences:
            ids = tuple(int(i) for i in sentence)
            for end in range(1, len(ids)):
                for n in range(1, min(order, end + 1) + 1):
                    raw[n - 1][ids[end - n + 1:end + 1]] += 1
        adjusted: list[dict[Gram, int]] = [dict(raw[order - 1])]
        for n in range(order - 1, 0, -1):
            left = Counter(gram[1:] for gram in raw[n])  # distinct left extensions of each n-gram
            adjusted.insert(0, {g: (c if g[0] == bos else left[g]) for g, c in raw[n - 1].items()})
        orders = []
        for counts in adjusted:
            discounts = _discounts(counts.values())
            totals: Counter[Gram] = Counter()
            mass: Counter[Gram] = Counter()
            for gram, count in counts.items():
                totals[gram[:-1]] += count
                mass[gram[:-1]] += discounts[min(count, 3) - 1]
            orders.append(_Order(counts, discounts, dict(totals), dict(mass)))
        return cls(orders, num_words)

    def prob(self, history: Sequence[int], word: int) -> float:
        """``p(word | history)``; only the last ``order - 1`` ids of ``history`` matter."""
        history = tuple(history[max(0, len(history) - self.order + 1):] if self.order > 1 else ())
        p = 1.0 / self.num_words
        for n, level in enumerate(self.orders, start=1):
            if len(history) < n - 1:
                break
            context = history[len(history) - n + 1:] if n > 1 else ()
            total = level.totals.get(context)
            if not total:
                continue
            count = level.counts.get(context + (word,), 0)
            p = (max(count - level.discount(count), 0.0) + level.backoff_mass[context] * p) / total
        return p

    def logprob(self, sentence: Sequence[int]) -> float:
        """Natural-log probability of ``w_1 .. </s>`` of an encoded sentence ``[<s>, w_1, ..., </s>]``."""
        ids = [int(i) for i in sentence]
        return sum(math.log(self.prob(ids[max(0, end - self.order + 1):end], ids[end])) for end in range(1, len(ids)))

    def perplexity(self, sentences: Iterable[Sequence[int]]) -> float:
        """``exp(-sum logprob / tokens)`` with one token per word and ``</s>``."""
        total, tokens = 0.0, 0
        for sentence in sentences:
            total += self.logprob(sentence)
            tokens += len(sentence) - 1
        return math.exp(-total / tokens)
