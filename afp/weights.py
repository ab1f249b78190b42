"""Tuned weights as a file: what ``afp tune --save`` writes and ``afp rescore --weights``, the
Python API and the server (``AFP_WEIGHTS``, or a request's ``weights``) read, so that no number
is copied by hand.

The file is JSON::

    {"format": "afp-weights/1",
     "lm_weight": 0.35, "old_lm_weight": 0.6, "word_penalty": 0.5, "unk_penalty": -4.0,
     "score_weights": {"decoder": 0.6, "ctc": 0.4},
     "decode": "viterbi",
     "tuned": {"wer": 3.41, "first_pass_wer": 3.61, "cross_validated_wer": 3.47, ...}}

``tuned`` records how the weights were found (informational; it is not read back). A field the
file leaves out is not set by it (None here): applying the file leaves that option as it was.
This is a file, not an options type: :class:`lattices.rescore.RescoreOptions` is the one options
type, and :func:`afp.options.build_options` applies a file to it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattices.options import DECODERS, RescoreOptions

FORMAT = "afp-weights/1"
FIELDS = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")
#: every option a weights file sets (as the CLI flags and the HTTP fields are named)
SETS = (*FIELDS, "score_weights", "decode")


class WeightsFileError(ValueError):
    """A weights file that cannot be used; the message names it and the field."""


@dataclass(frozen=True)
class TunedWeights:
    """The weights a file sets (see the module docstring); None: not set by the file."""

    lm_weight: float | None = None
    old_lm_weight: float | None = None
    word_penalty: float | None = None
    unk_penalty: float | None = None
    score_weights: Mapping[str, float] | None = None
    decode: str | None = None
    tuned: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: RescoreOptions, tuned: Mapping[str, Any] | None = None) -> TunedWeights:
        """The weights of ``options`` (one LM weight; every weight set) as a file's content."""
        if options.lm_weights is None or len(options.lm_weights) != 1:
            raise ValueError(f"a weights file holds one LM weight, got {options.lm_weights}")
        missing = [n for n in ("old_lm_weight", "word_penalty", "unk_penalty") if getattr(options, n) is None]
        if missing:
            raise ValueError(f"a weights file holds every weight; {', '.join(missing)} not set")
        return cls(lm_weight=options.lm_weights[0], old_lm_weight=options.old_lm_weight,
                   word_penalty=options.word_penalty, unk_penalty=options.unk_penalty,
                   score_weights=dict(options.score_weights), decode=options.decode, tuned=dict(tuned or {}))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT}
        for name in SETS:
            value = getattr(self, name)
            if value is not None:
                out[name] = dict(value) if name == "score_weights" else value
        return {**out, "tuned": dict(self.tuned)}

    @classmethod
    def from_json(cls, data: Any, source: str = "weights") -> TunedWeights:
        """Check and read a parsed weights file; errors name ``source`` and the field."""
        if not isinstance(data, dict):
            raise WeightsFileError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if data.get("format", FORMAT) != FORMAT:
            raise WeightsFileError(f"{source}: field format: expected {FORMAT!r}, got {data.get('format')!r}")
        unknown = sorted(set(data) - {"format", *SETS, "tuned"})
        if unknown:
            raise WeightsFileError(f"{source}: unknown field(s) {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name in FIELDS:
            if name in data:
                values[name] = _number(data[name], f"{source}: field {name}")
        if "score_weights" in data:
            scores = data["score_weights"]
            if not isinstance(scores, dict):
                raise WeightsFileError(f"{source}: field score_weights: expected an object of NAME: WEIGHT")
            values["score_weights"] = {str(k): _number(v, f"{source}: field score_weights.{k}")
                                       for k, v in scores.items()}
        if "decode" in data:
            if data["decode"] not in DECODERS:
                raise WeightsFileError(f"{source}: field decode: expected {' or '.join(DECODERS)}, got "
                                       f"{data['decode']!r}")
            values["decode"] = data["decode"]
        return cls(**values, tuned=dict(data.get("tuned") or {}))

    @classmethod
    def read(cls, path: str | Path) -> TunedWeights:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise WeightsFileError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise WeightsFileError(f"{path}: cannot read: {err}") from None
        except ValueError as err:
            raise WeightsFileError(f"{path}: not JSON: {err}") from None
        return cls.from_json(data, str(path))

    def write(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    def apply(self, options: RescoreOptions, keep: frozenset[str] | set[str] = frozenset()) -> RescoreOptions:
        """``options`` with the weights this file sets (the other options, such as ``nbest``, kept),
        except the options named in ``keep`` (names of :data:`SETS`: what a request sets itself
        wins over the file)."""
        unknown = set(keep) - set(SETS)
        if unknown:
            raise ValueError(f"keep: not options of a weights file: {sorted(unknown)}")
        values = {"lm_weights": None if self.lm_weight is None else (self.lm_weight,),
                  "old_lm_weight": self.old_lm_weight, "word_penalty": self.word_penalty,
                  "unk_penalty": self.unk_penalty, "decode": self.decode,
                  "score_weights": None if self.score_weights is None else tuple(self.score_weights.items())}
        from lattices.options import option_spec

        kept = {option_spec(name).field for name in keep}  # the door names as RescoreOptions' fields
        return dataclasses.replace(options, **{k: v for k, v in values.items() if k not in kept and v is not None})


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WeightsFileError(f"{where}: expected a finite number, got {value!r}")
    return float(value)
