"""Words in another case than the model's: PocketSphinx writes lower case, every bundled model is
upper case (LibriSpeech's convention), Kaldi recipes differ by corpus.

A lattice word that a scorer does not know as written, but knows in another case (upper, lower or
capitalised, tried in that order), is scored as that form when ``match_case`` is on (the default
of :class:`lattices.rescore.RescoreOptions`): the word ``the`` is scored as ``THE`` by an
upper-case model. Words the model knows as written are never changed, and the results keep the
input's own spellings: only the look-up into the model's vocabulary changes. The number of words
mapped is reported (``stats["recased"]``) and the job or request is told once
(:func:`lattices.diagnostics.recased_warning`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor

__all__ = ["other_case_forms", "known_in_another_case", "model_spellings"]


def other_case_forms(word: str) -> list[str]:
    """The other-case forms tried for ``word``: upper, lower, capitalised (each once, not ``word``)."""
    return [f for f in dict.fromkeys((word.upper(), word.lower(), word.capitalize())) if f != word]


def known_in_another_case(words: Sequence[str], known: Callable[[Sequence[str]], Tensor]) -> list[tuple[str, str]]:
    """``(word, form)`` for each of ``words`` that has an other-case form ``known`` accepts (the first
    such form, :func:`other_case_forms` order)."""
    forms = [other_case_forms(w) for w in words]
    flat = [f for fs in forms for f in fs]
    if not flat:
        return []
    ok = dict(zip(flat, known(flat).tolist()))
    return [(w, next(f for f in fs if ok[f])) for w, fs in zip(words, forms) if any(ok[f] for f in fs)]


def model_spellings(words: Sequence[str], known: Callable[[Sequence[str]], Tensor],
                    match_case: bool = True) -> tuple[list[str], list[tuple[str, str]]]:
    """Each of ``words`` as the model should look it up, and the ``(word, form)`` pairs that were
    mapped: a word ``known`` rejects is replaced by its first known other-case form when
    ``match_case`` is on; every other word is kept as written."""
    spelled = list(words)
    if not match_case or not spelled:
        return spelled, []
    unknown = [w for w, ok in zip(spelled, known(spelled).tolist()) if not ok]
    mapped = known_in_another_case(unknown, known)
    forms = dict(mapped)
    return [forms.get(w, w) for w in spelled], mapped
