"""ARPA back-off n-gram models (lm/ngram/model.py): hand-computed probabilities, exact round trips of
Kneser-Ney models written by bench/kneser_ney.py, the scorer against the reference, format errors."""

from __future__ import annotations

import gzip
import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bench.kneser_ney import KneserNey, write_arpa
from lattices.expand import DEFAULT_SKIP
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, rescore
from lattices.scorer import ContextScorer
from lm.corpus import encode
from lm.ngram import LOG10, LOG_FLOOR, ArpaFormatError, NgramModel, NgramScorer, read_arpa, sentence_logprob
from lm.ngram.store import load_store, parse_arpa_store, save_store
from lm.scorer import score_sentences, sentence_pairs
from lm.vocab import Vocabulary
from tests.factories import (replacing_options, MUTATIONS, VALID_MUTATIONS, all_paths, mutate_lines, neutral_mutation, patterned_sentences,
                             random_lattice)
from tests.lattices.test_kaldi import FUZZ

# A trigram model small enough to score by hand (log10 numbers below are read off these lines).
HAND = """\
written by hand for tests

\\data\\
ngram 1=6
ngram 2=4
ngram 3=2

\\1-grams:
-99\t<s>\t-0.5
-0.7\t</s>
-0.9\t<unk>
-0.5\ta\t-0.3
-0.6\tb\t-0.2
-1.0\tc

\\2-grams:
-0.2\t<s> a\t-0.1
-0.4\ta b\t-0.25
-0.3\tb </s>
-0.5\tb c

\\3-grams:
-0.1\t<s> a b
-0.05\ta b c

\\end\\
"""
HAND_LINES = HAND.split("\n")

# (history, word, log10 P) worked out from HAND by the back-off rule
HAND_CASES = [
    (["<s>"], "a", -0.2),                      # listed bigram
    (["<s>", "a"], "b", -0.1),                 # listed trigram
    (["<s>", "a"], "c", -0.1 - 0.3 - 1.0),     # bo(<s> a) + bo(a) + p(c)
    (["a", "b"], "c", -0.05),                  # listed trigram
    (["a", "b"], "</s>", -0.25 - 0.3),         # bo(a b) + p(</s> | b)
    (["b", "c"], "a", -0.5),                   # b c has no back-off field, c none: p(a)
    (["<s>", "a"], "zebra", -0.1 - 0.3 - 0.9),  # unknown word = <unk>
    (["zebra"], "b", -0.6),                    # <unk> has no back-off: p(b)
    (["x", "y", "<s>", "a"], "b", -0.1),        # only the last two tokens count
    (["<s>"], "b", -0.5 - 0.6),                # bo(<s>) + p(b)
    ([], "c", -1.0),
]


def hand_model(tmp_path=None, kind: str = "text") -> NgramModel:
    if kind == "text":
        return read_arpa(HAND)
    if kind == "bytes":
        return read_arpa(HAND.encode())
    path = tmp_path / ("hand.arpa.gz" if kind == "gzip" else "hand.arpa")
    path.write_bytes(gzip.compress(HAND.encode()) if kind == "gzip" else HAND.encode())
    return read_arpa(str(path) if kind == "gzip" else path)


def score_pairs(scorer: NgramScorer, histories: list[list[str]], words: list[str]) -> torch.Tensor:
    """Scorer log-probabilities of ``words[j]`` after ``histories[j]`` (one context row each)."""
    width = max(1, max(len(h) for h in histories))
    contexts = torch.zeros(len(histories), width, dtype=torch.int64)
    for row, history in enumerate(histories):
        if history:
            contexts[row, width - len(history):] = scorer.word_ids(history)
    lengths = torch.tensor([len(h) for h in histories])
    return scorer.score(contexts, lengths, scorer.word_ids(words), torch.arange(len(words)))


