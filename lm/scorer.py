"""The language model as a context scorer: what the lattice engine needs, nothing more.

:class:`LMScorer` satisfies ``lattices.scorer.ContextScorer`` structurally (``lm`` does not import
``lattices``); ``service`` hands one to the rescoring engine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from lm.checkpoint import LoadedModel
from lm.evaluate import TextScore
from lm.model import DEFAULT_SCORE_ELEMENTS
from lm.output import resolve_score_precision
from lm.window import PAD, build_windows, score_each_window_once, sentence_tokens


class SentenceScorer(Protocol):
    """What sentence scoring needs of a scorer: ``lattices.scorer.ContextScorer``'s members
    (``lm`` does not import ``lattices``; an :class:`LMScorer` or the server's batcher)."""

    context_size: int | None
    bos_id: int
    eos_id: int
    unk_id: int

    def word_ids(self, words: Sequence[str]) -> Tensor: ...

    def known(self, words: Sequence[str]) -> Tensor: ...

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor: ...


class _ModelScorer:
    """What every scorer of a loaded model shares: its vocabulary's ids and the output layer's
    ``precision`` (:mod:`lm.output`): ``fp32``, ``bf16`` (a bfloat16 matmul refined to within
    1e-3 nats), or ``auto`` (bf16 on CUDA, fp32 elsewhere)."""

    def __init__(self, loaded: LoadedModel, max_elements: int = DEFAULT_SCORE_ELEMENTS,
                 precision: str = "auto") -> None:
        self.loaded = loaded
        self.max_elements = max_elements
        self.precision = resolve_score_precision(precision, loaded.device)
        vocab = loaded.vocab
        self.bos_id, self.eos_id, self.unk_id = vocab.bos_id, vocab.eos_id, vocab.unk_id

    @property
    def device(self) -> torch.device:
        """Where the model runs (and :meth:`score` returns its scores)."""
        return self.loaded.device

    def word_ids(self, words: Sequence[str]) -> Tensor:
        return torch.tensor(self.loaded.vocab.encode(list(words)), dtype=torch.int64)

    def known(self, words: Sequence[str]) -> Tensor:
        return torch.tensor([self.loaded.vocab.is_known(w) for w in words], dtype=torch.bool)



class LMScorer(_ModelScorer):
    """Scores (context, next word) pairs with a loaded causal model, in bounded-memory chunks."""

    def __init__(self, loaded: LoadedModel, max_elements: int = DEFAULT_SCORE_ELEMENTS,
                 precision: str = "auto") -> None:
        if loaded.config.is_window:
            raise ValueError(f"{loaded.path}: {loaded.config.describe()} is an acausal window model: it scores a "
                             "word from the words around it, not (context, next word) pairs; use it as a feature "
                             "(afp rescore --feature NAME=DIR) or score text with it (afp score, afp ppl)")
        super().__init__(loaded, max_elements, precision)
        self.context_size: int | None = loaded.config.context_size

    def score(self, contexts: Tensor, lengths: Tensor, targets: Tensor, target_context: Tensor) -> Tensor:
        return self.loaded.model.score_contexts(contexts, lengths, targets, target_context,
                                                max_elements=self.max_elements, precision=self.precision)


class WindowScorer(_ModelScorer):
    """Scores (left, word, right) windows with a loaded acausal window model (:mod:`lm.window`):
    ``rho`` words before, ``future`` after."""

    def __init__(self, loaded: LoadedModel, max_elements: int = DEFAULT_SCORE_ELEMENTS,
                 precision: str = "auto") -> None:
        if not loaded.config.is_window:
            raise ValueError(f"{loaded.path}: {loaded.config.describe()} is not a window model (train one with "
                             "afp train --future K)")
        super().__init__(loaded, max_elements, precision)
        self.rho: int = loaded.config.rho or 0
        self.future: int = loaded.config.future
        self.mask_id: int = loaded.model.mask_id

    def score_windows(self, windows: Tensor, valid: Tensor, targets: Tensor, target_window: Tensor) -> Tensor:
        """float32 ``(M,)`` log-probabilities of ``targets: (M,)``, each in its window
        ``windows[target_window]`` (int64 ``(N, L)``, ``valid: bool (N, L)``; column ``rho``
        holds the mask), on the model's device."""
        return self.loaded.model.score_windows(windows, valid, targets, target_window, max_elements=self.max_elements,
                                               precision=self.precision)


def scorer_of(loaded, precision: str = "auto", max_elements: int = DEFAULT_SCORE_ELEMENTS):
    """The context scorer of a loaded model: an :class:`LMScorer`, or for an ARPA n-gram
    (:class:`lm.ngram.store.LoadedNgram`) its :class:`lm.ngram.store.StoreScorer`."""
    from lm.ngram.store import LoadedNgram, StoreScorer

    if isinstance(loaded, LoadedNgram):
        return StoreScorer(loaded.store)
    return LMScorer(loaded, max_elements=max_elements, precision=precision)


def window_values(scorer: WindowScorer, sentences: Sequence[Sequence[int]]) -> Tensor:
    """float64 ``(sum(len + 1),)``: each sentence's terms (its words, then ``</s>``), in order,
    every distinct (window, word) scored once (:func:`lm.window.score_each_window_once`)."""
    tokens, lengths = sentence_tokens([list(s) for s in sentences], scorer.bos_id, scorer.eos_id)
    windows, valid, targets, _ = build_windows(tokens, lengths, scorer.rho, scorer.future, scorer.mask_id)
    return score_each_window_once(scorer.score_windows, torch.where(valid, windows, PAD), targets)[0]


#: (target, context-slot) numbers one chunk of sentences builds at most (bounds the memory of
#: :func:`iter_sentence_scores`: its windows and unique-row sort)
DEFAULT_CHUNK_ELEMENTS = 1 << 23


def sentence_pairs(sentence_ids: Sequence[Sequence[int]], bos_id: int, eos_id: int,
                   context_size: int | None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Every prediction of every sentence as a (context, next token) pair, equal contexts shared.

    Args:
      sentence_ids: word ids of each sentence, without boundaries.
      context_size: tokens of history a prediction sees (None: the whole sentence so far).
    Returns:
      contexts int64 ``(N, C)`` right-aligned (rows in sorted order), lengths ``(N,)``, targets
      ``(M,)``, target_context ``(M,)`` and target_sentence ``(M,)``; the targets of a sentence
      are its words then ``</s>``, in order.
    """
    sizes = np.fromiter((len(s) + 2 for s in sentence_ids), dtype=np.int64, count=len(sentence_ids))
    flat = np.empty(int(sizes.sum()), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    flat[starts] = bos_id
    flat[starts + sizes - 1] = eos_id
    inner = np.ones(flat.shape[0], dtype=bool)
    inner[starts] = inner[starts + sizes - 1] = False
    flat[inner] = np.fromiter((w for s in sentence_ids for w in s), dtype=np.int64, count=int(inner.sum()))
    windows, target_flat, owner = _windows(flat, starts, sizes, context_size)
    rows, context_of = np.unique(windows, axis=0, return_inverse=True)
    contexts = torch.from_numpy(np.where(rows == PAD, 0, rows))
    lengths = torch.from_numpy((rows != PAD).sum(axis=1))
    return (contexts, lengths, torch.from_numpy(flat[target_flat]), torch.from_numpy(context_of.reshape(-1)),
            torch.from_numpy(owner))


def _windows(flat: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
             context_size: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The context window of every target of the sentences in ``flat`` (``[<s>, words, </s>]``
    each, sentence ``i`` at ``starts[i]`` with ``sizes[i]`` tokens): int64 ``(M, C)`` padded on
    the left with :data:`PAD`, each target's position in ``flat`` ``(M,)`` and its sentence ``(M,)``."""
    owner = np.repeat(np.arange(sizes.shape[0], dtype=np.int64), sizes - 1)
    first = starts[owner]  # each target's sentence start (its <s>)
    target = np.delete(np.arange(flat.shape[0], dtype=np.int64), starts)  # every token but the <s>es
    width = int(sizes.max(initial=2)) - 1 if context_size is None else context_size
    take = target[:, None] - width + np.arange(width, dtype=np.int64)[None, :]
    windows = np.where(take >= first[:, None], flat[np.maximum(take, 0)], PAD)
    return windows, target, owner


def _chunks(sentences: Iterable[Sequence[str]], context_size: int | None,
            max_elements: int) -> Iterator[list[Sequence[str]]]:
    """``sentences`` in consecutive groups whose windows (targets x context width) stay within
    ``max_elements`` numbers (a longer sentence is a group of its own)."""
    group: list[Sequence[str]] = []
    tokens = longest = 0
    for sentence in sentences:
        size = len(sentence) + 1
        wide = max(longest, size)
        width = wide if context_size is None else context_size
        if group and (tokens + size) * max(width, 1) > max_elements:
            yield group
            group, tokens, wide = [], 0, size
        group.append(sentence)
        tokens, longest = tokens + size, wide
    if group:
        yield group


def iter_sentence_scores(scorer: SentenceScorer | WindowScorer, sentences: Iterable[Sequence[str]],
                         max_elements: int = DEFAULT_CHUNK_ELEMENTS) -> Iterator[Tensor]:
    """Token log-probabilities of each sentence (float64 ``(len + 1,)``: its words, then
    ``</s>``), in order, streaming: the one sentence-scoring path of ``afp ppl``, ``afp score``
    and ``POST /v1/perplexity``.

    Sentences are independent (each starts from ``<s>``). They are taken in consecutive chunks
    (bounded by ``max_elements`` window slots); within a chunk every distinct (context, word)
    pair is scored once through ``scorer.score``, as the rescoring engine does, so sentences that
    share prefixes (an n-best list) share their work. ``scorer`` is an :class:`LMScorer` or
    anything with its members (the server's batcher), so every front end gets the same numbers
    for the same model, device and precision. Unknown words are scored as ``<unk>``. A model of
    unbounded context (exact mode) sees each whole prefix; its work grows with the square of a
    sentence's length. A :class:`WindowScorer` gives a window model's terms instead (each word
    from the words around it, :mod:`lm.window`): a pseudo-log-likelihood.
    """
    window = isinstance(scorer, WindowScorer)
    width = scorer.rho + 1 + scorer.future if isinstance(scorer, WindowScorer) else scorer.context_size
    for group in _chunks(sentences, width, max_elements):
        words = [w for s in group for w in s]
        ids = scorer.word_ids(words).tolist() if words else []
        per_sentence, at = [], 0
        for sentence in group:
            per_sentence.append(ids[at:at + len(sentence)])
            at += len(sentence)
        if window:  # an acausal window model: its terms are pseudo-log-likelihood terms (lm.window)
            yield from torch.split(window_values(scorer, per_sentence), [len(s) + 1 for s in group])  # type: ignore[arg-type]
            continue
        contexts, lengths, targets, target_context, _ = sentence_pairs(
            per_sentence, scorer.bos_id, scorer.eos_id, scorer.context_size)
        pairs, pair_of = np.unique(np.stack([target_context.numpy(), targets.numpy()], axis=1), axis=0,
                                   return_inverse=True)
        used, context_index = np.unique(pairs[:, 0], return_inverse=True)
        values = scorer.score(contexts[used], lengths[used], torch.from_numpy(pairs[:, 1].copy()),
                              torch.from_numpy(context_index.reshape(-1)))
        values = values.to("cpu", torch.float64)[torch.from_numpy(pair_of.reshape(-1))]
        yield from torch.split(values, [len(s) + 1 for s in group])


def score_sentences(scorer: SentenceScorer | WindowScorer, sentences: Sequence[Sequence[str]]) -> list[Tensor]:
    """:func:`iter_sentence_scores` as a list."""
    return list(iter_sentence_scores(scorer, sentences))


class UnknownCounter:
    """Counts the unknown words (``ContextScorer.known``) of sentences, asking ``scorer`` once
    per distinct word."""

    def __init__(self, scorer: SentenceScorer) -> None:
        self.scorer = scorer
        self._known: dict[str, bool] = {}

    def __call__(self, words: Sequence[str]) -> int:
        fresh = [w for w in dict.fromkeys(words) if w not in self._known]
        if fresh:
            self._known.update(zip(fresh, self.scorer.known(fresh).tolist()))
        return sum(1 for w in words if not self._known[w])


def text_score(scorer: SentenceScorer | WindowScorer, sentences: Iterable[Sequence[str]],
               on_sentence: Callable[[Sequence[str], Tensor], None] | None = None,
               max_elements: int = DEFAULT_CHUNK_ELEMENTS) -> TextScore:
    """Score a text (one sentence per item) with :func:`iter_sentence_scores`, streaming;
    ``on_sentence`` sees every sentence and its token log-probabilities as they come."""
    logprob, tokens, count, oov = 0.0, 0, 0, 0
    pending: deque[Sequence[str]] = deque()  # read by the scorer, not yet reported: one chunk at most
    unknown = UnknownCounter(scorer)

    def remember(items: Iterable[Sequence[str]]) -> Iterator[Sequence[str]]:
        for sentence in items:
            pending.append(sentence)
            yield sentence

    for values in iter_sentence_scores(scorer, remember(sentences), max_elements):
        sentence = pending.popleft()
        if on_sentence is not None:
            on_sentence(sentence, values)
        logprob += float(values.sum())
        tokens += values.numel()
        count += 1
        oov += unknown(sentence)
    return TextScore(logprob=logprob, tokens=tokens, sentences=count, oov=oov)
