"""One builder of rescoring options for every door.

``afp rescore`` / ``afp tune`` / ``afp rescore-cuts`` (:mod:`service.cli`), ``POST /v1/rescore``
(:mod:`service.engine`) and the Python API (:meth:`afp.Model.rescore`) all turn what the user gave
into the engine's one options type, :class:`lattices.rescore.RescoreOptions`, by calling
:func:`build_options`. The defaults are those of ``RescoreOptions`` (documented there), with the
one thing the engine cannot know filled in here: the model's own unknown-word penalty
(``unk_default``, :attr:`lm.checkpoint.LoadedModel.default_unk_penalty`).

The names are the HTTP request fields and the command-line flags (``lm_weight``, ``max_arcs``,
``target_arcs``, ``prune_if_too_large``...: each option's row of :data:`lattices.options.OPTIONS`,
which also says what it takes and its help); ``RescoreOptions``' own field names are accepted too.
The two expansion budgets (``target_arcs``: what a dense lattice is made small to, default 20,000,
0 for none: dense lattices expanded whole up to ``max_arcs``; ``max_arcs``: the memory limit of every
lattice, default 5,000,000) are whole numbers, as every count (``nbest``...): any integral number
(``numpy.int64`` too), never a bool or a float. ``RescoreOptions`` checks every value (its docstring
says what each does); a value it refuses is raised here as an :class:`OptionValueError` named as the
caller spelled it. A weights file of
``afp tune --save`` (:class:`afp.weights.TunedWeights`) sets the weights it holds:

* ``weights`` given by the caller (``--weights``, ``weights=``, a request's ``weights`` object):
  with ``fields_win=False`` (the command line and the Python API) a weight option given beside it
  is an error, since the two disagree about who sets it; with ``fields_win=True`` (HTTP, where a
  request may refine its weights object) what the request sets itself wins.
* ``default_weights`` (the server's ``AFP_WEIGHTS``): applied under everything the caller gave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from afp.weights import SETS, TunedWeights
from lattices.options import OPTIONS, RescoreOptionError, RescoreOptions

__all__ = ["OptionValueError", "OptionsError", "build_options", "parse_score_weights", "RENAMED"]

#: door names -> RescoreOptions field names (where they differ), from the options' table
RENAMED = {spec.name: spec.field for spec in OPTIONS if spec.name != spec.field}
_FIELDS = frozenset(f.name for f in dataclasses.fields(RescoreOptions))


class OptionsError(ValueError):
    """Options that cannot be used together or are not options; ``field`` names the one at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class OptionValueError(OptionsError):
    """An option given a value it cannot take (the Python API raises it as it is, a ``ValueError``;
    other :class:`OptionsError` instances are the wrong arguments, a ``TypeError`` there)."""


def parse_score_weights(text: str) -> dict[str, float]:
    """``"decoder=0.6,ctc=0.4"`` -> ``{"decoder": 0.6, "ctc": 0.4}`` (the ``--score-weights`` flag and
    the ``score_weights`` query parameter); an empty text is no weights. Raises
    :class:`OptionsError` naming the text."""
    out: dict[str, float] = {}
    if not text.strip():
        return out
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            shown = text if len(text) <= 80 else text[:80] + "..."
            raise OptionsError(f"score_weights {shown!r}: expected NAME=WEIGHT,NAME=WEIGHT... (decoder=0.6,ctc=0.4)",
                               "score_weights") from None
    return out


def build_options(given: Mapping[str, Any] | None = None, *, weights: TunedWeights | None = None,
                  default_weights: TunedWeights | None = None, fields_win: bool = False,
                  unk_default: float = 0.0) -> RescoreOptions:
    """The engine's options from what a door was given.

    Args:
      given: the options the caller set, by door name or field name; a value of None counts as not
        given (argparse's unset flags). ``lm_weight`` may be a number or a list, ``score_weights``
        a mapping, a tuple of pairs or a ``NAME=W,...`` text.
      weights: a weights file the caller named (see the module docstring for ``fields_win``).
      default_weights: weights applied under everything given (the server's ``AFP_WEIGHTS``).
      unk_default: the model's own unknown-word penalty, used where no ``unk_penalty`` is given
        and no weights file sets one.
    Raises:
      OptionsError: an unknown option, or a weight option beside ``weights`` with ``fields_win`` off.
      OptionValueError: a value ``RescoreOptions`` refuses, named as given (``target_arcs``).
      lattices.scored.WeightError: a weight ``RescoreOptions`` refuses (its message names it).
    """
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # field -> the caller's name of it
    for name, value in (given or {}).items():
        if value is None:
            continue
        field = RENAMED.get(name, name)
        if field not in _FIELDS:
            raise OptionsError(f"unknown rescoring option {name!r}", name)
        values[field], spelled[field] = value, name
    if "lm_weights" in values and not isinstance(values["lm_weights"], (list, tuple)):
        values["lm_weights"] = (values["lm_weights"],)
    if "lm_weights" in values:
        values["lm_weights"] = tuple(values["lm_weights"])
    scores = values.get("score_weights")
    if isinstance(scores, str):
        scores = parse_score_weights(scores)
    if isinstance(scores, Mapping):
        values["score_weights"] = tuple(scores.items())
    set_by_caller = {name for name in SETS if RENAMED.get(name, name) in values}
    if weights is not None and set_by_caller and not fields_win:
        flags = ", ".join(sorted(set_by_caller))
        raise OptionsError(f"a weights file sets the weights: give it or {flags}, not both", sorted(set_by_caller)[0])
    values.setdefault("unk_penalty", unk_default)
    try:
        options = RescoreOptions(**values)
    except RescoreOptionError as err:
        name = spelled.get(err.field, err.field)
        raise OptionValueError(err.naming(name), name) from None
    tuned = weights if weights is not None else default_weights
    if tuned is None:
        return options
    keep = set_by_caller
    if "unk_penalty" not in keep and tuned.unk_penalty is None:
        keep = keep | {"unk_penalty"}  # a file that does not set it leaves the model's own
    return tuned.apply(options, keep=frozenset(keep))

