"""ARPA back-off n-gram models (the one reader, lm/ngram/store.py, through the dict-based reference
tests/lm/ngram_reference.py): hand-computed probabilities, exact round trips of Kneser-Ney models
written by afp ngram's estimator, the scorer against the reference estimator, format errors."""

from __future__ import annotations

import gzip
import math
import random
import re
from typing import NamedTuple

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lattices.expand import DEFAULT_SKIP
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, rescore
from lattices.scorer import ContextScorer
from lm.corpus import encode
from lm.ngram.arpa import LOG10, LOG_FLOOR, ArpaFormatError
from lm.ngram.store import StoreScorer, load_store, save_store
from lm.scorer import score_sentences, sentence_pairs
from lm.vocab import Vocabulary
from tests.factories import (replacing_options, MUTATIONS, kn_arpa, VALID_MUTATIONS, all_paths, mutate_lines, neutral_mutation, patterned_sentences,
                             random_lattice)
from tests.lattices.test_kaldi import FUZZ
from tests.lm.kn_reference import KneserNey
from tests.lm.ngram_reference import NgramModel, NgramScorer, arpa_store, parse_arpa, read_arpa, sentence_logprob

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
    save_store(arpa_store(HAND), tmp_path / "store")
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
    kn_arpa(path, encoded, vocab, order)
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
    kn, vocab, encoded = _kn(order)
    kn_arpa(tmp_path / "kn.arpa", encoded, vocab, order)
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


# ------------------------------------------------------------------------------------ fuzzing
# The expectations below come from the format's definition (the lm/ngram/arpa.py docstring), computed here: log10 numbers in the file, natural logs out (times ln 10), the
# back-off rule, <s> never predicted, unknown words as the first unknown-word symbol listed.
LN10 = math.log(10.0)
UNK_PREFERENCE = ("<unk>", "<UNK>", "[unk]", "<SPOKEN_NOISE>")  # the documented unknown-word symbols, in order
ARPA_WORDS = ["a", "b", "c", "é", "x\\y", "-1", "<unk>", "<UNK>", "[unk]"]  # "-1" is a word, "x\y" has a backslash
COUNT_LINE = re.compile(r"ngram\s+(\d+)\s*=\s*(\d+)")


class ArpaReading(NamedTuple):
    """What a text means by the format: ``error_line`` (None: the error names no line) when it is
    malformed, else its unigrams in file order and ``entries``: n-gram words -> (log10 p, log10 bo)."""

    valid: bool
    error_line: int | None = None
    order: int = 0
    counts: tuple[int, ...] = ()
    unigrams: tuple[str, ...] = ()
    entries: dict[tuple[str, ...], tuple[float, float]] = {}


def reference_arpa(text: str) -> ArpaReading:
    """An independent reading of ARPA text, line by line (the format of lm/ngram/arpa.py); the
    first problem in file order is the one reported. Numbers are Python floats (``-inf`` a valid
    log-probability; ``nan``, ``+inf`` and infinite back-offs are not)."""
    def error(line: int | None) -> ArpaReading:
        return ArpaReading(False, line)

    lines = text.split("\n")
    if lines[-1] == "":  # the lines of a file holding ``text``: a final newline ends the last one
        lines.pop()
    data = next((i for i, line in enumerate(lines) if line.strip() == "\\data\\"), None)
    if data is None:
        return error(None)
    rest = iter(list(enumerate(lines, 1))[data + 1:])

    def next_nonblank() -> tuple[int, str] | None:
        return next(((number, line.strip()) for number, line in rest if line.strip()), None)

    counts: list[int] = []
    while (pending := next_nonblank()) is not None and not pending[1].startswith("\\"):
        match = COUNT_LINE.fullmatch(pending[1])
        if match is None or int(match[1]) != len(counts) + 1:
            return error(pending[0])
        counts.append(int(match[2]))
    if not counts:
        return error(pending[0] if pending else len(lines) + 1)
    order, unigrams, entries = len(counts), {}, {}
    for n in range(1, order + 1):
        header = pending if pending is not None else next_nonblank()
        if header is None:
            return error(None)
        if header[1] != f"\\{n}-grams:":
            return error(header[0])
        pending, found = None, 0
        for number, line in rest:
            fields = line.split()
            if not fields:
                continue
            if fields[0].startswith("\\"):
                pending = (number, line.strip())
                break
            if len(fields) not in (n + 1, n + 2 if n < order else n + 1):
                return error(number)
            try:
                logprob, backoff = float(fields[0]), float(fields[n + 1]) if len(fields) == n + 2 else 0.0
            except ValueError:
                return error(number)
            gram = tuple(fields[1:n + 1])
            if n > 1 and not all(w in unigrams for w in gram):
                return error(number)
            if math.isnan(logprob) or logprob == math.inf or not math.isfinite(backoff) or gram in entries:
                return error(number)
            entries[gram] = (logprob, backoff)
            if n == 1:
                unigrams[gram[0]] = None
            found += 1
        if found != counts[n - 1]:
            return error(header[0])
    end = pending if pending is not None else next_nonblank()
    if end is None:
        return error(None)
    if end[1] != "\\end\\":
        return error(end[0])
    if "</s>" not in unigrams:
        return error(None)
    return ArpaReading(True, None, order, tuple(counts), tuple(unigrams), entries)


