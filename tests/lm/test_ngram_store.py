"""The compact numpy n-gram store (``lm.ngram.store``) gives the dict-based reader's numbers."""

from __future__ import annotations

import gzip
import math
import random
import re

import numpy as np

import pytest

from lm.ngram.arpa import LOG10, ArpaFormatError
from lm.ngram.store import StoreScorer, load_store, read_arpa_store
from lm.scorer import sentence_pairs
from tests.factories import kn_arpa
from tests.lm.ngram_reference import read_arpa
from tests.lm.test_ngram import HAND, HAND_CASES, HAND_LINES, MALFORMED, _kn, _line, _replace


def small_arpa(text: str) -> dict[tuple[str, ...], tuple[float, float]]:
    """A second ARPA reader, written here for small files and sharing nothing with lm.ngram:
    word tuple -> (log10 p, log10 back-off weight, 0 when the line has none)."""
    grams: dict[tuple[str, ...], tuple[float, float]] = {}
    section = 0
    for line in text.splitlines():
        fields = line.split()
        if re.fullmatch(r"\\\d+-grams:", line.strip()):
            section = int(line.strip()[1:].split("-")[0])
        elif line.strip() == "\\end\\":
            break
        elif section and fields:
            gram = tuple(fields[1:1 + section])
            grams[gram] = (float(fields[0]), float(fields[1 + section]) if len(fields) > 1 + section else 0.0)
    return grams


def small_logprob(grams: dict[tuple[str, ...], tuple[float, float]], history: list[str], word: str) -> float:
    """Natural-log back-off probability by the definition: the listed n-gram's log10 p, else the
    context's log10 back-off weight plus the look-up one word shorter; ``<s>`` and a word that is
    no unigram of the file (an unknown word, ``<unk>`` included, when the file lacks ``<unk>``)
    get -99 in log10."""
    if word == "<s>" or (word,) not in grams:
        return -99 * LOG10
    order = max(len(g) for g in grams)
    h = tuple(history[max(0, len(history) - order + 1):]) if order > 1 else ()
    total = 0.0
    while (*h, word) not in grams:
        total += grams.get(h, (0.0, 0.0))[1]
        h = h[1:]
    return (total + grams[(*h, word)][0]) * LOG10


def same_scores(text: str, tmp_path, sentences, gz: bool = False) -> None:
    """The store read from ``text`` has the words, ids, known words and scores of the second reader."""
    path = tmp_path / ("model.arpa.gz" if gz else "model.arpa")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    grams = small_arpa(text)
    unigrams = [g[0] for g in grams if len(g) == 1]  # in file order
    words = [*unigrams, *(w for w in ("<s>", "<unk>") if w not in unigrams)]
    store = StoreScorer(read_arpa_store(path))
    assert list(store.store.words) == words and store.context_size == max(len(g) for g in grams) - 1
    assert store.store.counts == tuple(sum(len(g) == n for g in grams) for n in range(1, store.context_size + 2))
    ids = [[words.index(w) if w in unigrams else words.index("<unk>") for w in s] for s in sentences]
    assert [store.word_ids(s).tolist() for s in sentences] == ids
    flat = [w for s in sentences for w in s]
    assert store.known(flat).tolist() == [w in unigrams and w != "<unk>" for w in flat]
    tokens = [["<s>", *(words[i] for i in s), "</s>"] for s in ids]
    expected = [small_logprob(grams, t[:k], t[k]) for t in tokens for k in range(1, len(t))]
    for width in (store.context_size, 6):
        contexts, lengths, targets, target_context, _ = sentence_pairs(ids, store.bos_id, store.eos_id, width)
        got = store.score(contexts, lengths, targets, target_context)
        assert got.tolist() == pytest.approx(expected, abs=2e-5)  # float32 storage


