"""Relative-entropy pruning (``lm.ngram.prune``, ``afp ngram --prune``) and the array-built store
(``lm.ngram.kneser_ney.to_store``): each n-gram's divergence against a brute-force computation over the
whole vocabulary, normalised distributions after pruning, the back-off structure kept, and the
store equal to the one its ARPA file reads into."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lm.ngram import kneser_ney
from lm.ngram.prune import backoff_logprob, divergences, history_logprob, prune
from lm.ngram.store import load_store, read_arpa_store
from lm.vocab import Vocabulary
from tests.factories import patterned_sentences, random_sentences
from tests.lm.test_kneser_ney import shards_of


def fitted(order: int, corpus: str = "patterned", size: int = 300):
    sentences = patterned_sentences(size, seed=order) if corpus == "patterned" else random_sentences(size, seed=order)
    vocab = Vocabulary.from_sentences(sentences[: len(sentences) // 2])
    predictable = np.array(vocab.predictable_mask())
    model = kneser_ney.build(kneser_ney.chunks_of(shards_of(sentences, vocab), vocab.bos_id, vocab.eos_id,
                                                  vocab.unk_id), order, vocab.size, vocab.bos_id, predictable)
    return model, vocab, predictable


def distribution(model, history: np.ndarray, predictable: np.ndarray) -> np.ndarray:
    """float64 (V,): p(w | history) of every predictable word under back-off look-up."""
    words = np.flatnonzero(predictable)
    rows = np.concatenate([np.repeat(history[None, :], words.shape[0], axis=0), words[:, None]], axis=1)
    return np.exp(backoff_logprob(model, rows))


def contexts_of(model, n: int) -> np.ndarray:
    rows = model.packer(n).unpack(model.orders[n - 1].keys)
    return np.unique(rows[:, :-1], axis=0)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_each_divergence_is_the_kl_of_the_model_without_that_ngram(order):
    model, vocab, predictable = fitted(order, "random", 120)
    rng = np.random.default_rng(order)
    n = order
    rows = model.packer(n).unpack(model.orders[n - 1].keys)
    fast = divergences(model, n, vocab.bos_id, vocab.eos_id)
    for i in rng.choice(rows.shape[0], size=min(12, rows.shape[0]), replace=False).tolist():
        h, w = rows[i, :-1], int(rows[i, -1])
        siblings = rows[(rows[:, :-1] == h).all(axis=1)][:, -1]
        explicit = [int(v) for v in siblings if v != w]
        p = distribution(model, h, predictable)  # the model as it is
        lower = distribution(model, h[1:], predictable) if n > 2 else model.unigram_probs[predictable]
        index = {int(v): j for j, v in enumerate(np.flatnonzero(predictable))}
        kept = np.zeros(p.shape[0], dtype=bool)
        kept[[index[v] for v in explicit]] = True
        bow = (1 - p[kept].sum()) / (1 - lower[kept].sum())
        pruned = np.where(kept, p, bow * lower)  # h w backed off, h's weight renormalised
        assert pruned.sum() == pytest.approx(1.0, abs=1e-12)
        first = vocab.eos_id if h[0] == vocab.bos_id else h[0]
        context = math.log(model.unigram_probs[first]) + sum(
            float(backoff_logprob(model, h[None, :k])[0]) for k in range(2, h.shape[0] + 1))
        brute = math.exp(context) * float(np.sum(p * (np.log(p) - np.log(pruned))))
        assert fast[i] == pytest.approx(brute, rel=1e-6, abs=1e-15)
        assert fast[i] > 0


def test_history_probability_chains_the_model():
    model, vocab, _ = fitted(3)
    h = model.packer(3).unpack(model.orders[2].keys[:5])[:, :-1]
    got = history_logprob(model, h, vocab.bos_id, vocab.eos_id)
    for row, value in zip(h, got):
        first = vocab.eos_id if row[0] == vocab.bos_id else row[0]
        want = math.log(model.unigram_probs[first]) + float(backoff_logprob(model, row[None, :])[0])
        assert value == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_threshold_zero_keeps_every_ngram_and_every_weight(order):
    model, vocab, _ = fitted(order)
    same = prune(model, 0.0, vocab.bos_id, vocab.eos_id)
    for a, b in zip(model.orders, same.orders):
        assert np.array_equal(a.keys, b.keys) and np.array_equal(a.probs, b.probs)
    for a, b in zip(model.gammas, same.gammas):
        assert np.array_equal(np.isnan(a), np.isnan(b))
        assert np.allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=1e-9)


@pytest.mark.parametrize("order", [3, 4])
@pytest.mark.parametrize("threshold", [1e-5, 1e-4, 1e-3])
def test_a_pruned_model_is_normalised_and_keeps_its_back_off_structure(order, threshold):
    model, vocab, predictable = fitted(order, "random", 300)
    pruned = prune(model, threshold, vocab.bos_id, vocab.eos_id)
    sizes = [o.keys.shape[0] for o in pruned.orders]
    assert sizes[0] == model.orders[0].keys.shape[0]  # unigrams are never pruned
    assert sum(sizes[1:]) < sum(o.keys.shape[0] for o in model.orders[1:])
    for n in range(2, order + 1):
        rows = pruned.packer(n).unpack(pruned.orders[n - 1].keys)
        if n > 2:  # every kept n-gram's context and suffix are n-grams of the order below
            below = pruned.orders[n - 2].keys
            for part in (rows[:, :-1], rows[:, 1:]):
                assert np.isin(pruned.packer(n - 1).pack(part), below).all()
        for h in contexts_of(model, n)[::7]:  # every context, pruned or not, sums to one
            assert distribution(pruned, h, predictable).sum() == pytest.approx(1.0, abs=1e-9)


def test_larger_thresholds_keep_subsets():
    model, vocab, _ = fitted(4, "random", 300)
    previous = None
    for threshold in (0.0, 1e-6, 1e-4, 1e-3, 1e-1):
        pruned = prune(model, threshold, vocab.bos_id, vocab.eos_id)
        keys = [o.keys for o in pruned.orders[1:]]
        if previous is not None:
            assert all(np.isin(k, p).all() for k, p in zip(keys, previous))
        previous = keys
    assert sum(k.shape[0] for k in previous) < sum(o.keys.shape[0] for o in model.orders[1:]) // 2


def test_a_negative_or_nan_threshold_is_refused():
    model, vocab, _ = fitted(2)
    for bad in (-1e-9, float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            prune(model, bad, vocab.bos_id, vocab.eos_id)


@pytest.mark.parametrize("order", [1, 3, 4])
@pytest.mark.parametrize("threshold", [None, 1e-4])
def test_the_array_store_equals_the_store_of_its_arpa_file(tmp_path, order, threshold):
    model, vocab, predictable = fitted(order)
    if threshold is not None:
        model = prune(model, threshold, vocab.bos_id, vocab.eos_id)
    kneser_ney.write_arpa(model, vocab.words, vocab.bos_id, predictable, tmp_path / "m.arpa")
    read, built = read_arpa_store(tmp_path / "m.arpa"), kneser_ney.to_store(model, vocab.words, vocab.bos_id,
                                                                            predictable)
    assert read.words == built.words and read.num_file_words == built.num_file_words
    for n in range(order):
        assert np.array_equal(read.keys[n], built.keys[n])
        assert np.allclose(read.logprobs[n], built.logprobs[n], rtol=1e-6, atol=1e-6)
        assert np.allclose(read.backoffs[n], built.backoffs[n], rtol=1e-6, atol=1e-6)
    # and the store scores what the back-off look-up of the arrays gives
    ids = np.flatnonzero(predictable)
    rng = np.random.default_rng(0)
    rows = rng.choice(ids, size=(200, max(order, 2)))
    mapped = np.array([built.id(vocab.words[i]) for i in rows.ravel()]).reshape(rows.shape)
    got = built.score(mapped[:, :-1], np.full(200, rows.shape[1] - 1), mapped[:, -1])
    assert np.allclose(got, backoff_logprob(model, rows), atol=1e-5)


def test_afp_ngram_prune_writes_a_smaller_normalised_model(tmp_path, capsys):
    from service.cli import main

    text = tmp_path / "train.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in random_sentences(400, seed=3)))
    main(["ngram", "--text", str(text), "--order", "3", "--out", str(tmp_path / "full.arpa")])
    full = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main(["ngram", "--text", str(text), "--order", "3", "--prune", "1e-4", "--out", str(tmp_path / "small.arpa"),
          "--store", str(tmp_path / "small")])
    small = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert small["prune"] == 1e-4 and full.get("prune") is None
    assert small["3-grams"] < full["3-grams"] and small["1-grams"] == full["1-grams"]
    assert small["before_pruning"] == {k: full[k] for k in ("1-grams", "2-grams", "3-grams")}
    arpa, store = read_arpa_store(tmp_path / "small.arpa"), load_store(tmp_path / "small")
    assert store.counts == arpa.counts == (small["1-grams"], small["2-grams"], small["3-grams"])
    assert main(["ngram", "--text", str(text), "--order", "3", "--prune", "-1", "--out", str(tmp_path / "x.arpa")]) == 2
    assert main(["ngram", "--text", str(text), "--order", "3"]) == 2
    assert "--prune: the threshold must be a number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "x.arpa").exists()


def test_a_context_that_holds_every_word_keeps_a_finite_model(tmp_path, capsys):
    """With a tiny vocabulary a context can see every word: nothing is left to back off to
    (numerator and denominator both ~0). Its weight is 1 (SRILM's rule), the ARPA file is
    written and read, and every context still sums to one."""
    from service.cli import main

    text = tmp_path / "t.txt"
    text.write_text("a a\na b\na\na zzz\nb a\nb b a a a b yyy a\nb zzz\n")
    for threshold in ("0", "1e-9"):
        out = tmp_path / f"t{threshold}.arpa"
        assert main(["ngram", "--text", str(text), "--order", "2", "--min-count", "2", "--prune", threshold,
                     "--out", str(out), "--store", str(tmp_path / f"s{threshold}")]) == 0
        store = read_arpa_store(out)
        assert np.isfinite(store.backoffs[0]).all() and np.isfinite(store.logprobs[1]).all()
        predicted = [w for w in store.words[:store.num_file_words] if w != "<s>"]  # <unk> and </s> included
        assert len(predicted) == len(set(predicted)) == 5
        for history in ("a", "b", "<s>"):
            h = np.array([[store.id(history)]] * len(predicted))
            total = np.exp(store.score(h, np.ones(len(predicted), dtype=np.int64),
                                       np.array([store.id(w) for w in predicted]))).sum()
            assert total == pytest.approx(1.0, abs=1e-5)
    capsys.readouterr()


def test_pruning_a_pruned_model_with_an_empty_order(tmp_path):
    model, vocab, _ = fitted(3, "random", 200)
    emptied = prune(model, 1e9, vocab.bos_id, vocab.eos_id)
    assert emptied.orders[2].keys.shape[0] == 0
    again = prune(emptied, 1e-5, vocab.bos_id, vocab.eos_id)
    assert again.orders[2].keys.shape[0] == 0 and again.orders[1].keys.shape[0] <= emptied.orders[1].keys.shape[0]


def test_a_text_with_a_symbol_the_model_never_predicts_is_refused(tmp_path, capsys):
    from service.cli import main

    words = tmp_path / "words.txt"
    words.write_text("<eps> 0\n<s> 1\n</s> 2\n<unk> 3\na 4\nb 5\n#0 6\n")
    text = tmp_path / "t.txt"
    text.write_text("b <eps> a\na b\n")
    assert main(["ngram", "--text", str(text), "--words-txt", str(words), "--order", "2",
                 "--store", str(tmp_path / "s")]) == 2
    assert "'<eps>', a symbol the model never predicts" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_vocabulary_options_with_prepared_data_are_refused(tmp_path, capsys):
    from service.cli import main

    assert main(["ngram", "--data", str(tmp_path), "--min-count", "2", "--order", "2", "--out", "x.arpa"]) == 2
    assert "--min-count: the vocabulary of --data DIR or --arpa FILE is its own" in capsys.readouterr().err


def test_an_existing_arpa_file_prunes_as_the_model_it_was_written_from(tmp_path, capsys):
    """``afp ngram --arpa LM --prune T`` (SRILM's ``ngram -lm LM -prune T``) on the ARPA file of
    a built model keeps the same n-grams, with the same numbers, as pruning the built model;
    ``--arpa LM --store DIR`` alone stores the file as it is."""
    from service.cli import main

    text = tmp_path / "train.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in random_sentences(400, seed=5)))
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(tmp_path / "full.arpa")]) == 0
    assert main(["ngram", "--text", str(text), "--order", "3", "--prune", "1e-5", "--store",
                 str(tmp_path / "built")]) == 0
    assert main(["ngram", "--arpa", str(tmp_path / "full.arpa"), "--prune", "1e-5", "--store", str(tmp_path / "read"),
                 "--out", str(tmp_path / "read.arpa")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["3-grams"] < lines[-1]["before_pruning"]["3-grams"] == lines[0]["3-grams"]
    built, read = load_store(tmp_path / "built"), load_store(tmp_path / "read")
    assert built.words == read.words and built.counts == read.counts
    for n in range(3):
        assert np.array_equal(built.keys[n], read.keys[n])
        assert np.allclose(built.logprobs[n], read.logprobs[n], rtol=1e-6, atol=1e-6)
        assert np.allclose(built.backoffs[n], read.backoffs[n], rtol=1e-6, atol=1e-5)
    assert read_arpa_store(tmp_path / "read.arpa").counts == read.counts
    assert main(["ngram", "--arpa", str(tmp_path / "full.arpa"), "--store", str(tmp_path / "as-is")]) == 0
    original = read_arpa_store(tmp_path / "full.arpa")
    stored = load_store(tmp_path / "as-is")
    assert stored.counts == original.counts and all(np.array_equal(a, b) for a, b in zip(stored.keys, original.keys))
    capsys.readouterr()
    assert main(["ngram", "--arpa", str(tmp_path / "full.arpa"), "--out", str(tmp_path / "x.arpa")]) == 2
    assert "--arpa without --prune" in capsys.readouterr().err
    assert main(["ngram", "--arpa", str(tmp_path / "full.arpa"), "--order", "4", "--prune", "1e-5",
                 "--store", str(tmp_path / "y")]) == 2
    assert "is a 3-gram model" in capsys.readouterr().err