@pytest.mark.parametrize("kind", ["text", "bytes", "path", "gzip"])
def test_hand_written_trigram(tmp_path, kind):
    model = hand_model(tmp_path, kind)
    scorer = NgramScorer(model)
    assert model.order == 3 and model.counts == (6, 4, 2) and scorer.context_size == 2 and model.has_unk
    assert model.words[:3] == ("<s>", "</s>", "<unk>") and (scorer.bos_id, scorer.eos_id) == (0, 1)
    histories, words, expected = zip(*HAND_CASES)
    got = score_pairs(scorer, list(histories), list(words))
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx([e * LOG10 for e in expected], abs=1e-12)
    for history, word, log10p in HAND_CASES:
        assert model.logprob([model.id(w) for w in history], model.id(word)) == pytest.approx(log10p * LOG10)
    # <s> a b c </s>: -0.2 -0.1 -0.05, then p(</s> | b c) = 0 (no bo) + 0 (c has no bo) + p(</s>) = -0.7
    assert sentence_logprob(model, ["a", "b", "c"]) == pytest.approx((-0.2 - 0.1 - 0.05 - 0.7) * LOG10)
    # a literal <unk> is an unknown word (ContextScorer.known), listed in the file or not
    assert scorer.known(["a", "<unk>", "zebra", "</s>"]).tolist() == [True, False, False, True]
    assert scorer.word_ids(["zebra", "c"]).tolist() == [model.unk_id, model.id("c")]
    assert isinstance(scorer, ContextScorer)


def test_sentence_start_is_never_predicted():
    scorer = NgramScorer(hand_model())
    got = score_pairs(scorer, [["<s>"], ["a", "b"], []], ["<s>", "<s>", "<s>"])
    assert got.tolist() == [LOG_FLOOR] * 3 and LOG_FLOOR == pytest.approx(-99 * math.log(10))


def test_without_unk_unknown_words_get_the_floor_and_histories_back_off_past_them():
    text = "\n".join(line for line in HAND_LINES if "<unk>" not in line).replace("ngram 1=6", "ngram 1=5")
    model = read_arpa(text)
    scorer = NgramScorer(model)
    assert not model.has_unk and model.words[-1] == "<unk>" and len(model.words) == 6
    assert scorer.known(["zebra", "<unk>", "a"]).tolist() == [False, False, True]
    got = score_pairs(scorer, [["<s>", "a"], ["b", "zebra"], ["zebra"]], ["zebra", "zebra", "a"])
    assert got.tolist() == pytest.approx([LOG_FLOOR, LOG_FLOOR, -0.5 * LOG10], abs=1e-12)
    assert sentence_logprob(model, ["a", "zebra"]) == pytest.approx((-0.2 - 0.7) * LOG10 + LOG_FLOOR)


def test_a_file_without_sentence_start_gets_it_as_a_context_only_token():
    text = "\\data\\\nngram 1=2\n\n\\1-grams:\n-0.3 a\n-0.2 </s>\n\\end\\\n"
    model = read_arpa(text)
    scorer = NgramScorer(model)
    assert model.words == ("a", "</s>", "<s>", "<unk>") and scorer.context_size == 0
    got = score_pairs(scorer, [["<s>"], []], ["a", "</s>"])
    assert got.tolist() == pytest.approx([-0.3 * LOG10, -0.2 * LOG10])


def test_the_dict_model_is_a_view_of_the_one_readers_store(tmp_path):
    """read_arpa builds its dicts from the store the one parser reads (float64: the file's numbers
    exactly; from a mapped float32 store directory to float32 precision); a listed back-off of 0 is
    the same model as none."""
    model = read_arpa(HAND)
    ids = {w: model.id(w) for w in model.words}
    assert model.logprobs[(ids["<s>"], ids["a"])] == {ids["b"]: -0.1 * LOG10}
    assert model.logprobs[(ids["b"],)] == {ids["</s>"]: -0.3 * LOG10, ids["c"]: -0.5 * LOG10}
    assert model.backoffs == {(ids["<s>"],): -0.5 * LOG10, (ids["a"],): -0.3 * LOG10, (ids["b"],): -0.2 * LOG10,
                              (ids["<s>"], ids["a"]): -0.1 * LOG10, (ids["a"], ids["b"]): -0.25 * LOG10}
    zero = read_arpa(HAND.replace("-1.0\tc\n", "-1.0\tc\t0\n"))
    assert zero.backoffs == model.backoffs and zero.logprobs == model.logprobs
    save_store(parse_arpa_store(HAND), tmp_path / "store")
    mapped = NgramModel.from_store(load_store(tmp_path / "store"))
    assert mapped.words == model.words and mapped.counts == model.counts
    assert mapped.logprobs.keys() == model.logprobs.keys()
    for context, row in model.logprobs.items():
        assert mapped.logprobs[context] == pytest.approx(row, rel=1e-6)  # float32


