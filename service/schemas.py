"""Request and response bodies of the HTTP API (separate from the engine's internals)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator

from lattices.formats import READ_FORMATS, TEXT_FORMATS
from lattices.lattice import describe
from lattices.rescore import DEFAULT_LM_WEIGHT, DEFAULT_TARGET_EXPANDED_ARCS, DENSE_FACTOR, NO_TARGET

#: every format lattices.formats reads, but a directory of files (espnet-nbest)
LatticeFormat = Literal[tuple(["auto", *(f for f in READ_FORMATS if f != "espnet-nbest")])]  # type: ignore[valid-type]
#: formats whose lattice is text (a JSON string), and those whose lattice is a JSON object or list
OBJECT_FORMATS = ("k2",)
#: a finite number; a finite number that is not negative (a weight of a log-probability)
Finite = Annotated[float, Field(allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]

KALDI_EXAMPLE = "utt1\n0 1 YEAH 1.5,120.2,\n0 1 YES 2.0,119.0,\n1 2 I 1.0,80.5,\n2 3 THINK 2.5,150.0,\n3 4 SO 1.0,90.0,\n4\n"


class RescoreOptionsModel(BaseModel):
    """How to combine scores; null means "from the lattice header" (HTK lmscale/wdpenalty)."""

    model_config = ConfigDict(extra="forbid")

    nbest: int = Field(default=1, ge=1, description="distinct word sequences to return")
    lm_weight: Weight | Annotated[list[Weight], Field(min_length=1, max_length=32)] = Field(
        default=DEFAULT_LM_WEIGHT, description=f"new-LM weight, or a list of 1 to 32 evaluated in one pass; unset: the "
                                               f"untuned default, {DEFAULT_LM_WEIGHT:g} times the old LM's weight")
    old_lm_weight: Weight | None = Field(
        default=None, description="0 replaces the old LM, 1 keeps it; unset: the recogniser's own weight of its LM "
                                  "where the input tells it (an n-best list's totals), else 1")
    acoustic_scale: Weight | None = Field(default=None, description="default 1/lmscale from the header, else 0.1")
    word_penalty: Finite | None = Field(default=None, description="per LM word; default wdpenalty/lmscale, else 0")
    prune_beam: float | None = Field(default=None, gt=0, description="prune the input to this beam first")
    target_arcs: StrictInt | None = Field(
        default=None, ge=NO_TARGET, description=f"the expansion (arcs) a dense lattice (a decoder's search lattice: "
                                                f"expansion bound over {DENSE_FACTOR} times its arcs) is made small to, "
                                                f"for speed: determinize, minimize, prune to fit; at most the server's "
                                                f"AFP_MAX_EXPANDED_ARCS, which every lattice must fit. {NO_TARGET}: no "
                                                f"target, a dense lattice is expanded whole up to that limit. Unset or "
                                                f"null: the server's AFP_TARGET_EXPANDED_ARCS (default "
                                                f"{DEFAULT_TARGET_EXPANDED_ARCS})")
    prune_if_too_large: bool = Field(default=True, description="when the expansion would pass the budget, prune "
                                                               "to fit and report it (pruned); false: fail with 422")
    determinize: Literal["auto", "always", "never"] = Field(
        default="auto", description="make the lattice small before expanding (determinize on words, minimize): "
                                    "auto when its expansion could pass the budget")
    determinize_beam: Finite | None = Field(default=None, ge=0.0, description="the determinization's pruning beam "
                                                                               "(unset: the engine's default, 10)")
    posteriors: bool = Field(default=False, description="word posteriors of the best path")
    return_lattice: bool = Field(default=False, description="return the rescored lattice in the input format")
    score_weights: dict[str, Weight] | None = Field(
        default=None, description="weights of named first-pass scores, e.g. {\"decoder\": 0.6, \"ctc\": 0.4}; unset "
                                  "names weigh 1 (acoustic: acoustic_scale)")
    old_lm_score: str | None = Field(default=None, description="the named score that is the old LM (default lm, "
                                                               "else graph)")
    unk_penalty: Finite = Field(default=0.0, description="log-probability added to each word scored as <unk>; "
                                                         "unset: the model's own (GET /v1/models, default_unk_penalty)")
    decode: Literal["viterbi", "mbr"] = Field(default="viterbi", description="best path, or minimum Bayes risk")
    match_case: bool = Field(default=True, description="a word the model knows only in another case (lower-case "
                                                       "input, upper-case model) is scored as the model spells it; "
                                                       "results keep the input's spellings. false: as written only")
    mbr_nbest: int = Field(default=100, ge=1, le=300, description="distinct hypotheses MBR decoding weighs")
    mbr_scale: Finite = Field(default=1.0, ge=0.0, description="MBR posteriors: softmax(scale * total score)")
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
    scores: dict[str, float] = Field(default_factory=dict, description="the named first-pass scores, unscaled")
    unk: int = Field(default=0, description="words scored as <unk>")
    word_posteriors: list[float] | None = Field(default=None, description="with posteriors: one per word of `words` (epsilons and skipped symbols have none), each in [0, 1]")


class LatticeResult(BaseModel):
    key: str
    best: Hypothesis
    nbest: list[Hypothesis]
    first_pass: Hypothesis | None = Field(default=None, description="the first pass's own 1-best (an n-best "
                                          "list's first hypothesis; a lattice's best path under its own scores)")
    changed: bool = Field(default=False, description="rescoring changed the 1-best words")
    decode: str = "viterbi"
    score_weights: dict[str, float] = Field(default_factory=dict)
    unk_penalty: float = 0.0
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
    oov: int = Field(description="distinct out-of-vocabulary words in the lattice (scored as <unk>)")
    oov_words: list[str]
    recased: int = Field(default=0, description="distinct words looked up in the model's case (match_case)")
    recased_words: list[list[str]] = Field(default_factory=list, description="[word, the model's spelling] pairs "
                                                                            "(the first 20)")
    kbest_expanded: int = Field(default=0, description="(state, word prefix) nodes the n-best search expanded")
    nbest_complete: bool = Field(default=True, description="false when the n-best search stopped at its bound "
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
