"""Relative-entropy pruning (``lm.ngram.prune``, ``afp ngram --prune``) and the array-built store
(``lm.ngram.kneser_ney.to_store``): each n-gram's divergence against a brute-force KL computed
here, over the whole vocabulary, with a back-off look-up of this file's own (:class:`Backoff`, dicts
of plain probabilities; never the module's ``backoff_logprob``), on a model written by hand and on
fitted models; normalised distributions after pruning, the back-off structure kept, and the store
equal to the one its ARPA file reads into."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lm.ngram import kneser_ney
from lm.ngram.prune import all_divergences, backoff_logprob, divergences, history_logprob, model_of_store, prune
from lm.ngram.store import load_store, read_arpa_store
from lm.vocab import Vocabulary
from tests.factories import patterned_sentences, random_sentences
from tests.lm.ngram_reference import arpa_store
from tests.lm.test_kneser_ney import shards_of


def fitted(order: int, corpus: str = "patterned", size: int = 300):
    sentences = patterned_sentences(size, seed=order) if corpus == "patterned" else random_sentences(size, seed=order)
    vocab = Vocabulary.from_sentences(sentences[: len(sentences) // 2])
    predictable = np.array(vocab.predictable_mask())
    model = kneser_ney.build(kneser_ney.chunks_of(shards_of(sentences, vocab), vocab.bos_id, vocab.eos_id,
                                                  vocab.unk_id), order, vocab.size, vocab.bos_id, predictable)
    return model, vocab, predictable


class Backoff:
    """A back-off model as dicts, with this file's own look-up (the definition, in plain
    probabilities): ``P(w | h) = p(h w)`` when listed, else ``bow(h) P(w | h[1:])`` (``bow`` 1
    where ``h`` has none), down to the unigram ``p(w)``; only the last ``order - 1`` words of a
    history count. ``probs``: word-id tuple -> probability (every order, unigrams included);
    ``bows``: context tuple -> back-off weight; ``words``: the predictable word ids."""

    def __init__(self, probs: dict[tuple[int, ...], float], bows: dict[tuple[int, ...], float], order: int,
                 words: list[int]) -> None:
        self.probs, self.bows, self.order, self.words = probs, bows, order, words

    @classmethod
    def of(cls, model: kneser_ney.KneserNeyModel, predictable: np.ndarray) -> Backoff:
        """The dicts of a model's arrays (rows of each order, ``p_n``, ``gamma``; NaN is none)."""
        words = np.flatnonzero(predictable).tolist()
        probs = {(w,): float(model.unigram_probs[w]) for w in words}
        bows = {(w,): float(g) for w, g in enumerate(model.gammas[0]) if not math.isnan(g)} if model.order > 1 else {}
        for n in range(2, model.order + 1):
            rows = model.packer(n).unpack(model.orders[n - 1].keys).tolist()
            probs.update(zip(map(tuple, rows), model.orders[n - 1].probs.tolist()))
            if n < model.order:
                bows.update((tuple(r), float(g)) for r, g in zip(rows, model.gammas[n - 1]) if not math.isnan(g))
        return cls(probs, bows, model.order, words)

    def p(self, history, word: int) -> float:
        h = tuple(history)[max(0, len(history) - self.order + 1):] if self.order > 1 else ()
        if (*h, word) in self.probs:
            return self.probs[(*h, word)]
        return self.bows.get(h, 1.0) * self.p(h[1:], word) if h else 0.0

    def distribution(self, history) -> np.ndarray:
        """float64 ``(len(words),)``: ``P(v | history)`` of every predictable word."""
        return np.array([self.p(history, v) for v in self.words])

    def history_prob(self, history, bos: int, eos: int) -> float:
        """``P(h)``: ``p(h_1) P(h_2 | h_1) ...``, ``p(</s>)`` standing for a leading ``<s>`` (SRILM)."""
        first = eos if history[0] == bos else history[0]
        return self.p((), first) * math.prod(self.p(history[:k], history[k]) for k in range(1, len(history)))

    def explicit(self, history) -> list[int]:
        """The words listed after ``history`` (its n-grams of order ``len(history) + 1``)."""
        return [g[-1] for g in self.probs if len(g) == len(history) + 1 and g[:-1] == tuple(history)]

    def without(self, history, removed: set[int]) -> np.ndarray:
        """``P'(v | history)`` once the n-grams ``history v`` (v in ``removed``) are gone: the kept
        ones as they were, the rest ``bow' P(v | h[1:])``, ``bow'`` renormalised by hand."""
        kept = [v for v in self.explicit(history) if v not in removed]
        bow = (1 - sum(self.p(history, v) for v in kept)) / (1 - sum(self.p(history[1:], v) for v in kept))
        return np.array([self.p(history, v) if v in kept else bow * self.p(history[1:], v) for v in self.words])

    def kl_without(self, history, word: int, bos: int, eos: int) -> float:
        """SRILM's divergence of removing ``history word``, by brute force over the vocabulary:
        ``P(h) sum_v P(v|h) ln(P(v|h) / P'(v|h))``."""
        p, q = self.distribution(history), self.without(history, {word})
        assert p.sum() == pytest.approx(1.0, abs=1e-9) and q.sum() == pytest.approx(1.0, abs=1e-9)
        terms = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / q), 0.0)
        return self.history_prob(history, bos, eos) * float(terms.sum())


