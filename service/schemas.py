"""Request and response bodies of the HTTP API (separate from the engine's internals)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationInfo, create_model, field_validator

from lattices.formats import READ_FORMATS, TEXT_FORMATS
from lattices.lattice import describe
from lattices.options import DEFAULT_TARGET_EXPANDED_ARCS, OPTIONS, OptionSpec

#: every format lattices.formats reads, but a directory of files (espnet-nbest)
LatticeFormat = Literal[tuple(["auto", *(f for f in READ_FORMATS if f != "espnet-nbest")])]  # type: ignore[valid-type]
#: formats whose lattice is text (a JSON string), and those whose lattice is a JSON object or list
OBJECT_FORMATS = ("k2",)
#: a finite number; a finite number that is not negative (a weight of a log-probability)
Finite = Annotated[float, Field(allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]

KALDI_EXAMPLE = "utt1\n0 1 YEAH 1.5,120.2,\n0 1 YES 2.0,119.0,\n1 2 I 1.0,80.5,\n2 3 THINK 2.5,150.0,\n3 4 SO 1.0,90.0,\n4\n"


#: how a request's descriptions name an option that is the server's, not a request field
SERVER_OPTIONS = {"max_arcs": "the server's AFP_MAX_EXPANDED_ARCS"}
#: request fields whose unset value is the server's setting, not RescoreOptions' default
SERVER_DEFAULTS = {"target_arcs": f"the server's AFP_TARGET_EXPANDED_ARCS (default {DEFAULT_TARGET_EXPANDED_ARCS})"}


def _value_type(spec: OptionSpec) -> Any:
    """The request type of an option's values (:data:`lattices.options.Kind`), with its bounds."""
    low = spec.minimum if spec.off is None or spec.minimum is None else min(spec.off, spec.minimum)
    if spec.kind == "count":
        return Annotated[int, Strict(), Field(ge=low, le=spec.maximum)]
    if spec.kind == "number":
        return Annotated[float, Field(ge=low, le=spec.maximum, allow_inf_nan=False)]
    if spec.kind == "weights":
        return Weight | Annotated[list[Weight], Field(min_length=1, max_length=spec.maximum)]
    if spec.kind == "choice":
        return Literal[spec.choices]  # type: ignore[valid-type]
    return {"weight": Weight, "penalty": Finite, "named_weights": dict[str, Weight], "switch": bool,
            "name": str}[spec.kind]


def request_field(spec: OptionSpec) -> tuple[Any, Any]:
    """An option as a request field: its type and bounds, default and description, all from its
    spec (:data:`lattices.options.OPTIONS`) and ``RescoreOptions``' default; null where the option
    may be unset (it means: not given)."""
    default = spec.default if spec.default != () else None  # no named weights: unset
    description = spec.describe(lambda name: SERVER_OPTIONS.get(name, name))
    if spec.name in SERVER_DEFAULTS:
        default = None
        description += f". Unset or null: {SERVER_DEFAULTS[spec.name]}"
    kind = _value_type(spec)
    return (kind | None if spec.nullable or default is None else kind), Field(default=default, description=description)


#: the request fields of every option a request may set, in the order of lattices.options.OPTIONS
_OptionFields = create_model("_OptionFields", __config__=ConfigDict(extra="forbid"),
                             **{spec.name: request_field(spec) for spec in OPTIONS if spec.http})


class RescoreOptionsModel(_OptionFields):  # type: ignore[misc, valid-type]
    """How to combine scores and what to return. A field left out (or null) is not given: the engine's
    default, which for some options is read from the lattice (HTK lmscale/wdpenalty) or the model
    (unk_penalty). The option fields are generated from :data:`lattices.options.OPTIONS`
    (:func:`request_field`), so their defaults and limits are the engine's."""

    model_config = ConfigDict(extra="forbid")

    features: list[str] | None = Field(
        default=None, max_length=16,
        description="which of the server's acausal window models (AFP_FEATURES, GET /v1/models) to add as named "
                    "scores, weighted by score_weights; default: all of them")
    weights: dict[str, Any] | None = Field(
        default=None, description="the object of a weights file (afp tune --save): its lm_weight, old_lm_weight, "
                                  "word_penalty, unk_penalty, score_weights and decode, under the fields this request "
                                  "sets itself; default: the server's AFP_WEIGHTS, if any")