def unk_of(unigrams) -> str | None:
    """The unknown-word symbol of a file's unigrams (None: the file has none)."""
    return next((u for u in UNK_PREFERENCE if u in unigrams), None)


def model_words(reading: ArpaReading) -> list[str]:
    """The model's words as documented: the unigrams in file order, then <s> and <unk> if absent."""
    return [*reading.unigrams, *(w for w in ("<s>", unk_of(reading.unigrams) or "<unk>") if w not in reading.unigrams)]


def assert_model_is(model: NgramModel, reading: ArpaReading) -> None:
    """The model holds exactly the file's n-grams, log10 numbers times ln 10 (a back-off of 0 is none)."""
    assert list(model.words) == model_words(reading)
    assert (model.order, model.counts) == (reading.order, reading.counts)
    words = model.words
    got = {tuple(words[i] for i in context) + (words[w],): p
           for context, row in model.logprobs.items() for w, p in row.items()}
    assert got == {gram: p * LN10 for gram, (p, _) in reading.entries.items()}
    assert {tuple(words[i] for i in gram): b for gram, b in model.backoffs.items()} == {
        gram: b * LN10 for gram, (_, b) in reading.entries.items() if b != 0}


def expected_logprob(reading: ArpaReading, history: list[str], word: str) -> float:
    """ln P(word | history) by the back-off rule, from the file's log10 numbers."""
    unk = unk_of(reading.unigrams)

    def token(w: str) -> str | None:  # None: an unknown word of a file without <unk> (matches nothing)
        return w if w in reading.unigrams or w == "<s>" else unk

    floor = -99.0 * LN10
    target = token(word)
    if word == "<s>" or target is None:
        return floor
    keep = reading.order - 1
    context = [token(w) for w in history][max(0, len(history) - keep):] if keep else []
    entries, total = reading.entries, 0.0
    while (*context, target) not in entries:  # the unigram of a file word is always listed
        total += entries.get(tuple(context), (0.0, 0.0))[1] * LN10
        context = context[1:]
    return total + entries[(*context, target)][0] * LN10


NUMBER_STYLES = (lambda x: f"{x:.3f}", repr, lambda x: f"{x:.6e}", lambda x: f"{x:g}")  # all read back as x
SEPARATORS = (" ", "\t", "  ", " \t")


def log10_number(rng: random.Random, backoff: bool) -> tuple[str, float] | None:
    """(text, value) of a random log10 probability (-99 and -inf among them) or back-off weight
    (None: no back-off field), thousandths written in one of several ways."""
    roll = rng.random()
    if backoff and roll < 0.3:
        return None
    if roll < 0.4:
        return rng.choice([("0", 0.0)] if backoff else [("-99", -99.0), ("-inf", -math.inf)])
    value = rng.randint(-3000, 2000) / 1000 if backoff else rng.randint(-6000, 0) / 1000
    return rng.choice(NUMBER_STYLES)(value), value


class ArpaFile(NamedTuple):
    """A generated ARPA file: its lines, what they mean, and where each part is."""

    lines: list[str]
    reading: ArpaReading
    entry_rows: dict[int, tuple[int, tuple[str, ...], bool]]  # line index -> (order, gram, has a back-off)
    count_rows: dict[int, int]  # order -> line index of its 'ngram N=COUNT'
    header_rows: dict[int, int]  # order -> line index of \n-grams:
    section_ends: dict[int, int]  # order -> line index of the line after the section