# A trigram written by hand: every probability below is chosen, every back-off weight is the
# mass its context leaves over the mass its n-grams' lower-order probabilities leave, worked out
# here as fractions, so that each context sums to exactly one.
#   unigrams  p(</s>) .2  p(a) .4  p(b) .25  p(c) .15             (<s>: -99)
#   <s>: a .5, b .3        bow = (1 - .8) / (1 - .4 - .25)  = 4/7
#   a:   b .6, </s> .3     bow = (1 - .9) / (1 - .25 - .2)  = 2/11
#   b:   c .5, </s> .3     bow = (1 - .8) / (1 - .15 - .2)  = 4/13
#   <s> a: b .7            bow = (1 - .7) / (1 - .6)        = 3/4
#   a b:   c .6, </s> .35  bow = (1 - .95) / (1 - .5 - .3)  = 1/4
HAND_PROBS = {("</s>",): .2, ("a",): .4, ("b",): .25, ("c",): .15,
              ("<s>", "a"): .5, ("<s>", "b"): .3, ("a", "b"): .6, ("a", "</s>"): .3, ("b", "c"): .5, ("b", "</s>"): .3,
              ("<s>", "a", "b"): .7, ("a", "b", "c"): .6, ("a", "b", "</s>"): .35}
HAND_BOWS = {("<s>",): 4 / 7, ("a",): 2 / 11, ("b",): 4 / 13, ("<s>", "a"): 3 / 4, ("a", "b"): 1 / 4}


def hand_arpa() -> str:
    """HAND_PROBS and HAND_BOWS as ARPA text, log10 to 17 digits (float64 reads them back exactly)."""
    def line(gram: tuple[str, ...], p: float) -> str:
        bow = HAND_BOWS.get(gram)
        return f"{math.log10(p)!r}\t{' '.join(gram)}" + (f"\t{math.log10(bow)!r}" if bow else "") + "\n"

    grams = [[g for g in HAND_PROBS if len(g) == n] for n in (1, 2, 3)]
    return ("\\data\\\n" + f"ngram 1={len(grams[0]) + 1}\nngram 2={len(grams[1])}\nngram 3={len(grams[2])}\n"
            + "\n\\1-grams:\n" + f"-99\t<s>\t{math.log10(HAND_BOWS[('<s>',)])!r}\n"
            + "".join(line(g, HAND_PROBS[g]) for g in grams[0])
            + "".join(f"\n\\{n}-grams:\n" + "".join(line(g, HAND_PROBS[g]) for g in grams[n - 1]) for n in (2, 3))
            + "\n\\end\\\n")


