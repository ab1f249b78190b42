"""The compact numpy n-gram store (``lm.ngram_store``) gives the dict-based reader's numbers."""

from __future__ import annotations

import random

import pytest

from bench.kneser_ney import write_arpa
from lm.ngram import ArpaFormatError, NgramScorer, read_arpa
from lm.ngram_store import StoreScorer, read_arpa_store
from lm.scorer import sentence_pairs
from tests.lm.test_ngram import HAND, HAND_LINES, _kn


def same_scores(path_or_text, tmp_path, sentences) -> None:
    path = tmp_path / "model.arpa"
    if isinstance(path_or_text, str):
        path.write_text(path_or_text)
    else:
        path = path_or_text
    reference, store = NgramScorer(read_arpa(path)), StoreScorer(read_arpa_store(path))
    assert store.store.words == reference.model.words and store.context_size == reference.context_size
    ids = [reference.word_ids(s).tolist() for s in sentences]
    assert [store.word_ids(s).tolist() for s in sentences] == ids
    assert store.known([w for s in sentences for w in s]).tolist() == reference.known([w for s in sentences for w in s]).tolist()
    for width in (reference.context_size, 6):
        contexts, lengths, targets, target_context, _ = sentence_pairs(ids, reference.bos_id, reference.eos_id, width)
        expected = reference.score(contexts, lengths, targets, target_context)
        got = store.score(contexts, lengths, targets, target_context)
        assert got.tolist() == pytest.approx(expected.tolist(), abs=2e-5)  # float32 storage


def test_hand_written_trigram_with_and_without_unk(tmp_path):
    sentences = [["a", "b", "c"], ["zebra", "a"], [], ["c", "c", "b", "a", "<unk>"], ["<s>", "a"]]
    same_scores(HAND, tmp_path, sentences)
    without = "\n".join(line for line in HAND_LINES if "<unk>" not in line).replace("ngram 1=6", "ngram 1=5")
    same_scores(without, tmp_path, sentences)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_kneser_ney_models_of_every_order(tmp_path, order):
    kn, vocab, _ = _kn(order)
    write_arpa(kn, vocab, tmp_path / "kn.arpa.gz")
    rng = random.Random(order)
    words = [*vocab.words[3:], "zebra", "<unk>"]
    sentences = [[rng.choice(words) for _ in range(rng.randint(0, 12))] for _ in range(60)]
    same_scores(tmp_path / "kn.arpa.gz", tmp_path, sentences)
    store = read_arpa_store(tmp_path / "kn.arpa.gz")
    reference = read_arpa(tmp_path / "kn.arpa.gz")
    assert store.counts == reference.counts and store.nbytes() < 20 * sum(store.counts)


@pytest.mark.parametrize(("text", "message"), [
    ("hello\n", r"no \\data\\ line"),
    (HAND.replace("ngram 2=4", "ngram 2=5"), "the header declares 5 2-grams, the section has 4"),
    (HAND.replace("-0.5\tb c", "-0.5\tb zebra"), "word 'zebra' is not among the unigrams"),
    (HAND.replace("-0.7\t</s>", "minus\t</s>"), "not a number"),
])
def test_malformed_files_name_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.arpa"
    path.write_text(text)
    with pytest.raises(ArpaFormatError, match=message):
        read_arpa_store(path)