def test_hand_written_trigram_with_and_without_unk(tmp_path):
    sentences = [["a", "b", "c"], ["zebra", "a"], [], ["c", "c", "b", "a", "<unk>"], ["<s>", "a"]]
    same_scores(HAND, tmp_path, sentences)
    without = "\n".join(line for line in HAND_LINES if "<unk>" not in line).replace("ngram 1=6", "ngram 1=5")
    same_scores(without, tmp_path, sentences, gz=True)
    # the hand-computed cases of tests/lm/test_ngram.py, from the store; without <unk> an unknown
    # target gets the floor, an unknown history word still backs off past it
    for text, unk in ((HAND, True), (without, False)):
        store, _ = _streamed(tmp_path, text, "hand.arpa")
        file_order = ("<s>", "</s>", "<unk>", "a", "b", "c")
        assert store.words == (file_order if unk else (*file_order[:2], *file_order[3:], "<unk>"))
        for history, word, log10p in HAND_CASES:
            h = np.array([[store.id(w) for w in history] or [0]])
            got = store.score(h, np.array([len(history)]), np.array([store.id(word)]))[0]
            want = log10p if unk or word != "zebra" else -99.0
            assert got == pytest.approx(want * LOG10, abs=1e-5), (history, word)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_kneser_ney_models_of_every_order(tmp_path, order):
    """A model written by afp ngram's estimator: the store reads what the second reader reads,
    scores the reference estimator's probabilities, and counts its n-grams."""
    kn, vocab, encoded = _kn(order)
    kn_arpa(tmp_path / "kn.arpa.gz", encoded, vocab, order)
    text = gzip.decompress((tmp_path / "kn.arpa.gz").read_bytes()).decode()
    rng = random.Random(order)
    words = [*vocab.words[3:], "zebra", "<unk>"]
    sentences = [[rng.choice(words) for _ in range(rng.randint(0, 12))] for _ in range(60)]
    same_scores(text, tmp_path, sentences)
    store = read_arpa_store(tmp_path / "kn.arpa.gz")
    predictable = [i for i, ok in enumerate(vocab.predictable_mask()) if ok]
    assert store.counts == (len(predictable) + 1, *(len(level.counts) for level in kn.orders[1:]))
    assert store.nbytes() < 20 * sum(store.counts)
    for sentence in encoded[:10]:
        for k in range(len(sentence) + 1):
            history = [vocab.bos_id, *sentence[:k]][-(order - 1):] if order > 1 else []
            h = np.array([[store.id(vocab.words[i]) for i in history] or [0]] * len(predictable))
            got = store.score(h, np.full(len(predictable), len(history)),
                              np.array([store.id(vocab.words[i]) for i in predictable]))
            want = [math.log(kn.prob([vocab.bos_id, *sentence[:k]], w)) for w in predictable]
            assert got.tolist() == pytest.approx(want, abs=2e-5)


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


