"""The command line's flags of the rescoring options (``afp rescore``, ``afp tune``, ``afp
rescore-cuts``), generated from the options' table, :data:`lattices.options.OPTIONS`: each flag's
type, bounds, choices and help are its option's spec, its default ``RescoreOptions``' own (named in
the help; a flag not given is None, which :func:`afp.options.build_options` reads as not given).
A new option gets its flag here without a line of code."""

from __future__ import annotations

import argparse
from typing import Any

from lattices.options import OPTIONS, OptionSpec, option_spec

__all__ = ["add_option_flags", "count_type", "flag_help", "flag_kind", "given_options", "tune_chooses"]


def tune_chooses() -> frozenset[str]:
    """The options ``afp tune`` has no flag for: the weights it chooses (those of a weights file but
    ``score_weights``, which it tunes only with --tune-score-weights), its Viterbi 1-best (--mbr
    evaluates MBR as well), and what does not change a 1-best."""
    from afp.weights import FIELDS

    return frozenset({*FIELDS, "decode", "nbest", "posteriors"})


def add_option_flags(p: argparse.ArgumentParser, tune: bool = False) -> None:
    """A flag for every rescoring option that has one (:data:`lattices.options.OPTIONS`): its type,
    bounds, help and default are the option's spec and ``RescoreOptions``' default. Each flag's
    ``dest`` is the option's door name, and a flag not given is None (the builder's default)."""
    skip = tune_chooses() if tune else frozenset()
    for spec in OPTIONS:
        if spec.flag_name is not None and spec.name not in skip:
            p.add_argument(spec.flag_name, dest=spec.name, default=None, help=flag_help(spec), **flag_kind(spec))


def flag_help(spec: OptionSpec) -> str:
    """An option's help as its flag shows it: the spec's text with the options it names as flags,
    and the default (``RescoreOptions``')."""
    if spec.flag_help is not None:
        return spec.flag_help
    text = spec.describe(lambda name: option_spec(name).flag_name or name)
    if spec.kind == "weights":
        text += " (repeat the flag for several)"
    default = spec.default
    if spec.kind == "switch":
        return text + (" (default on)" if default else "")
    if default is None or default == ():
        return text
    return f"{text} (default {default:g})" if isinstance(default, float) else f"{text} (default {default})"


def flag_kind(spec: OptionSpec) -> dict[str, Any]:
    """``add_argument``'s action, type, choices and metavar for an option of this kind."""
    if spec.kind == "switch":
        if spec.flag_help is None and spec.default:  # on by default: --auto-prune / --no-auto-prune
            return {"action": argparse.BooleanOptionalAction}
        return {"action": "store_const", "const": not spec.default}  # the flag turns it from its default
    if spec.kind == "count":
        return {"type": count_type(spec), "metavar": "N"}
    if spec.kind == "weights":
        return {"type": float, "action": "append"}
    if spec.kind == "choice":
        return {"choices": list(spec.choices)}
    if spec.kind == "named_weights":
        return {"metavar": "NAME=W,..."}
    if spec.kind == "name":
        return {"metavar": "NAME"}
    return {"type": float}


def count_type(spec: OptionSpec) -> Any:
    """An argparse type of a whole-number option: an ``int`` within the option's bounds
    (:meth:`lattices.options.OptionSpec.check`), or a usage error naming the flag."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        try:
            spec.check(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {spec.expected}, got {value}") from None
        return value

    return parse


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The rescoring options of parsed flags by their door names (each flag's ``dest``; None: not given)."""
    return {spec.name: getattr(args, spec.name, None) for spec in OPTIONS if spec.flag_name}