class RescoreRequest(RescoreOptionsModel):
    """A lattice (or an archive of them) and the rescoring options."""

    format: LatticeFormat = Field(default="auto", description="lattice format; auto guesses from the content")
    lattice: str | dict[str, Any] | Annotated[list[Any], Field(min_length=1)] = Field(
        description="Kaldi text archive, HTK SLF, OpenFst text or an SRILM n-best list as a string; a JSON lattice "
                    "object (or list); an n-best list {key, hypotheses: [{words, scores: {name: number}}]} (or a "
                    "list of them); for k2 an object {arcs: [[src, dst, label, score], ...], aux_labels: [...], "
                    "lm_scores: [...]} (or a list of them), which format auto recognizes")
    words: str | None = Field(default=None, description="symbol table text (words.txt) for integer word ids")

    @field_validator("lattice")
    @classmethod
    def _lattice_fits_format(cls, lattice: Any, info: ValidationInfo) -> Any:
        """A text format's lattice is a string, a k2 lattice an object or a list (the schema's
        ``allOf``: the same rule, so the schema accepts what the server accepts)."""
        fmt = info.data.get("format", "auto")
        if fmt in TEXT_FORMATS and not isinstance(lattice, str):
            raise ValueError(f"a {fmt} lattice is sent as a string (its text), got {describe(lattice)}")
        if fmt in OBJECT_FORMATS and isinstance(lattice, str):
            raise ValueError(f"a {fmt} lattice is sent as a JSON object (or a list of them), not a string")
        return lattice

    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
        {"if": {"properties": {"format": {"enum": list(TEXT_FORMATS)}}, "required": ["format"]},
         "then": {"properties": {"lattice": {"type": "string"}}}},
        {"if": {"properties": {"format": {"enum": list(OBJECT_FORMATS)}}, "required": ["format"]},
         "then": {"properties": {"lattice": {"type": ["object", "array"]}}}},
    ], "examples": [
        {"format": "kaldi", "lattice": KALDI_EXAMPLE, "nbest": 2},
        {"format": "json", "lattice": {"key": "utt1", "start": 0, "arcs": [[0, 1, "YEAH", -120.2, -1.5],
                                                                           [1, 2, "RIGHT", -90.0, -2.0]],
                                      "finals": [[2, 0.0, 0.0]]}},
        {"format": "nbest-json", "score_weights": {"decoder": 0.6, "ctc": 0.4}, "old_lm_weight": 0.6,
         "lm_weight": 0.3, "lattice": {"key": "utt1", "hypotheses": [
             {"words": "I THINK SO", "scores": {"decoder": -1.2, "ctc": -0.8, "lm": -9.1}},
             {"words": "I THINK SEW", "scores": {"decoder": -1.0, "ctc": -0.9, "lm": -14.3}}]}},
    ]})


class Hypothesis(BaseModel):
    words: list[str]
    score: float = Field(description="combined score (natural log, LM units)")
    acoustic: float = Field(description="acoustic log-likelihood, unscaled")
    lm_logprob: float = Field(description="the model's natural-log probability of the words, </s> included")
    old_lm: float = Field(description="the old-LM score (the lattice's graph score, an n-best list's lm score)")
    scores: dict[str, float] = Field(description="the named first-pass scores, unscaled")
    unk: int = Field(description="words scored as <unk>")
    word_posteriors: list[float] | None = Field(default=None, description="with posteriors: one per word of `words` (epsilons and skipped symbols have none), each in [0, 1]")


