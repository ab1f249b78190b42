"""Jobs on a model and a text, as library calls: what ``afp info``, ``afp ppl``, ``afp score`` and
``afp mix`` compute (the command line parses its flags, calls one of these and prints)::

    from afp.scoring import ModelSpec
    from afp.text_jobs import model_info, perplexity

    spec = ModelSpec(device="cpu")
    model_info(spec)["name"]
    perplexity(spec, "examples/conversation.txt").to_json()["ppl"]

A text is a file with one sentence per line (``-``: standard input), sentence boundaries
stripped as :func:`lm.corpus.iter_sentences` strips them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from afp.scoring import ModelSpec
from lm.device import DEFAULT_DEVICE

if TYPE_CHECKING:
    from lm.scorer import TextScore

__all__ = ["Perplexity", "mix_models", "model_info", "perplexity", "read_sentences", "score_text"]


def read_sentences(path: str, keep_empty: bool) -> Iterator[list[str]]:
    """The sentences of ``path`` (``-``: standard input), streaming; ``keep_empty``: empty lines
    are sentences too (``afp score`` answers every line)."""
    from lm.corpus import iter_sentences

    return iter_sentences("/dev/stdin" if path == "-" else path, keep_empty=keep_empty)


def model_info(spec: ModelSpec) -> dict[str, Any]:
    """What a model is (``afp info --json``): its own description
    (:meth:`lm.checkpoint.LoadedModel.info`: architecture, context, vocabulary, device, training
    record...) and ``score_precision``, the output-layer precision scoring would use."""
    loaded = spec.load()
    return {**loaded.info(), "score_precision": spec.scorer(loaded, windows=True).precision}


@dataclass(frozen=True)
class Perplexity:
    """A text's perplexity (``afp ppl``): ``score`` (:class:`lm.scorer.TextScore`); ``window``:
    ``(rho, future)`` of a window model, whose perplexity is a pseudo-perplexity (each word from
    the words around it), else None; ``unk``: the model's unknown-word token."""

    score: TextScore
    window: tuple[int, int] | None
    unk: str

    def to_json(self) -> dict[str, Any]:
        """``{"ppl", "tokens", "sentences", "oov", "logprob"}``, and for a window model ``pseudo``
        and a ``note`` saying it is not comparable with a causal perplexity."""
        result = self.score.to_json()
        if self.window is not None:
            rho, future = self.window
            result["pseudo"] = True
            result["note"] = (f"pseudo-perplexity of a window model ({rho} words before, {future} after each word): "
                              f"not comparable with a causal perplexity")
        return result

    def summary(self) -> str:
        """One line, what ``afp ppl`` prints."""
        result = self.to_json()
        name = "pseudo-ppl" if self.window is not None else "ppl"
        return (f"{name} {result['ppl']:.2f} over {result['tokens']} tokens in {result['sentences']} sentences "
                f"({result['oov']} unknown words scored as {self.unk})"
                + (f"; {result['note']}" if self.window is not None else ""))


def perplexity(spec: ModelSpec, text: str) -> Perplexity:
    """The perplexity of ``text`` (one sentence per line, ``-``: standard input; empty lines
    skipped) over its words and one ``</s>`` per sentence."""
    from lm.scorer import text_score

    loaded = spec.load()
    score = text_score(spec.scorer(loaded, windows=True), read_sentences(text, keep_empty=False))
    window = (loaded.config.rho, loaded.config.future) if loaded.config.is_window else None
    return Perplexity(score=score, window=window, unk=loaded.vocab.unk)


def score_text(spec: ModelSpec, text: str, on_sentence: Callable[[Sequence[str], list[float]], None],
               note: Callable[[str], None] | None = None) -> TextScore:
    """Score every line of ``text`` (``-``: standard input; an empty line is an empty sentence),
    streaming: ``on_sentence(words, token_logprobs)`` as each is scored (natural logs, one per word,
    then ``</s>``). ``note`` is told, before any sentence, when the model is a window model (its
    scores are pseudo-log-likelihoods). Returns the text's :class:`lm.scorer.TextScore`."""
    from lm.scorer import text_score

    loaded = spec.load()
    if loaded.config.is_window and note is not None:
        note(f"acausal scores (pseudo-log-likelihoods) of a window model: each word given {loaded.config.rho} "
             f"words before and {loaded.config.future} after it")
    return text_score(spec.scorer(loaded, windows=True), read_sentences(text, keep_empty=True),
                      on_sentence=lambda words, values: on_sentence(words, values.tolist()))


def mix_models(models: Sequence[str], text: str, out: str, device: str = DEFAULT_DEVICE,
               score_precision: str | None = None) -> dict[str, Any]:
    """Estimate the interpolation weights of ``models`` on held-out ``text`` by EM
    (:func:`afp.mixtures.estimate_weights`) and write the mixture directory ``out``
    (:func:`afp.mixtures.write_mixture`); the summary ``afp mix`` prints: ``out``, ``models``,
    ``weights``, the iterations and each part's and the mixture's perplexity. A mixture as a part
    is refused before any model is loaded."""
    from afp.mixtures import check_parts, estimate_weights, open_model, scorer_of, write_mixture
    from lm.device import resolve_device

    check_parts(models)
    sentences = read_sentences(text, keep_empty=False)
    loaded = [open_model(path, device=str(resolve_device(device))) for path in models]
    scorers = [scorer_of(m, precision=score_precision or "auto") for m in loaded]
    weights, report = estimate_weights(scorers, list(sentences))
    write_mixture(out, models, weights, {"text": text, **report})
    return {"out": out, "models": list(models), "weights": weights, **report}