def _kn(order: int, seed: int = 4) -> tuple[KneserNey, Vocabulary, list[list[int]]]:
    rng = random.Random(order)
    sentences = patterned_sentences(200, seed=seed) + [rng.sample("x y z w v u".split(), rng.randint(1, 5))
                                                       for _ in range(30)]
    vocab = Vocabulary.from_sentences(sentences)
    encoded = [s.tolist() for s in encode(sentences, vocab).ids]
    return KneserNey.fit(encoded, order, sum(vocab.predictable_mask()), vocab.bos_id), vocab, encoded


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
def test_a_written_kneser_ney_model_reads_back_with_the_same_probabilities(tmp_path, order):
    kn, vocab, encoded = _kn(order)
    path = tmp_path / ("kn.arpa.gz" if order % 2 else "kn.arpa")
    write_arpa(kn, vocab, path)
    model = read_arpa(path)
    scorer = NgramScorer(model)
    assert model.order == order and model.counts[1:] == tuple(len(level.counts) for level in kn.orders[1:])
    predictable = [w for w, ok in zip(vocab.words, vocab.predictable_mask()) if ok]
    assert sorted(model.words) == sorted([*predictable, "<s>"])
    the, cat, x = vocab.id("the"), vocab.id("cat"), vocab.id("x")
    histories = [[vocab.bos_id], [vocab.bos_id, the], [vocab.bos_id, the, vocab.id("big")], [x, the, cat],
                 [vocab.unk_id] * 4, [vocab.eos_id], [], *(s[:k] for s in encoded[:12] for k in range(1, len(s)))]
    for history in histories:
        kept = history[max(0, len(history) - order + 1):] if order > 1 else []
        words = [vocab.words[i] for i in kept]
        got = score_pairs(scorer, [words] * len(predictable), predictable)
        expected = [math.log(kn.prob(history, vocab.id(w))) for w in predictable]
        assert got.tolist() == pytest.approx(expected, abs=1e-6), words
        assert float(got.exp().sum()) == pytest.approx(1.0, abs=1e-9), words  # sums to 1 without <s>


@pytest.mark.parametrize("order", [2, 3, 5])
def test_scorer_equals_the_sentence_reference_whatever_the_context_width(tmp_path, order):
    kn, vocab, _ = _kn(order)
    write_arpa(kn, vocab, tmp_path / "kn.arpa")
    model = read_arpa(tmp_path / "kn.arpa")
    scorer = NgramScorer(model)
    rng = random.Random(order)
    words = [*vocab.words[3:], "zebra", "<unk>"]
    sentences = [[rng.choice(words) for _ in range(rng.randint(0, 12))] for _ in range(60)]
    ids = [scorer.word_ids(s).tolist() for s in sentences]
    for context_size in (scorer.context_size, order + 2, None):  # wider rows are cut by the scorer
        contexts, lengths, targets, target_context, target_sentence = sentence_pairs(
            ids, scorer.bos_id, scorer.eos_id, context_size)
        values = scorer.score(contexts, lengths, targets, target_context)
        totals = torch.zeros(len(sentences), dtype=torch.float64).index_add_(0, target_sentence, values)
        assert totals.tolist() == pytest.approx([sentence_logprob(model, s) for s in sentences], abs=1e-9)
    kn_totals = [kn.logprob([vocab.bos_id, *vocab.encode(s), vocab.eos_id]) for s in sentences]
    assert [sentence_logprob(model, s) for s in sentences] == pytest.approx(kn_totals, abs=1e-6)
    per_token = score_sentences(scorer, sentences)
    assert [float(t.sum()) for t in per_token] == pytest.approx(kn_totals, abs=1e-6)