@st.composite
def arpa_files(draw) -> ArpaFile:
    """A valid ARPA model of order 1..4 over a few words (some unknown-word symbols, odd words),
    with <s> or not, random log10 probabilities (-99 and -inf among them) and back-offs, n-grams in
    any order within a section, any blanks, text before \\data\\ and after \\end\\."""
    order = draw(st.integers(1, 4))
    vocabulary = draw(st.lists(st.sampled_from(ARPA_WORDS), unique=True, max_size=5))
    unigrams = [*vocabulary, "</s>", *(["<s>"] if draw(st.booleans()) else [])]
    levels = [[(w,) for w in unigrams]] + [draw(st.lists(st.tuples(*[st.sampled_from(unigrams)] * n), unique=True,
                                                         max_size=6)) for n in range(2, order + 1)]
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))  # numbers and layout
    lines = rng.sample(["written by a test", "", "ngram 1=99", "\\1-grams:", " \\data"], rng.randint(0, 3))
    lines.append(rng.choice(["\\data\\", " \\data\\\t"]))
    count_rows = {}
    for n, grams in enumerate(levels, 1):
        count_rows[n] = len(lines)
        lines.append(rng.choice([f"ngram {n}={len(grams)}", f"ngram  {n} = {len(grams)}", f"ngram {n}= {len(grams)} "]))
    entries, entry_rows, header_rows, section_ends = {}, {}, {}, {}
    for n, grams in enumerate(levels, 1):
        lines.append(rng.choice(["", "  "]))
        header_rows[n] = len(lines)
        lines.append(f"\\{n}-grams:")
        for gram in rng.sample(grams, len(grams)):
            (p_text, p), bo = log10_number(rng, False), (log10_number(rng, True) if n < order else None)
            if rng.random() < 0.15:
                lines.append(rng.choice(["", " ", "\t"]))
            first, inner, last = (rng.choice(SEPARATORS) for _ in range(3))
            entry_rows[len(lines)] = (n, gram, bo is not None)
            blank = rng.choice(["", "", " ", "\t"])
            lines.append(first.join([p_text, inner.join(gram)]) + (last + bo[0] if bo else "") + blank)
            entries[gram] = (p, bo[1] if bo else 0.0)
        section_ends[n] = len(lines)
    lines += ["", "\\end\\"] + rng.sample(["", "junk after the end", "\\1-grams:"], rng.randint(0, 2))
    file_order = tuple(gram[0] for gram in entries if len(gram) == 1)  # the unigrams as written
    reading = ArpaReading(True, None, order, tuple(len(g) for g in levels), file_order, entries)
    return ArpaFile(lines, reading, entry_rows, count_rows, header_rows, section_ends)


def query_rows(reading: ArpaReading, extra: list[list[str]]) -> tuple[list[list[str]], list[str]]:
    """(history, word) pairs: every listed context and unigram history, ``extra`` histories, and
    every word (plus <s>, an unknown word and <unk>) after each."""
    histories = [[], *([w] for w in reading.unigrams), *(list(g[:-1]) for g in reading.entries if len(g) > 1), *extra]
    targets = [*reading.unigrams, "<s>", "zebra", "<unk>"]
    pairs = [(h, w) for h in histories for w in targets]
    return [h for h, _ in pairs], [w for _, w in pairs]


def assert_scores(scorer, histories: list[list[str]], words: list[str], expected: list[float],
                  tolerance: float) -> None:
    """The scorer's ln P(words[j] | histories[j]) are ``expected`` (within ``tolerance`` times the
    largest magnitude of the file's numbers, about 230; infinities equal)."""
    width = max(1, max(map(len, histories)))
    ids = scorer.word_ids([w for h in histories for w in h]).tolist()
    rows, at = [], 0
    for history in histories:
        rows.append([0] * (width - len(history)) + ids[at:at + len(history)])
        at += len(history)
    got = scorer.score(torch.tensor(rows), torch.tensor([len(h) for h in histories]), scorer.word_ids(words),
                       torch.arange(len(words)))
    want = torch.tensor(expected, dtype=torch.float64)
    close = (got == want) | ((got - want).abs() <= tolerance * 230)
    bad = (~close).nonzero().flatten().tolist()
    assert not bad, [(histories[j], words[j], float(got[j]), expected[j]) for j in bad[:5]]


