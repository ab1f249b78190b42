"""Warnings about a job's input that do not stop it: a lattice whose words are mostly unknown.

One implementation serves every front end (``afp rescore`` prints it once per job, the server
returns it once per request in ``warnings``), so the same input gets the same warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from lattices.case import known_in_another_case

#: a lattice with more than this share of unknown (distinct) words gets the warning
UNKNOWN_WARNING_SHARE = 0.5


def unknown_words_warning(key: str, stats: dict[str, Any],
                          known: Callable[[Sequence[str]], Tensor]) -> str | None:
    """The warning for a rescored lattice (its result ``stats``: ``oov_share``, ``oov_words``)
    whose distinct words are mostly unknown to the model, or None.

    ``known`` is the scorer's (``ContextScorer.known``). The warning asks whether the input's case
    is the model's only when it is the likely cause: when at least half of the unknown words
    (of the first 50) are known in another case (upper, lower or capitalised), so rare names in
    the model's own case get no such hint.
    """
    share = float(stats.get("oov_share", 0.0))
    if share <= UNKNOWN_WARNING_SHARE:
        return None
    words: list[str] = list(stats.get("oov_words", []))
    text = (f"lattice {key!r}: {share:.0%} of its distinct words are unknown to the model "
            f"(e.g. {', '.join(words[:5])}); they are scored as <unk>")
    recased = known_in_another_case(words, known)
    if recased and len(recased) * 2 >= len(words):
        word, other = recased[0]
        text += (f". {len(recased)} of the {len(words)} are known in another case ({word} -> {other}): is the case "
                 f"of the input the model's?")
    return text


def recased_warning(key: str, stats: dict[str, Any]) -> str | None:
    """What a job (or request) is told, once, when a lattice's words were looked up in another case
    (:mod:`lattices.case`: ``stats["recased"]`` words, ``stats["recased_words"]`` examples), or None."""
    count = int(stats.get("recased", 0))
    if not count:
        return None
    word, form = stats.get("recased_words", [["?", "?"]])[0]
    return (f"lattice {key!r}: {count} of its distinct words are in another case than the model's and are scored as "
            f"the model spells them ({word} -> {form}); results keep the input's own spellings (--keep-case, or "
            f"match_case false, turns this off)")


def untuned_weights_warning(stats: dict[str, Any], old_lm_weight: float, lm_weight: float) -> str:
    """What a job (or request) rescoring with weights nobody chose is told, once: the weights in
    use and how to tune them. The untuned defaults keep the first pass's combination (its LM,
    ``stats["old_lm_score"]``, at ``old_lm_weight``) and add the new LM at ``lm_weight``; tuned
    weights can only do better on a dev set (afp tune), and say whether they do on new data."""
    old = stats.get("old_lm_score")
    kept = (f"the first pass's LM {old!r} at {old_lm_weight:g}" if old is not None
            else f"no first-pass LM (old-LM weight {old_lm_weight:g})")
    return (f"the weights are untuned ({kept}, the new LM at {lm_weight:g}): tune them on a dev set "
            f"(afp tune --refs REFS --save weights.json DEV) and pass --weights weights.json (HTTP: AFP_WEIGHTS or a "
            f"request's 'weights'); without a dev set, --lm-weight 0 keeps the first pass's own combination")


def input_warnings(key: str, stats: dict[str, Any], known: Callable[[Sequence[str]], Tensor]) -> dict[str, str]:
    """Every warning a rescored lattice's input earns, by kind (``unknown_words``, ``recased``):
    what ``afp rescore`` prints once per job and the server returns once per request, per kind."""
    found = {"unknown_words": unknown_words_warning(key, stats, known), "recased": recased_warning(key, stats)}
    return {kind: text for kind, text in found.items() if text is not None}
