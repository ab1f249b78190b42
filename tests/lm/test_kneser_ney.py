"""The numpy Kneser-Ney builder (``lm.ngram.kneser_ney``, ``afp ngram``) against the dict-based reference
``bench/kneser_ney.py``: the same ARPA numbers on small corpora, every order, both key packings."""

from __future__ import annotations

import numpy as np
import pytest

from bench.kneser_ney import KneserNey
from bench.kneser_ney import write_arpa as reference_arpa
from lm.ngram import kneser_ney
from lm.corpus import encode
from lm.vocab import Vocabulary
from tests.factories import patterned_sentences, random_sentences
from tests.lm.ngram_reference import read_arpa


def shards_of(sentences: list[list[str]], vocab: Vocabulary, parts: int = 2):
    """The sentences as (tokens, offsets) shards, as afp prepare stores them (-1 for OOV words)."""
    out = []
    step = max(1, len(sentences) // parts)
    for first in range(0, len(sentences), step):
        group = sentences[first:first + step]
        ids = [vocab.encode(s, oov_id=-1) for s in group]
        tokens = np.array([i for s in ids for i in s], dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in ids])]).astype(np.int64)
        out.append((tokens, offsets))
    return out


def same_arpa(a, b) -> None:
    assert a.words == b.words and a.counts == b.counts
    assert a.logprobs.keys() == b.logprobs.keys()
    for context, row in a.logprobs.items():
        assert row.keys() == b.logprobs[context].keys()
        for word, value in row.items():
            assert value == pytest.approx(b.logprobs[context][word], abs=1e-8)
    assert a.backoffs.keys() == b.backoffs.keys()
    for gram, value in a.backoffs.items():
        assert value == pytest.approx(b.backoffs[gram], abs=1e-8)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("corpus", ["patterned", "random"])
def test_the_numpy_builder_writes_the_references_arpa(tmp_path, order, corpus):
    sentences = patterned_sentences(300, seed=order) if corpus == "patterned" else random_sentences(200, seed=order)
    train, held = sentences[:-20], sentences[-20:]
    vocab = Vocabulary.from_sentences(train[: len(train) // 2])  # words of the second half become <unk>
    encoded = [t.tolist() for t in encode(train, vocab).ids]
    predictable = np.array(vocab.predictable_mask())
    reference = KneserNey.fit(encoded, order, int(predictable.sum()), vocab.bos_id)
    reference_arpa(reference, vocab, tmp_path / "reference.arpa")
    model = kneser_ney.build(kneser_ney.chunks_of(shards_of(train, vocab, parts=3), vocab.bos_id, vocab.eos_id,
                                                  vocab.unk_id, chunk_tokens=150),
                             order, vocab.size, vocab.bos_id, predictable)
    kneser_ney.write_arpa(model, vocab.words, vocab.bos_id, predictable, tmp_path / "numpy.arpa.gz")
    ours, theirs = read_arpa(tmp_path / "numpy.arpa.gz"), read_arpa(tmp_path / "reference.arpa")
    same_arpa(ours, theirs)
    for words in held[:5]:
        ids = [ours.id(w) for w in words] + [ours.eos_id]
        history = [ours.bos_id]
        for word in ids:
            expected = np.log(reference.prob([vocab.bos_id, *[vocab.encode([w])[0] for w in words]][:len(history)],
                                             vocab.encode([theirs.words[word]])[0]))
            assert ours.logprob(history, word) == pytest.approx(expected, abs=1e-6)
            history.append(word)


def test_wide_keys_are_the_same_model(tmp_path):
    """A 5-gram over 16-bit ids needs 80-bit keys: the byte-string packing gives the numbers of
    the uint64 one (the vocabulary's size forces the choice)."""
    vocab = Vocabulary.from_sentences(patterned_sentences(200, seed=1))
    sentences = patterned_sentences(200, seed=2)
    predictable = np.array(vocab.predictable_mask())
    shards = shards_of(sentences, vocab)
    narrow = kneser_ney.build(kneser_ney.chunks_of(shards, vocab.bos_id, vocab.eos_id, vocab.unk_id), 5,
                              vocab.size, vocab.bos_id, predictable)
    wide = kneser_ney.build(kneser_ney.chunks_of(shards, vocab.bos_id, vocab.eos_id, vocab.unk_id), 5,
                            70_000, vocab.bos_id, np.concatenate([predictable, np.zeros(70_000 - vocab.size, bool)]))
    assert not narrow.packer(5).wide and wide.packer(5).wide
    for a, b in zip(narrow.orders, wide.orders):
        assert a.counts.tolist() == b.counts.tolist()
        assert np.array_equal(narrow.packer(a.n).unpack(a.keys), wide.packer(b.n).unpack(b.keys))


def test_afp_ngram_builds_from_text_or_prepared_data(tmp_path, capsys):
    """``afp ngram --text`` and ``--data`` (afp prepare's shards) write the reference's model."""
    import json

    from service.cli import main
    from tests.factories import write_text

    sentences = patterned_sentences(300, seed=9)
    text = write_text(tmp_path / "train.txt", sentences)
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(tmp_path / "a.arpa.gz")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["order"] == 3 and summary["3-grams"] > 0 and summary["peak_rss_mib"] > 0
    assert main(["prepare", "--text", str(text), "--out", str(tmp_path / "data")]) == 0
    capsys.readouterr()
    assert main(["ngram", "--data", str(tmp_path / "data"), "--order", "3", "--out", str(tmp_path / "b.arpa")]) == 0
    vocab = Vocabulary.from_sentences(sentences)
    predictable = np.array(vocab.predictable_mask())
    reference = KneserNey.fit([t.tolist() for t in encode(sentences, vocab).ids], 3, int(predictable.sum()),
                              vocab.bos_id)
    reference_arpa(reference, vocab, tmp_path / "reference.arpa")
    for name in ("a.arpa.gz", "b.arpa"):
        same_arpa(read_arpa(tmp_path / name), read_arpa(tmp_path / "reference.arpa"))
    assert main(["ngram", "--order", "3", "--out", str(tmp_path / "c.arpa")]) == 2
    assert "give one of --text FILE..., --data DIR" in capsys.readouterr().err