def test_score_rejects_ids_outside_the_vocabulary():
    scorer = NgramScorer(hand_model())
    with pytest.raises(ValueError, match="targets hold ids outside"):
        scorer.score(torch.zeros(1, 2, dtype=torch.int64), torch.tensor([1]), torch.tensor([99]), torch.tensor([0]))
    with pytest.raises(ValueError, match="contexts hold ids outside"):
        scorer.score(torch.full((1, 2), -1), torch.tensor([1]), torch.tensor([1]), torch.tensor([0]))
    empty = scorer.score(torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                         torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    assert empty.shape == (0,) and empty.dtype == torch.float64


def _replace(line: str, new: str) -> str:
    lines = list(HAND_LINES)
    lines[lines.index(line)] = new
    return "\n".join(lines)


def _line(line: str) -> int:
    return HAND_LINES.index(line) + 1


MALFORMED = [
    ("hello\nworld\n", r"<ARPA text>: no \\data\\ line"),
    (_replace("ngram 2=4", "ngram 2 4"), rf"<ARPA text>:{_line('ngram 2=4')}: expected 'ngram N=COUNT'"),
    (_replace("ngram 2=4", "ngram 3=4"), rf":{_line('ngram 2=4')}: expected the count of order 2, got order 3"),
    (_replace("ngram 2=4", "ngram 2=5"), rf":{_line(chr(92) + '2-grams:')}: the header declares 5 2-grams, the "
                                         "section has 4"),
    (_replace("-0.5\tb c", "-0.5\tb"), rf":{_line('-0.5' + chr(9) + 'b c')}: expected log10 prob and 2 words"),
    (_replace("-0.5\tb c", "-0.5\tb c\t-0.1\t3"), rf":{_line('-0.5' + chr(9) + 'b c')}: expected"),
    (_replace("-0.05\ta b c", "-0.05\ta b c\t-0.1"), rf":{_line('-0.05' + chr(9) + 'a b c')}: expected log10 prob "
                                                     "and 3 words, got 5"),
    (_replace("-0.7\t</s>", "minus\t</s>"), rf":{_line('-0.7' + chr(9) + '</s>')}: not a number"),
    (_replace("-0.7\t</s>", "nan\t</s>"), rf":{_line('-0.7' + chr(9) + '</s>')}: .* not finite"),
    (_replace("-0.5\ta\t-0.3", "-0.5\ta\tinf"), rf":{_line('-0.5' + chr(9) + 'a' + chr(9) + '-0.3')}: .* not finite"),
    (_replace("-0.5\tb c", "-0.5\tb zebra"), rf":{_line('-0.5' + chr(9) + 'b c')}: word 'zebra' is not among"),
    (_replace("-1.0\tc", "-1.0\tb"), rf":{_line('-1.0' + chr(9) + 'c')}: unigram 'b' is listed twice"),
    (_replace("-0.5\tb c", "-0.5\ta b"), rf":{_line('-0.5' + chr(9) + 'b c')}: 2-gram 'a b' is listed twice"),
    (_replace("\\end\\", ""), r"<ARPA text>: the file ends without \\end\\"),
    (_replace("\\end\\", "\\4-grams:"), rf":{_line(chr(92) + 'end' + chr(92))}: expected \\end\\"),
    (_replace("\\2-grams:", "\\3-grams:"), rf":{_line(chr(92) + '2-grams:')}: expected \\2-grams:"),
    ("\\data\\\nngram 1=1\n\\1-grams:\n-1 a\n\\end\\\n", r"<ARPA text>: </s> is not among the unigrams"),
    ("\\data\\\n\\1-grams:\n-1 </s>\n\\end\\\n", r"<ARPA text>:2: the \\data\\ header has no"),
    ("\\data\\\nngram 1=1\nngram 2=0\n\\1-grams:\n-1 </s>\n\\end\\\n", r"<ARPA text>:6: expected \\2-grams:"),
    ("\\data\\\nngram 1=1\nngram 2=0\n\\1-grams:\n-1 </s>\n", r"the file ends before the \\2-grams:"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_arpa_names_the_line(text, message):
    with pytest.raises(ArpaFormatError, match=message):
        read_arpa(text)


def test_unreadable_input_names_the_source(tmp_path):
    with pytest.raises(ArpaFormatError, match=r"missing\.arpa: cannot read"):
        read_arpa(tmp_path / "missing.arpa")
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(ArpaFormatError, match=r"broken\.gz: broken gzip"):
        read_arpa(tmp_path / "broken.gz")
    with pytest.raises(ArpaFormatError, match=rf"latin:{_line('ngram 2=4')}: not UTF-8"):
        read_arpa(HAND.replace("ngram 2=4", "ngram 2=4\xe9").encode("latin-1"), source="latin")
    assert issubclass(ArpaFormatError, ValueError)


def check_read(text: str) -> None:
    """Reading gives a model whose every distribution is finite, or an ArpaFormatError naming the source."""
    try:
        model = read_arpa(text, source="fuzz.arpa")
    except ArpaFormatError as err:
        assert str(err).startswith("fuzz.arpa:"), err
        return
    scorer = NgramScorer(model)
    words = list(model.words)
    values = score_pairs(scorer, [["<s>", w] for w in words], words)
    assert values.shape == (len(words),) and not torch.isnan(values).any()


TOKENS = ["<s>", "</s>", "a", "b", "<unk>", "-0.5", "x", "\\data\\", "\\2-grams:", "ngram", "1=6", "nan", ""]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=3), st.sampled_from([" ", "\t"]))
def test_fuzz_mutations_of_a_valid_file(mutations, separator):
    check_read(mutate_lines(HAND.replace("\t", separator), mutations, separator))


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(HAND_LINES), st.lists(st.sampled_from(TOKENS), max_size=5).map(" ".join)),
                max_size=30))
