"""Tuned weights as a file: what ``afp tune --save`` writes and ``afp rescore --weights``, the
Python API and the server (``AFP_WEIGHTS``, or a request's ``weights``) read, so that no number
is copied by hand.

The file is JSON::

    {"format": "afp-weights/1",
     "lm_weight": 0.35, "old_lm_weight": 0.6, "word_penalty": 0.5, "unk_penalty": -4.0,
     "score_weights": {"decoder": 0.6, "ctc": 0.4},
     "decode": "viterbi",
     "tuned": {"wer": 3.41, "first_pass_wer": 3.61, "cross_validated_wer": 3.47, ...}}

``tuned`` records how the weights were found (informational; it is not read back).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattices.rescore import RescoreOptions

FORMAT = "afp-weights/1"
FIELDS = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")
#: every option a weights file sets (as the CLI flags and the HTTP fields are named)
SETS = (*FIELDS, "score_weights", "decode")


class WeightsFileError(ValueError):
    """A weights file that cannot be used; the message names it and the field."""


@dataclass(frozen=True)
class TunedWeights:
    """One weight setting (see the module docstring)."""

    lm_weight: float = 0.0
    old_lm_weight: float = 1.0
    word_penalty: float = 0.0
    unk_penalty: float = 0.0
    score_weights: Mapping[str, float] = field(default_factory=dict)
    decode: str = "viterbi"
    tuned: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_point(cls, point: Mapping[str, float], tuned: Mapping[str, Any] | None = None) -> TunedWeights:
        """From a point of ``afp tune``'s search (``score:NAME`` entries are named score weights)."""
        return cls(**{name: float(point[name]) for name in FIELDS if name in point},
                   score_weights={k[6:]: float(v) for k, v in point.items() if k.startswith("score:")},
                   tuned=dict(tuned or {}))

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **{name: getattr(self, name) for name in FIELDS},
                "score_weights": dict(self.score_weights), "decode": self.decode, "tuned": dict(self.tuned)}

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
        scores = data.get("score_weights", {})
        if not isinstance(scores, dict):
            raise WeightsFileError(f"{source}: field score_weights: expected an object of NAME: WEIGHT")
        values["score_weights"] = {str(k): _number(v, f"{source}: field score_weights.{k}") for k, v in scores.items()}
        decode = data.get("decode", "viterbi")
        if decode not in ("viterbi", "mbr"):
            raise WeightsFileError(f"{source}: field decode: expected viterbi or mbr, got {decode!r}")
        return cls(**values, decode=decode, tuned=dict(data.get("tuned") or {}))

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
        """``options`` with these weights (one LM weight; the other options, such as ``nbest``,
        kept), except the options named in ``keep`` (names of :data:`SETS`: what a request sets
        itself wins over the file)."""
        unknown = set(keep) - set(SETS)
        if unknown:
            raise ValueError(f"keep: not options of a weights file: {sorted(unknown)}")
        values = {"lm_weights": (self.lm_weight,), "old_lm_weight": self.old_lm_weight,
                  "word_penalty": self.word_penalty, "unk_penalty": self.unk_penalty,
                  "score_weights": tuple(self.score_weights.items()), "decode": self.decode}
        kept = {"lm_weights" if name == "lm_weight" else name for name in keep}
        return dataclasses.replace(options, relative_lm_weight=False,  # a kept LM weight was given: absolute too
                                   **{k: v for k, v in values.items() if k not in kept})


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WeightsFileError(f"{where}: expected a finite number, got {value!r}")
    return float(value)
