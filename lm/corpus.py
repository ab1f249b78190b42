"""Text corpora for language-model training and evaluation.

A corpus is a list of sentences, each a list of words without boundary symbols. Sentences are
independent: every model restarts from its initial state at ``<s>`` (this is what makes a
sentence-level AFP-rho model an exact (rho+1)-gram model).

Sources:
  * plain text, one sentence per line, words separated by white space (PTB, WikiText-2, Kaldi
    ``text`` without the utterance id: see ``skip_first_field``);
  * the supervision texts of a lhotse ``CutSet`` or ``SupervisionSet`` manifest.

:func:`encode` turns sentences into id tensors with ``<s>``/``</s>`` and :func:`batches` groups
them into padded mini-batches of similar length.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from lm.vocab import BOS, EOS, Vocabulary

Sentence = list[str]


class CorpusError(ValueError):
    """A corpus file cannot be read; the message names the file (and line where it applies)."""


def read_sentences(path: str | Path, skip_first_field: bool = False, keep_empty: bool = False) -> list[Sentence]:
    """Read one sentence per line; blank lines are skipped unless ``keep_empty``.

    Boundary symbols already present at either end (``<s> a b </s>``) are removed, so text that
    marks them is read the same as text that does not.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except UnicodeDecodeError as err:
        raise CorpusError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise CorpusError(f"{path}: cannot read: {err.strerror}") from None
    sentences: list[Sentence] = []
    for line in text.splitlines():
        words = line.split()
        if skip_first_field:
            words = words[1:]
        words = _strip_boundaries(words)
        if words or keep_empty:
            sentences.append(words)
    return sentences


def _strip_boundaries(words: list[str]) -> list[str]:
    if words and words[0] == BOS:
        words = words[1:]
    if words and words[-1] == EOS:
        words = words[:-1]
    return words


def read_lhotse_texts(path: str | Path) -> list[Sentence]:
    """Sentences from the supervision texts of a lhotse ``CutSet`` or ``SupervisionSet`` manifest.

    Every supervision with a non-empty ``text`` gives one sentence (split on white space); for a
    ``CutSet`` these are the supervisions of all cuts, in order.
    """
    from lhotse import load_manifest
    from lhotse.cut import CutSet
    from lhotse.supervision import SupervisionSet

    path = Path(path)
    try:
        manifest = load_manifest(path)
    except Exception as err:  # lhotse raises many types for unreadable manifests
        raise CorpusError(f"{path}: not a readable lhotse manifest: {err}") from None
    if isinstance(manifest, CutSet):
        supervisions = (s for cut in manifest for s in cut.supervisions)
    elif isinstance(manifest, SupervisionSet):
        supervisions = iter(manifest)
    else:
        raise CorpusError(f"{path}: expected a CutSet or SupervisionSet, got {type(manifest).__name__}")
    return [_strip_boundaries(s.text.split()) for s in supervisions if s.text and s.text.strip()]


def load_corpus(path: str | Path) -> list[Sentence]:
    """Read a corpus, choosing the reader by file name: lhotse manifests end in ``.jsonl(.gz)``
    or ``.json(.gz)`` and name cuts or supervisions; anything else is plain text."""
    name = Path(path).name
    is_manifest = any(name.endswith(ext) for ext in (".jsonl", ".jsonl.gz", ".json", ".json.gz"))
    if is_manifest and ("cuts" in name or "supervisions" in name):
        return read_lhotse_texts(path)
    return read_sentences(path)


@dataclass(frozen=True)
class EncodedCorpus:
    """Sentences as id sequences with boundaries: ``ids[i] = [<s>, w_1, ..., w_n, </s>]``.

    Attributes:
      ids: list of int64 tensors, ``ids[i]`` of shape ``(n_i + 2,)``.
      tokens: words plus one ``</s>`` per sentence (the perplexity denominator).
      oov: words that were not in the vocabulary (mapped to the unknown-word id).
    """

    ids: list[torch.Tensor]
    tokens: int
    oov: int

    @property
    def sentences(self) -> int:
        return len(self.ids)


def encode(sentences: Sequence[Sentence], vocab: Vocabulary) -> EncodedCorpus:
    """Map words to ids and add ``<s>``/``</s>`` to every sentence."""
    ids = [torch.tensor([vocab.bos_id, *vocab.encode(s), vocab.eos_id], dtype=torch.long) for s in sentences]
    tokens = sum(len(s) + 1 for s in sentences)
    oov = sum(vocab.count_oov(s) for s in sentences)
    return EncodedCorpus(ids=ids, tokens=tokens, oov=oov)


@dataclass(frozen=True)
class Batch:
    """A padded mini-batch of sentences.

    Attributes:
      inputs: int64 ``(B, T)``: ``<s> w_1 ... w_n`` then padding (id 0).
      targets: int64 ``(B, T)``: ``w_1 ... w_n </s>`` then padding.
      lengths: int64 ``(B,)``: number of real positions per row (``n + 1``).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    lengths: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """bool ``(B, T)``: True at real (non-padding) positions."""
        steps = torch.arange(self.inputs.shape[1], device=self.lengths.device)
        return steps.unsqueeze(0) < self.lengths.unsqueeze(1)

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.inputs.to(device), self.targets.to(device), self.lengths.to(device))


def collate(sentences: Sequence[torch.Tensor]) -> Batch:
    """Pad encoded sentences (each ``[<s>, ..., </s>]``) into one :class:`Batch`."""
    lengths = torch.tensor([len(s) - 1 for s in sentences], dtype=torch.long)
    width = int(lengths.max())
    inputs = torch.zeros(len(sentences), width, dtype=torch.long)
    targets = torch.zeros(len(sentences), width, dtype=torch.long)
    for row, s in enumerate(sentences):
        inputs[row, : len(s) - 1] = s[:-1]
        targets[row, : len(s) - 1] = s[1:]
    return Batch(inputs, targets, lengths)


def batches(
    corpus: EncodedCorpus,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    bucket: int = 50,
) -> Iterator[Batch]:
    """Mini-batches of ``batch_size`` sentences.

    With ``shuffle``, sentences are shuffled (by ``seed``), then sorted by length within pools of
    ``bucket`` batches so that padding stays small, and the batches are shuffled again. Without
    it, order is kept. With ``world_size > 1`` every rank gets every ``world_size``-th batch (the
    count is made equal across ranks by dropping the remainder, as DDP needs).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = list(range(corpus.sentences))
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(order)
        pool = batch_size * bucket
        order = [i for start in range(0, len(order), pool)
                 for i in sorted(order[start:start + pool], key=lambda j: len(corpus.ids[j]))]
    groups = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        rng.shuffle(groups)
    if world_size > 1:
        groups = groups[: len(groups) - len(groups) % world_size][rank::world_size]
    for group in groups:
        yield collate([corpus.ids[i] for i in group])
