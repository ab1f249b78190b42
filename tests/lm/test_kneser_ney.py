"""The numpy Kneser-Ney builder (``lm.ngram.kneser_ney``, ``afp ngram``) against the dict-based reference
estimator (``tests/lm/kn_reference.py``): the probabilities and back-off weights the definition gives,
on small corpora, every order, both key packings; and the model's own properties (a distribution for
every history, Kneser-Ney's counts, perplexity falling with the order)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from lm.corpus import encode
from lm.ngram import kneser_ney
from lm.ngram.arpa import LOG10
from lm.vocab import Vocabulary
from tests.factories import kn_arpa, patterned_sentences, random_sentences
from tests.lm.kn_reference import KneserNey
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


def same_as_reference(ours, reference: KneserNey, vocab: Vocabulary) -> None:
    """``ours`` (a read ARPA model) is the back-off form of ``reference``: its unigrams ``<s>`` and
    every predictable word, its higher n-grams the reference's, each with ``p_n(w | h)``, and each
    context of the next order with the back-off weight ``gamma(h)`` (0 when it is 1)."""
    predictable = [i for i, ok in enumerate(vocab.predictable_mask()) if ok]
    assert ours.counts == (len(predictable) + 1, *(len(level.counts) for level in reference.orders[1:]))
    to_ours = {i: ours.id(vocab.words[i]) for i in (*predictable, vocab.bos_id)}
    assert ours.logprobs[()][to_ours[vocab.bos_id]] == pytest.approx(-99.0 * LOG10)
    for i in predictable:
        assert ours.logprobs[()][to_ours[i]] == pytest.approx(math.log(reference.prob((), i)), abs=1e-8)
    for level in reference.orders[1:]:
        for gram in level.counts:
            row = ours.logprobs[tuple(to_ours[i] for i in gram[:-1])]
            assert row[to_ours[gram[-1]]] == pytest.approx(math.log(reference.prob(gram[:-1], gram[-1])), abs=1e-8)
        for context, total in level.totals.items():
            assert ours.backoffs.get(tuple(to_ours[i] for i in context), 0.0) == pytest.approx(
                math.log(level.backoff_mass[context] / total), abs=1e-8)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("corpus", ["patterned", "random"])
def test_the_numpy_builder_gives_the_references_numbers(tmp_path, order, corpus):
    sentences = patterned_sentences(300, seed=order) if corpus == "patterned" else random_sentences(200, seed=order)
    train, held = sentences[:-20], sentences[-20:]
    vocab = Vocabulary.from_sentences(train[: len(train) // 2])  # words of the second half become <unk>
    encoded = [t.tolist() for t in encode(train, vocab).ids]
    predictable = np.array(vocab.predictable_mask())
    reference = KneserNey.fit(encoded, order, int(predictable.sum()), vocab.bos_id)
    model = kneser_ney.build(kneser_ney.chunks_of(shards_of(train, vocab, parts=3), vocab.bos_id, vocab.eos_id,
                                                  vocab.unk_id, chunk_tokens=150),
                             order, vocab.size, vocab.bos_id, predictable)
    kneser_ney.write_arpa(model, vocab.words, vocab.bos_id, predictable, tmp_path / "numpy.arpa.gz")
    ours = read_arpa(tmp_path / "numpy.arpa.gz")
    same_as_reference(ours, reference, vocab)
    for words in held[:5]:
        ids = [ours.id(w) for w in words] + [ours.eos_id]
        history = [ours.bos_id]
        for word in ids:
            expected = np.log(reference.prob([vocab.bos_id, *[vocab.encode([w])[0] for w in words]][:len(history)],
                                             vocab.encode([ours.words[word]])[0]))
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
    for name in ("a.arpa.gz", "b.arpa"):
        same_as_reference(read_arpa(tmp_path / name), reference, vocab)
    assert main(["ngram", "--order", "3", "--out", str(tmp_path / "c.arpa")]) == 2
    assert "give one of --text FILE..., --data DIR" in capsys.readouterr().err


def _model(order: int, sentences: list[list[str]], tmp_path) -> tuple[object, Vocabulary, list[list[int]]]:
    """``afp ngram``'s model of ``sentences`` (the vocabulary of all their words), read back."""
    vocab = Vocabulary.from_sentences(sentences)
    encoded = [s.tolist() for s in encode(sentences, vocab).ids]
    return read_arpa(kn_arpa(tmp_path / f"kn{order}.arpa", encoded, vocab, order)), vocab, encoded


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_every_history_gives_a_distribution_over_the_predictable_words(tmp_path, order):
    rng = random.Random(order)
    sentences = patterned_sentences(200, seed=4) + [rng.sample("x y z w v u".split(), rng.randint(1, 5))
                                                     for _ in range(30)]
    model, vocab, encoded = _model(order, sentences, tmp_path)
    predictable = [model.id(w) for w, ok in zip(vocab.words, vocab.predictable_mask()) if ok]
    ids = {w: model.id(w) for w in ("the", "x", "cat")}
    histories = [[model.bos_id], [model.bos_id, ids["the"]], [ids["x"], ids["the"], ids["cat"]], [model.unk_id] * 4,
                 *([model.id(vocab.words[i]) for i in s[:k]] for s in encoded[:20] for k in range(1, len(s)))]
    for history in histories:
        total = sum(math.exp(model.logprob(history, w)) for w in predictable)
        assert total == pytest.approx(1.0, abs=1e-9), history


def test_lower_orders_use_continuation_counts_and_start_ngrams_keep_raw_counts():
    sentences = [["a", "b"], ["c", "b"], ["a", "b"]]
    vocab = Vocabulary.from_sentences(sentences)
    model = kneser_ney.build(kneser_ney.chunks_of(shards_of(sentences, vocab), vocab.bos_id, vocab.eos_id,
                                                  vocab.unk_id), 2, vocab.size, vocab.bos_id,
                             np.array(vocab.predictable_mask()))
    unigrams, bigrams = ({tuple(row): int(c) for row, c in zip(model.packer(n).unpack(o.keys).tolist(), o.counts)}
                         for n, o in ((1, model.orders[0]), (2, model.orders[1])))
    a, b, eos, bos = vocab.id("a"), vocab.id("b"), vocab.eos_id, vocab.bos_id
    assert unigrams[(b,)] == 2  # seen after a and after c (three times in all)
    assert unigrams[(eos,)] == 1  # only ever after b
    assert unigrams[(a,)] == 1  # only ever after <s>
    assert bigrams[(bos, a)] == 2 and bigrams[(a, b)] == 2  # the highest order keeps raw counts


def test_more_context_fits_the_grammar_better_and_unseen_words_keep_mass(tmp_path):
    from tests.lm.ngram_reference import sentence_logprob

    train, valid = patterned_sentences(400, seed=1), patterned_sentences(100, seed=2)
    ppl = []
    for order in (1, 2, 3, 5):
        model, _, _ = _model(order, train, tmp_path)
        total = sum(sentence_logprob(model, s) for s in valid)
        ppl.append(math.exp(-total / sum(len(s) + 1 for s in valid)))
    assert ppl[0] > ppl[1] > ppl[2] >= ppl[3] * 0.999
    assert ppl[3] < 3.0  # the grammar is nearly deterministic given two words
    model, _, _ = _model(3, train, tmp_path)
    assert 0 < math.exp(model.logprob([model.bos_id, model.id("the")], model.id("log"))) < 0.05
    assert math.isfinite(sentence_logprob(model, ["zebra", "cat"]))