class LatticeResult(BaseModel):
    key: str
    best: Hypothesis
    nbest: list[Hypothesis]
    first_pass: Hypothesis | None = Field(description="the first pass's own 1-best (an n-best list's first "
                                          "hypothesis; a lattice's best path under its own scores)")
    changed: bool = Field(description="rescoring changed the 1-best words")
    decode: str = Field(description="viterbi or mbr: how best was chosen")
    score_weights: dict[str, float] = Field(description="the weight of each named first-pass score")
    unk_penalty: float
    lm_weight: float
    acoustic_scale: float
    old_lm_weight: float
    word_penalty: float
    expanded_states: int
    expanded_arcs: int
    lattice_states: int = Field(description="states of the lattice that was expanded: the input, or the pruned "
                                            "input when it was pruned (pruned.states_before: the input's)")
    lattice_arcs: int = Field(description="arcs of the lattice that was expanded: the input, or the pruned input "
                                          "when it was pruned (pruned.arcs_before: the input's)")
    unique_contexts: int
    scored_pairs: int
    rho: int
    future: int = Field(description="words of right context the features look ahead (0: causal)")
    features: list[str] = Field(description="the acausal window models added as named scores")
    oov: int = Field(description="distinct out-of-vocabulary words in the lattice (scored as <unk>)")
    oov_words: list[str] = Field(description="those words (the first 50)")
    oov_share: float = Field(description="out-of-vocabulary words over the distinct words the model scored")
    recased: int = Field(description="distinct words looked up in the model's case (match_case)")
    recased_words: list[list[str]] = Field(description="[word, the model's spelling] pairs (the first 20)")
    old_lm_score: str | None = Field(description="what the old LM was: a named score of the input, or 'old-lm "
                                                 "scorer' (an n-gram given as the old LM)")
    kbest_expanded: int = Field(description="(state, word prefix) nodes the n-best search expanded")
    nbest_complete: bool = Field(description="false when the n-best search stopped at its bound "
                                             "(max_kbest_paths) before finding every hypothesis asked for")
    pruned: dict[str, Any] | None
    stages: list[dict[str, Any]] | None = Field(
        default=None, description="when the lattice was made small before its expansion (lattices/reduce.py): each "
                                  "stage in order (input, determinize, minimize, fit) with its states, arcs and seconds")
    seconds: float
    timing: dict[str, float]
    lattice: str | dict[str, Any] | list[Any] | None = Field(default=None, description="rescored lattice")


class RescoreResponse(BaseModel):
    results: list[LatticeResult]
    warnings: list[str] = Field(default_factory=list, description="what the request should check, e.g. a "
                                "lattice whose words are mostly unknown to the model (given once per request, as "
                                "afp rescore warns once per job)")


class PerplexityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"sentences": ["YEAH I THINK SO", "SO WHAT DO YOU DO FOR A LIVING"]}]})

    sentences: list[str] = Field(min_length=1, description="one sentence per entry, words separated by spaces")


class SentenceScore(BaseModel):
    logprob: float = Field(description="natural log, </s> included")
    tokens: int = Field(description="words + 1")


class PerplexityResponse(BaseModel):
    ppl: float
    tokens: int
    oov: int
    per_sentence: list[SentenceScore]


class ModelInfo(BaseModel):
    name: str
    cell: str
    layers: int
    hidden: int
    rho: int | None
    context_size: int | None
    vocab_size: int
    parameters: int
    device: str
    score_precision: str = Field(description="output layer of scoring: fp32 or bf16 (lm/output.py)")
    batching: bool
    old_lm: str | None = Field(default=None, description="the ARPA n-gram subtracted exactly from graph scores "
                                                         "(AFP_OLD_LM), or null")
    weights: dict[str, Any] | None = Field(default=None, description="the default weights of requests (AFP_WEIGHTS)")
    features: dict[str, Any] = Field(default_factory=dict, description="acausal window models a request may add "
                                     "as named scores (AFP_FEATURES): name -> {name, rho, future}")
    default_unk_penalty: float = Field(default=0.0, description="the unk_penalty of requests that give none: "
                                       "-log of the distinct training words the model maps to <unk>")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class ErrorBody(BaseModel):
    kind: str = Field(description="lattice_format, expansion_budget, invalid_request, too_large, unauthorized, "
                                  "unsupported_encoding, timeout, ...")
    message: str
    key: str | None = None
    line: int | None = None
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