def hand_model():
    """The model :func:`prune` reads from the hand-written ARPA text, and :class:`Backoff` of the
    hand's numbers in its word ids (not read from the file)."""
    store = arpa_store(hand_arpa(), dtype=np.float64)
    model, predictable = model_of_store(store)
    ids = {w: store.id(w) for w in ("<s>", "</s>", "a", "b", "c")}
    reference = Backoff({tuple(ids[w] for w in g): p for g, p in HAND_PROBS.items()},
                        {tuple(ids[w] for w in g): b for g, b in HAND_BOWS.items()}, 3,
                        sorted(ids[w] for w in ("</s>", "a", "b", "c")))
    assert np.flatnonzero(predictable).tolist() == reference.words
    return model, store, ids, reference, predictable


def test_the_hand_written_model_sums_to_one_in_every_context():
    _, _, ids, reference, _ = hand_model()
    for history in [(), ("<s>",), ("a",), ("b",), ("c",), ("<s>", "a"), ("a", "b"), ("b", "c"), ("c", "a")]:
        assert reference.distribution([ids[w] for w in history]).sum() == pytest.approx(1.0, abs=1e-15), history


def test_divergences_of_a_hand_written_model():
    """Every n-gram's divergence is the brute-force KL of the hand's numbers; two worked out in full."""
    model, store, ids, reference, _ = hand_model()
    bos, eos = ids["<s>"], ids["</s>"]
    got = all_divergences(model, bos, eos)
    assert sorted(got) == [2, 3]
    for n in (2, 3):
        rows = store.grams(n)
        assert got[n].shape == (rows.shape[0],) and np.array_equal(divergences(model, n, bos, eos), got[n])
        brute = [reference.kl_without(row[:-1].tolist(), int(row[-1]), bos, eos) for row in rows]
        assert got[n] == pytest.approx(brute, rel=1e-12, abs=1e-16)
        assert (got[n] > 0).all()
    named = {" ".join(store.words[i] for i in row): float(d) for n in (2, 3) for row, d in zip(store.grams(n), got[n])}
    # "a b": P(a) = .4; without it a keeps </s> .3, bow' = (1 - .3) / (1 - .2) = .875, so
    # P'(b|a) = .875 * .25; the backed-off words (a, c) held bow(a) * (1 - .25 - .2) = .1 and now
    # hold .875 / bow(a) times as much: KL = .6 ln(.6 / (.875 * .25)) + .1 ln((2/11) / .875)
    assert named["a b"] == pytest.approx(.4 * (.6 * math.log(.6 / (.875 * .25)) + .1 * math.log((2 / 11) / .875)),
                                         rel=1e-12)
    # "<s> a b": P(<s> a) = p(</s>) P(a|<s>) = .2 * .5; without it "<s> a" keeps nothing, bow' = 1, so
    # P'(v | <s> a) = P(v | a): b drops from .7 to .6 and the rest (.3) was .75 times P(v|a)
    assert named["<s> a b"] == pytest.approx(.1 * (.7 * math.log(.7 / .6) + .3 * math.log(.75)), rel=1e-12)
    # the ARPA file's lower-order view agrees with the hand: P(c | <s> a) = 3/4 * 2/11 * .15
    assert reference.p([bos, ids["a"]], ids["c"]) == pytest.approx(.75 * 2 / 11 * .15, rel=1e-15)
    assert math.exp(backoff_logprob(model, np.array([[bos, ids["a"], ids["c"]]]))[0]) == pytest.approx(
        .75 * 2 / 11 * .15, rel=1e-12)