@FUZZ
@given(arpa_files(), st.sampled_from(["text", "bytes", "gzip"]), st.sampled_from(["\n", "\r\n"]),
       st.lists(st.lists(st.sampled_from(["a", "b", "<s>", "zebra", "</s>", "<unk>", "-1"]), max_size=4), max_size=4))
def test_fuzz_valid_files_read_as_the_format_defines_them(arpa, kind, newline, extra_histories):
    text = newline.join(arpa.lines)
    data = text.encode() if kind == "bytes" else gzip.compress(text.encode()) if kind == "gzip" else text
    model = read_arpa(data, source="fuzz.arpa")
    assert_model_is(model, arpa.reading)
    histories, words = query_rows(arpa.reading, extra_histories)
    expected = [expected_logprob(arpa.reading, h, w) for h, w in zip(histories, words)]
    assert_scores(NgramScorer(model), histories, words, expected, 1e-15)
    store = arpa_store(text, source="fuzz.arpa")  # float32 numbers: the scorer of --model LM.arpa
    assert_scores(StoreScorer(store), histories, words, expected, 1e-6)  # float32: 6e-8 relative


BAD_NUMBERS = ["x", "1..2", "--1", "0x1f", "nan", "-nan", "inf", "+inf", "1e999", "1,5"]


@st.composite
def broken_arpa_files(draw) -> tuple[str | bytes, int, str]:
    """(a valid file with one line broken, the 1-based number of that line, a phrase of the
    message). The broken line is an n-gram (a number, a word, the number of fields, a repeat, a
    byte that is not UTF-8), a section header, or the count of the section's order."""
    pick = draw(st.integers(0, 2**10))  # drawn first: hypothesis shrinks the last draws towards 0 most
    arpa = draw(arpa_files())
    lines = list(arpa.lines)
    orders = sorted({n for n, _, _ in arpa.entry_rows.values()})
    at_order = orders[pick // 16 % len(orders)]  # each order about as often as the others
    row = draw(st.sampled_from([i for i, (n, _, _) in sorted(arpa.entry_rows.items()) if n == at_order]))
    n, gram, has_backoff = arpa.entry_rows[row]
    fields = lines[row].split()
    highest = n == arpa.reading.order
    kinds = ["logprob", "fields", "twice", "count", "header", "utf8"] + ([] if highest else ["backoff"]) + (
        ["word"] if n > 1 else [])
    kind = kinds[pick % len(kinds)]
    if kind == "logprob":
        fields[0] = draw(st.sampled_from(BAD_NUMBERS))
        phrase = "not finite" if fields[0] in ("nan", "-nan", "inf", "+inf", "1e999") else "not a number"
    elif kind == "backoff":
        fields[n + 1:] = [draw(st.sampled_from(BAD_NUMBERS + ["-inf"]))]
        phrase = "not finite" if fields[n + 1] in ("nan", "-nan", "inf", "+inf", "-inf", "1e999") else "not a number"
    elif kind == "word":
        fields[draw(st.integers(1, n))] = "zebra"
        phrase = "word 'zebra' is not among the unigrams"
    elif kind == "fields":
        extra = draw(st.sampled_from(["drop", "add"]))
        fields = fields[:n] if extra == "drop" else fields + ["-0.5"] * (1 if highest else 3 - has_backoff)
        phrase = "expected log10 prob and"
    elif kind == "twice":  # the same n-gram again, later in its section: the later line is named
        at = draw(st.integers(row + 1, arpa.section_ends[n]))
        lines.insert(at, f"{draw(st.sampled_from(['-0.5', '-inf', '-99', '0']))} {' '.join(gram)}")
        text = "\n".join(lines)
        return text, at + 1, f"{'unigram' if n == 1 else f'{n}-gram'} {' '.join(gram)!r} is listed twice"
    elif kind == "count":  # the header's count of order n: named at the section's header line
        lines[arpa.count_rows[n]] = f"ngram {n}={arpa.reading.counts[n - 1] + draw(st.sampled_from([1, 2, 7]))}"
        return "\n".join(lines), arpa.header_rows[n] + 1, "the header declares"
    elif kind == "header":
        row = arpa.header_rows[n]
        lines[row] = draw(st.sampled_from([f"\\{n}-gram:", f"\\{n + 1}-grams:", f"\\{n}-grams: x", "\\end\\"]))
        return "\n".join(lines), row + 1, f"expected \\{n}-grams:"
    else:  # a byte that is not UTF-8 inside an n-gram line of the file's bytes
        data = "\n".join(lines).encode()
        start = len("\n".join(lines[:row]).encode()) + (1 if row else 0)
        at = start + draw(st.integers(0, len(lines[row].encode())))
        return data[:at] + b"\xff" + data[at:], row + 1, "not UTF-8"
    lines[row] = " ".join(fields)
    return "\n".join(lines), row + 1, phrase


@FUZZ
@given(broken_arpa_files())
def test_fuzz_a_broken_line_is_named(case):
    data, line, phrase = case
    with pytest.raises(ArpaFormatError) as info:
        read_arpa(data, source="fuzz.arpa")
    message = str(info.value)
    assert message.startswith(f"fuzz.arpa:{line}: ") and phrase in message, (line, phrase, message)


def check_against_reference(text: str) -> bool:
    """The reader and :func:`reference_arpa` agree: the same model, or an error naming the source
    and the same line (none where the reference names none). Returns whether the text was valid."""
    expected = reference_arpa(text)
    try:
        model = parse_arpa(text, source="fuzz.arpa")
    except ArpaFormatError as err:
        where = re.match(r"fuzz\.arpa(?::(\d+))?: ", str(err))
        assert where is not None, str(err)
        assert not expected.valid, f"the reference reads it, the reader says {err}"
        assert (int(where[1]) if where[1] else None) == expected.error_line, (str(err), expected.error_line)
        return False
    assert expected.valid, f"the reader reads it, the reference names line {expected.error_line}"
    assert_model_is(model, expected)
    return True


TOKENS = ["<s>", "</s>", "a", "b", "<unk>", "-0.5", "x", "\\data\\", "\\2-grams:", "ngram", "1=6", "nan", "", "\\end\\",
          "-inf", "1=2", "\\1-grams:", "ngram 2=1"]


@FUZZ
@given(st.one_of(st.just(HAND), arpa_files().map(lambda arpa: "\n".join(arpa.lines))),
       st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.sampled_from(TOKENS)),
                min_size=1, max_size=3), st.sampled_from([" ", "\t"]))