def test_fuzz_random_lines(lines):
    check_read("\n".join(["\\data\\", *lines]))


@FUZZ
@given(st.text(max_size=200))
def test_fuzz_arbitrary_text(text):
    check_read(text + "\n")


# ------------------------------------------------------------------------- rescoring, no neural LM
LATTICE = (  # one to three words, epsilon and silence arcs; best under HAND: "a b" (-0.2 -0.1 -0.55 in log10)
    [(0, 1, 1, -1.0, -0.5), (0, 1, 2, -2.0, -0.1), (1, 2, 0, 0.0, 0.0), (1, 2, 2, -0.5, -1.0),
     (2, 3, 3, -3.0, -0.2), (2, 3, 5, 0.0, 0.0), (3, 4, 4, -1.0, -2.0), (3, 4, 1, -0.2, -0.4), (2, 4, 6, -1.0, -0.3)],
    {3: (0.0, 0.0), 4: (-0.5, -0.1)},
    ("<eps>", "a", "b", "c", "zebra", "!SIL", "</s>"),
)


def _path_words(lattice: Lattice, arcs: list[int]) -> list[str]:
    words = [lattice.symbols[int(lattice.words[a])] for a in arcs]
    return [w for w in words if w not in DEFAULT_SKIP]


@pytest.mark.parametrize("which", ["hand", "kn4", "random"])
def test_rescoring_with_an_ngram_gives_its_sentence_logprobs(tmp_path, which):
    if which == "hand":
        model, lattice = hand_model(), Lattice.from_arcs("hand", *LATTICE)
    else:
        kn, vocab, _ = _kn(4)
        write_arpa(kn, vocab, tmp_path / "kn4.arpa")
        model = read_arpa(tmp_path / "kn4.arpa")
        lattice = Lattice.from_arcs("kn", *LATTICE[:2], ("<eps>", "the", "cat", "sat", "zebra", "!SIL", "</s>")) \
            if which == "kn4" else random_lattice(7, num_states=8, extra_arcs=8)
    options = replacing_options(lm_weights=(1.0,), acoustic_scale=0.0, nbest=3)
    (result,) = rescore(lattice, NgramScorer(model), options)
    assert result.stats["rho"] == model.order - 1 and len(result.nbest) == 3
    for hyp in result.nbest:
        assert hyp.lm_logprob == pytest.approx(sentence_logprob(model, hyp.words), abs=1e-6)
        assert hyp.score == pytest.approx(hyp.lm_logprob, abs=1e-6)  # acoustic 0, old LM 0: the LM alone
    # the n-best list is the three best distinct word sequences of all paths
    every = {tuple(_path_words(lattice, arcs)) for arcs, _ in all_paths(lattice)}
    best = sorted((sentence_logprob(model, list(words)) for words in every), reverse=True)[:3]
    assert [h.lm_logprob for h in result.nbest] == pytest.approx(best, abs=1e-6)
    if which == "hand":
        assert result.best.words == ["a", "b"] and result.best.lm_logprob == pytest.approx(-0.85 * LOG10)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(VALID_MUTATIONS), st.integers(0, 10**6)), min_size=1, max_size=6))
def test_fuzz_neutral_mutations_of_a_valid_file_still_parse_the_same(ops):
    """The n-grams of a section may come in any order, with any blanks: the same model."""
    lines = HAND.split("\n")
    sections = []  # line indices of each section's n-grams
    for i, line in enumerate(lines):
        if line.startswith("\\") and line.endswith("-grams:"):
            sections.append([])
        elif sections and line.strip() and not line.startswith("\\"):
            sections[-1].append(i)
    for movable in sections:
        lines = neutral_mutation(lines, movable, [(op, w) for op, w in ops if op == "permute"])
    lines = neutral_mutation(lines, [], [(op, w) for op, w in ops if op != "permute"])
    expected, got = read_arpa(HAND), read_arpa("\n".join(lines))
    words = list(expected.words)
    histories = [["<s>"], ["a"], ["<s>", "a"], ["a", "b"], ["b"], ["c"]]
    for history in histories:
        assert [got.logprob([got.id(w) for w in history], got.id(w)) for w in words] == pytest.approx(
            [expected.logprob([expected.id(w) for w in history], expected.id(w)) for w in words], abs=1e-12)