def test_pruning_the_hand_written_model_removes_what_the_brute_force_says():
    """At a threshold between two of the brute-force divergences, exactly the n-grams below it go
    (but those a kept trigram needs as its context or suffix), and every context's distribution
    is the hand-renormalised one: kept n-grams as they were, each weight (1 - kept mass) over
    (1 - the kept words' mass one order down), recomputed lowest order first."""
    model, store, ids, reference, predictable = hand_model()
    bos, eos = ids["<s>"], ids["</s>"]
    cost = {tuple(row.tolist()): math.expm1(reference.kl_without(row[:-1].tolist(), int(row[-1]), bos, eos))
            for n in (2, 3) for row in store.grams(n)}
    values = sorted(cost.values())
    assert min(b / a for a, b in zip(values, values[1:])) > 1 + 1e-6  # each threshold clear of both sides
    for cut in range(1, len(values)):
        threshold = (values[cut - 1] + values[cut]) / 2
        pruned = prune(model, threshold, bos, eos)
        kept_3 = {g for g, c in cost.items() if len(g) == 3 and c >= threshold}
        needed = {g[:2] for g in kept_3} | {g[1:] for g in kept_3}
        kept_2 = {g for g, c in cost.items() if len(g) == 2 and (c >= threshold or g in needed)}
        for n, kept in ((2, kept_2), (3, kept_3)):
            got = {tuple(r) for r in pruned.packer(n).unpack(pruned.orders[n - 1].keys).tolist()}
            assert got == kept, (threshold, n)
        # the expected model: the kept n-grams with the hand's probabilities, weights by hand
        probs = {g: p for g, p in reference.probs.items() if len(g) == 1 or g in kept_2 | kept_3}
        expected = Backoff(probs, {}, 3, reference.words)
        for h in [(w,) for w in reference.words + [bos]] + sorted({g[:2] for g in kept_3}):
            listed = expected.explicit(h)
            if listed:
                expected.bows[h] = ((1 - sum(expected.p(h, v) for v in listed))
                                    / (1 - sum(expected.p(h[1:], v) for v in listed)))
        actual = Backoff.of(pruned, predictable)
        for h in [(), (bos,), *((w,) for w in reference.words), *((a, b) for a in [bos, *reference.words]
                                                                  for b in reference.words)]:
            want = expected.distribution(h)
            assert want.sum() == pytest.approx(1.0, abs=1e-12)
            assert actual.distribution(h) == pytest.approx(want, rel=1e-9, abs=1e-15), (threshold, h)


@pytest.mark.parametrize("order", [2, 3, 4])
def test_each_divergence_is_the_kl_of_the_model_without_that_ngram(order):
    model, vocab, predictable = fitted(order, "random", 120)
    reference = Backoff.of(model, predictable)
    rng = np.random.default_rng(order)
    n = order
    rows = model.packer(n).unpack(model.orders[n - 1].keys)
    fast = divergences(model, n, vocab.bos_id, vocab.eos_id)
    for i in rng.choice(rows.shape[0], size=min(12, rows.shape[0]), replace=False).tolist():
        h, w = rows[i, :-1].tolist(), int(rows[i, -1])
        brute = reference.kl_without(h, w, vocab.bos_id, vocab.eos_id)
        assert fast[i] == pytest.approx(brute, rel=1e-6, abs=1e-15)
        assert fast[i] > 0


def test_history_probability_chains_the_model():
    model, vocab, predictable = fitted(3)
    reference = Backoff.of(model, predictable)
    h = model.packer(3).unpack(model.orders[2].keys[::7])[:, :-1]
    got = history_logprob(model, h, vocab.bos_id, vocab.eos_id)
    assert vocab.bos_id in h[:, 0] and (h[:, 0] != vocab.bos_id).any()  # both rules of the first word
    for row, value in zip(h.tolist(), got):
        assert value == pytest.approx(math.log(reference.history_prob(row, vocab.bos_id, vocab.eos_id)), rel=1e-12)


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
    reference = Backoff.of(pruned, predictable)
    sizes = [o.keys.shape[0] for o in pruned.orders]
    assert sizes[0] == model.orders[0].keys.shape[0]  # unigrams are never pruned
    assert sum(sizes[1:]) < sum(o.keys.shape[0] for o in model.orders[1:])
    for n in range(2, order + 1):
        rows = pruned.packer(n).unpack(pruned.orders[n - 1].keys)
        if n > 2:  # every kept n-gram's context and suffix are n-grams of the order below
            below = pruned.orders[n - 2].keys
            for part in (rows[:, :-1], rows[:, 1:]):
                assert np.isin(pruned.packer(n - 1).pack(part), below).all()
        contexts = np.unique(model.packer(n).unpack(model.orders[n - 1].keys)[:, :-1], axis=0)
        for h in contexts[::7].tolist():  # every context, pruned or not, sums to one
            assert reference.distribution(h).sum() == pytest.approx(1.0, abs=1e-9)


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
    reference = Backoff.of(model, predictable)
    assert np.allclose(got, [math.log(reference.p(r[:-1], r[-1])) for r in rows.tolist()], atol=1e-5)


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