def test_fuzz_mutations_of_a_valid_file(text, mutations, separator):
    check_against_reference(mutate_lines(text.replace("\t", separator), mutations, separator))


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(HAND_LINES), st.lists(st.sampled_from(TOKENS), max_size=5).map(" ".join)),
                max_size=30))
def test_fuzz_random_lines(lines):
    check_against_reference("\n".join(["\\data\\", *lines]))


@FUZZ
@given(st.one_of(st.text(max_size=200), st.text(alphabet="\\datngrm=123 -.5ab</>\n\t", max_size=200)),
       st.sampled_from(["", "\\data\\\nngram 1=1\n"]))
def test_fuzz_arbitrary_text(text, prefix):
    check_against_reference(prefix + text + "\n")


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
        kn, vocab, encoded = _kn(4)
        kn_arpa(tmp_path / "kn4.arpa", encoded, vocab, 4)
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


@pytest.mark.parametrize("space", ["\u00a0", "\u3000", "\u2009"])
def test_a_unicode_space_is_part_of_a_word_as_in_the_lattice_readers(space):
    """ARPA fields are split at ASCII blanks only (SRILM, KenLM, and this project's Kaldi and
    OpenFst readers): a word holding a no-break or other Unicode space is one word."""
    word = f"le{space}chat"
    text = f"\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-1.0\t{word}\t-0.25\n-0.5\t</s>\n-0.75\t<s>\t-0.5\n\n" \
           f"\\2-grams:\n-0.3\t<s> {word}\n\n\\end\\\n"
    store = arpa_store(text, source="space.arpa")
    assert word in store.words and len(store.words) == 4  # + <unk>
    model = parse_arpa(text, source="space.arpa")
    assert word in model.words
    broken = text.replace(f"-0.3\t<s> {word}", f"-0.3\t<s> {word} extra")
    with pytest.raises(ArpaFormatError, match=r"space.arpa:11: expected log10 prob and 2 words, got 4 fields"):
        arpa_store(broken, source="space.arpa")