def test_an_arpa_file_is_a_model_at_every_door(tmp_path, capsys):
    """``--model LM.arpa.gz`` for ppl, score, info, rescore, tune, the server and the Python API:
    every hypothesis's ``lm_logprob`` is ``afp score``'s of its words with the same file, and
    those are the reference reader's sentence log-probabilities."""
    import json

    import afp
    from tests.lm.ngram_reference import sentence_logprob
    from service.cli import main
    from tests.factories import patterned_sentences, write_text
    from tests.service.test_app import client_for

    text = write_text(tmp_path / "train.txt", patterned_sentences(300, seed=3))
    arpa = tmp_path / "lm.ngram.arpa.gz"
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(arpa)]) == 0
    lattices = tmp_path / "lats.txt"
    lattices.write_text("u1\n0 1 the 1,10,\n0 1 a 1.5,9,\n1 2 cat 0.5,8,\n1 2 zebra 0.5,8.2,\n2 3 sat 1,20,\n3\n\n"
                        "u2\n0 1 big 1,10,\n1 2 dog 2,11,\n1 2 cat 1.5,11.5,\n2 3 ran 1,45,\n3\n\n")
    capsys.readouterr()
    assert main(["rescore", "--model", str(arpa), "--json", "--nbest", "4", "--lm-weight", "1", str(lattices)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    hyps = [h for r in rows for h in r["nbest"]]
    sentences = write_text(tmp_path / "hyps.txt", [h["words"] for h in hyps])
    assert main(["score", "--model", str(arpa), "--text", str(sentences), "--json"]) == 0
    scored = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    assert [h["lm_logprob"] for h in hyps] == pytest.approx(scored, abs=1e-4)
    reference = read_arpa(arpa)
    assert scored == pytest.approx([sentence_logprob(reference, h["words"]) for h in hyps], abs=1e-4)
    assert main(["info", "--model", str(arpa), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["order"] == 3
    with client_for(arpa) as client:
        r = client.post("/v1/rescore", json={"lattice": lattices.read_text(), "nbest": 4, "lm_weight": 1})
        assert r.status_code == 200, r.text
        assert [h["lm_logprob"] for x in r.json()["results"] for h in x["nbest"]] == pytest.approx(scored, abs=1e-4)
        assert client.get("/v1/models").json()["models"][0]["name"] == "lm.ngram.arpa.gz"  # the file, as a directory's name
    model = afp.load_model(arpa)
    api = [h.lm_logprob for res in model.rescore(str(lattices), nbest=4, lm_weight=1) for h in res[0].nbest]
    assert api == pytest.approx(scored, abs=1e-4)


def test_an_ngram_model_directory_maps_the_same_model(tmp_path, capsys):
    """``afp ngram --store DIR`` writes the arrays; ``--model DIR`` (and ``--old-lm DIR``) load them
    without parsing, with the ARPA file's numbers."""
    import json

    from lm.ngram.store import load_store
    from service.cli import main
    from tests.factories import patterned_sentences, write_text

    text = write_text(tmp_path / "train.txt", patterned_sentences(200, seed=2))
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(tmp_path / "lm.ngram.arpa"),
                 "--store", str(tmp_path / "lm")]) == 0
    assert json.loads(capsys.readouterr().out)["store"] == str(tmp_path / "lm")
    mapped, parsed = load_store(tmp_path / "lm"), load_store(tmp_path / "lm.ngram.arpa")
    assert mapped.words == parsed.words and mapped.counts == parsed.counts
    assert all(np.array_equal(a, b) for a, b in zip(mapped.logprobs, parsed.logprobs))
    sentences = write_text(tmp_path / "s.txt", patterned_sentences(20, seed=3))
    outputs = []
    for model in ("lm", "lm.ngram.arpa"):
        assert main(["score", "--model", str(tmp_path / model), "--text", str(sentences), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


# ------------------------------------------------------------------- the one reader's checks
def _streamed(tmp_path, text: str, name: str = "bad.arpa"):
    """``read_arpa_store`` of ``text`` written to ``name`` (gzip-compressed when it ends in .gz)."""
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return read_arpa_store(path), path


@pytest.mark.parametrize("name", ["bad.arpa", "bad.arpa.gz"])
@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_the_streamed_file_reader_makes_every_check_at_the_same_line(tmp_path, name, text, message):
    """Every malformed input of read_arpa's tests is rejected by the file reader too, naming the
    file and the same line (text and file are read by the one parser)."""
    path = tmp_path / name
    with pytest.raises(ArpaFormatError, match=message.replace("<ARPA text>", re.escape(str(path)))) as caught:
        _streamed(tmp_path, text, name)
    assert str(caught.value).startswith(f"{path}:")


def _ends(text: str, line: str, extra: str) -> str:
    """HAND with ``extra`` lines right after ``line``."""
    return text.replace(line + "\n", line + "\n" + extra, 1)


NEW_CHECKS = [  # (text, line, message): each a check the store reader lacked or made without a line
    (_replace("-0.7\t</s>", "inf\t</s>"), _line("-0.7\t</s>"), r"not finite in the 1-gram '</s>': log10 p inf"),
    (_replace("-0.4\ta b\t-0.25", "1e999\ta b\t-0.25"), _line("-0.4\ta b\t-0.25"), "not finite in the 2-gram 'a b'"),
    (_replace("-0.5\ta\t-0.3", "-0.5\ta\t-inf"), _line("-0.5\ta\t-0.3"),
     "not finite in the 1-gram 'a'.* back-off -inf"),
    (_replace("-0.1\t<s> a b", "nan\t<s> a b"), _line("-0.1\t<s> a b"), "not finite in the 3-gram '<s> a b'"),
    (_replace("-0.3\tb </s>", "nan\tb zebra"), _line("-0.3\tb </s>"),
     "not finite in the 2-gram 'b zebra'"),  # the numbers are checked before the words
    (_replace("-0.05\ta b c", "-0.05\t<s> a b"), _line("-0.05\ta b c"), "3-gram '<s> a b' is listed twice"),
    (_replace("-1.0\tc", "-1.0\tb"), _line("-1.0\tc"), "unigram 'b' is listed twice"),
    # the first problem in file order wins, though repeats are found per section afterwards
    (_replace("-0.5\tb c", "-0.5\tb zebra").replace("-0.3\tb </s>", "-0.3\t<s> a"), _line("-0.3\tb </s>"),
     "2-gram '<s> a' is listed twice"),
    (_replace("-0.2\t<s> a\t-0.1", "-0.2\t<s> a\tnan").replace("-0.4\ta b\t-0.25", "-0.4\t<s> a"),
     _line("-0.2\t<s> a\t-0.1"), "not finite in the 2-gram '<s> a'"),
    (_ends(HAND, "-0.5\tb c", "-0.6\tc b\n"), _line("\\2-grams:"), "the header declares 4 2-grams, the section has 5"),
    (_ends(HAND, "-0.3\tb </s>", "\n\n"), None, None),  # blank lines inside a section: the same model
    (_ends(HAND.replace("ngram 2=4", "ngram 2=3"), "-0.3\tb </s>", "\n"), _line("\\2-grams:"),
     "declares 3 2-grams, the section has 4"),  # entries after a blank line still count
    (_replace("ngram 2=4", "ngram 2=4 and more"), _line("ngram 2=4"),
     "expected 'ngram N=COUNT', got 'ngram 2=4 and more'"),
    (_replace("ngram 3=2", "ngram 4=2"), _line("ngram 3=2"), "expected the count of order 3, got order 4"),
    (_replace("\\2-grams:", "\\2-grams: x"), _line("\\2-grams:"), r"expected \\2-grams:, got '\\\\2-grams: x'"),
    (_replace("\\end\\", "\\end\\ of it"), _line("\\end\\"), r"expected \\end\\, got '\\\\end\\\\ of it'"),
    (HAND.replace("\\end\\\n", "\n\n"), None, r"the file ends without \\end\\"),
]


@pytest.mark.parametrize(("text", "line", "message"), NEW_CHECKS)
def test_checks_name_the_file_and_line(tmp_path, text, line, message):
    if message is None:
        store, _ = _streamed(tmp_path, text, "ok.arpa")
        assert store.counts == (6, 4, 2)
        return
    path = tmp_path / "bad.arpa.gz"
    where = re.escape(str(path)) + ("" if line is None else f":{line}")
    with pytest.raises(ArpaFormatError, match=f"^{where}: .*{message}"):
        _streamed(tmp_path, text, path.name)


def test_a_repeated_ngram_is_found_with_wide_keys_too(tmp_path):
    """5-grams over 4,102 words need 65-bit keys (packed as byte strings): a repeat is found and
    named there too, and without it the file reads."""
    words = ["</s>", "<s>", *(f"w{i}" for i in range(4100))]
    grams = ["w1 w2 w3 w4 w5", "w4099 w2 w3 w4 w5", "w1 w2 w3 w4 w5"]
    head = ("\\data\\\n" + "".join(f"ngram {n}={c}\n" for n, c in enumerate([len(words), 0, 0, 0, 3], 1))
            + "\n\\1-grams:\n" + "".join(f"-1\t{w}\n" for w in words)
            + "\\2-grams:\n\\3-grams:\n\\4-grams:\n\\5-grams:\n")
    def text(grams: list[str]) -> str:
        return head + "".join(f"-0.5\t{g}\n" for g in grams) + "\\end\\\n"

    third = head.count("\n") + 3
    with pytest.raises(ArpaFormatError, match=rf"wide\.arpa:{third}: 5-gram 'w1 w2 w3 w4 w5' is listed twice"):
        _streamed(tmp_path, text(grams), "wide.arpa")
    store, _ = _streamed(tmp_path, text([*grams[:2], "w2 w2 w3 w4 w5"]), "wide.arpa")
    assert store.keys[4].dtype.kind == "V" and store.counts == (len(words), 0, 0, 0, 3)


def test_not_utf8_and_broken_gzip_name_the_file(tmp_path):
    bad = HAND.replace("-0.4\ta b", "-0.4\ta b\xe9").encode("latin-1")
    for name, data in (("latin.arpa", bad), ("latin.arpa.gz", gzip.compress(bad))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ArpaFormatError, match=rf"{name}:{_line('-0.4' + chr(9) + 'a b' + chr(9) + '-0.25')}: "
                                                  "not UTF-8 text"):
            read_arpa_store(tmp_path / name)
    whole = gzip.compress(HAND.encode())
    (tmp_path / "corrupt.gz").write_bytes(whole[:20] + bytes(40) + whole[60:])  # a zlib error, not an OSError
    with pytest.raises(ArpaFormatError, match=r"corrupt\.gz: broken gzip data"):
        read_arpa_store(tmp_path / "corrupt.gz")
    (tmp_path / "truncated.gz").write_bytes(whole[:-30])
    with pytest.raises(ArpaFormatError, match=r"truncated\.gz: broken gzip data"):
        read_arpa_store(tmp_path / "truncated.gz")


def test_plain_gzip_and_loose_files_read_the_same_store(tmp_path):
    """Plain and gzip files read the same store; a layout that differs only in blanks, line ends
    and text after ``\\end\\`` reads the same numbers; float64 keeps the file's numbers exactly;
    ``source`` names the file in errors."""
    def arrays(store):
        return store.words, [k.tolist() for k in store.keys], [p.tolist() for p in store.logprobs], \
            [b.tolist() for b in store.backoffs]

    loose = HAND.replace("ngram 2=4\n", "ngram 2=4\n\n").replace("\n", "\r\n") + "trailing words\n"
    stores = [_streamed(tmp_path, text, name)[0] for text, name in
              ((HAND, "hand.arpa"), (HAND, "hand.arpa.gz"), (loose, "loose.arpa"), (loose, "loose.arpa.gz"))]
    assert all(arrays(s) == arrays(stores[0]) for s in stores[1:])
    exact = read_arpa_store(tmp_path / "hand.arpa", dtype=np.float64)
    assert exact.logprobs[0].dtype == np.float64 and exact.logprobs[0][exact.id("a")] == -0.5 * LOG10
    assert stores[0].logprobs[0].dtype == np.float32
    zebra = tmp_path / "zebra.arpa"
    zebra.write_bytes(_replace("-0.4\ta b\t-0.25", "-0.4\ta zebra\t-0.25").encode())
    with pytest.raises(ArpaFormatError, match=r"^named:18: word 'zebra' is not among the unigrams"):
        read_arpa_store(zebra, source="named")


KALDI_UNK = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-1.0\t<s>\t-0.3
-0.5\tHELLO\t-0.2
-0.8\tWORLD
-0.9\t</s>
-1.5\t<UNK>

\\2-grams:
-0.2\t<s> HELLO
-0.1\tHELLO WORLD

\\end\\
"""


def test_a_kaldi_style_unk_symbol_scores_the_unknown_words(tmp_path):
    """An ARPA file whose unknown word is ``<UNK>`` (Kaldi recipes; ``<SPOKEN_NOISE>``,
    ``[unk]`` too) scores every unknown word as it, in the store, its model directory, the dict
    view and the array-built store alike; it is not a known word."""
    from lm.ngram.store import LoadedNgram, save_store

    path = tmp_path / "kaldi.arpa"
    path.write_text(KALDI_UNK)
    store = read_arpa_store(path)
    assert store.unk == "<UNK>" and store.has_unk and "<unk>" not in store.words
    assert store.id("ZEBRA") == store.id("<UNK>") and not store.is_known("<UNK>") and store.is_known("HELLO")
    h = np.array([[store.id("HELLO")]])
    expected = (-1.5 - 0.2) * LOG10  # back-off of HELLO, then <UNK>'s unigram
    assert store.score(h, np.ones(1, dtype=np.int64), np.array([store.id("ZEBRA")]))[0] == pytest.approx(expected)
    mapped = load_store(save_store(store, tmp_path / "dir"))
    assert mapped.unk == "<UNK>" and mapped.id("ZEBRA") == store.id("<UNK>")
    model = read_arpa(path)
    assert model.unk == "<UNK>" and model.logprob([model.id("HELLO")], model.id("ZEBRA")) == pytest.approx(expected)
    assert LoadedNgram(store=store, path=path).vocab.unk == "<UNK>"
