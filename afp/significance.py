"""Is a WER difference real? Two tests on the same references, utterance by utterance.

Both take, for two systems A and B, the word errors of every utterance (the same utterances, the
same references) and say how sure one can be that B's WER differs from A's:

* **Matched pairs** (``mapsswe``): the matched-pairs sentence-segment word error test of NIST's
  sclite (``sc_stats``, Gillick & Cox 1989), with the utterance as the segment: ``d_i = errors_B(i)
  - errors_A(i)``, ``Z = mean(d) / (sd(d) / sqrt(n))``, and a two-sided p-value from the normal
  distribution (n is large: hundreds or thousands of utterances). sclite cuts segments at words
  both systems got right; utterances are coarser, so this is a little more conservative.
* **Bootstrap** (``bootstrap``): Bisani & Ney (2004), "Bootstrap estimates for confidence
  intervals in ASR performance evaluation": draw the utterances ``B`` times with replacement,
  recompute both WERs on each draw; the 95% interval of ``WER_B - WER_A`` and the probability of
  improvement, the share of draws where B has fewer errors than A (``poi``). The draws come from
  a seeded generator, so a report is repeatable.

``p < 0.05`` (matched pairs) or an interval that excludes 0 (bootstrap) say the difference is
unlikely to be chance on this test set; they say nothing about another test set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy

BOOTSTRAP_DRAWS = 1000


@dataclass(frozen=True)
class Comparison:
    """System B against system A on the same utterances (WERs in percent)."""

    utterances: int
    ref_words: int
    wer_a: float
    wer_b: float
    mapsswe_z: float
    mapsswe_p: float
    bootstrap_low: float  # 2.5% quantile of WER_B - WER_A over the draws
    bootstrap_high: float  # 97.5% quantile
    poi: float  # share of draws where B makes fewer errors than A
    draws: int

    @property
    def difference(self) -> float:
        return self.wer_b - self.wer_a

    @property
    def significant(self) -> bool:
        """Both tests agree at the 5% level: p < 0.05 and the 95% interval excludes 0."""
        return self.mapsswe_p < 0.05 and (self.bootstrap_low > 0 or self.bootstrap_high < 0)

    def to_json(self) -> dict[str, Any]:
        return {"utterances": self.utterances, "ref_words": self.ref_words, "wer_a": self.wer_a, "wer_b": self.wer_b,
                "difference": self.difference, "mapsswe": {"z": self.mapsswe_z, "p": self.mapsswe_p},
                "bootstrap": {"low": self.bootstrap_low, "high": self.bootstrap_high, "poi": self.poi,
                              "draws": self.draws},
                "significant": self.significant}

    def summary(self) -> str:
        """One line: ``WER A -> B (difference), p, interval, POI``."""
        return (f"{self.wer_a:.2f}% -> {self.wer_b:.2f}% ({self.difference:+.2f}): matched pairs p={self.mapsswe_p:.3g}, "
                f"bootstrap 95% [{self.bootstrap_low:+.2f}, {self.bootstrap_high:+.2f}], P(B better)={self.poi:.3f}"
                + (" (significant)" if self.significant else " (not significant)"))


def compare(errors_a: Sequence[int], errors_b: Sequence[int], ref_words: Sequence[int],
            draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> Comparison:
    """Compare two systems from their per-utterance word errors and the references' lengths
    (three sequences over the same utterances, in the same order)."""
    a = numpy.asarray(errors_a, dtype=numpy.float64)
    b = numpy.asarray(errors_b, dtype=numpy.float64)
    n_words = numpy.asarray(ref_words, dtype=numpy.float64)
    if not (a.shape == b.shape == n_words.shape) or a.ndim != 1:
        raise ValueError(f"per-utterance counts of different lengths: {a.shape}, {b.shape}, {n_words.shape}")
    n, total = a.shape[0], float(n_words.sum())
    if n == 0 or total == 0:
        raise ValueError("no utterance with reference words to compare on")
    d = b - a
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if sd == 0.0:
        z, p = (0.0, 1.0) if float(d.mean()) == 0.0 else (math.copysign(math.inf, float(d.mean())), 0.0)
    else:
        z = float(d.mean()) / (sd / math.sqrt(n))
        p = math.erfc(abs(z) / math.sqrt(2.0))  # two-sided, normal
    rng = numpy.random.default_rng(seed)
    picks = rng.integers(0, n, size=(draws, n))
    words = n_words[picks].sum(axis=1)
    words[words == 0] = 1.0
    delta = 100.0 * (b[picks].sum(axis=1) - a[picks].sum(axis=1)) / words
    low, high = numpy.quantile(delta, [0.025, 0.975]).tolist()
    poi = float((b[picks].sum(axis=1) < a[picks].sum(axis=1)).mean())
    return Comparison(utterances=n, ref_words=int(total), wer_a=100.0 * float(a.sum()) / total,
                      wer_b=100.0 * float(b.sum()) / total, mapsswe_z=z, mapsswe_p=p, bootstrap_low=low,
                      bootstrap_high=high, poi=poi, draws=draws)
