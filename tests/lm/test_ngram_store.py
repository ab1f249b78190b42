"""The compact numpy n-gram store (``lm.ngram_store``) gives the dict-based reader's numbers."""

from __future__ import annotations

import random

import numpy as np

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


def test_an_arpa_file_is_a_model_at_every_door(tmp_path, capsys):
    """``--model LM.arpa.gz`` for ppl, score, info, rescore, tune, the server and the Python API:
    every hypothesis's ``lm_logprob`` is ``afp score``'s of its words with the same file, and
    those are the reference reader's sentence log-probabilities."""
    import json

    import afp
    from lm.ngram import sentence_logprob
    from service.cli import main
    from tests.factories import patterned_sentences, write_text
    from tests.service.test_app import client_for

    text = write_text(tmp_path / "train.txt", patterned_sentences(300, seed=3))
    arpa = tmp_path / "lm.arpa.gz"
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
        assert client.get("/v1/models").json()["models"][0]["name"] == "lm.arpa.gz"  # the file, as a directory's name
    model = afp.load_model(arpa)
    api = [h.lm_logprob for res in model.rescore(str(lattices), nbest=4, lm_weight=1) for h in res[0].nbest]
    assert api == pytest.approx(scored, abs=1e-4)


def test_an_ngram_model_directory_maps_the_same_model(tmp_path, capsys):
    """``afp ngram --store DIR`` writes the arrays; ``--model DIR`` (and ``--old-lm DIR``) load them
    without parsing, with the ARPA file's numbers."""
    import json

    from lm.ngram_store import load_store
    from service.cli import main
    from tests.factories import patterned_sentences, write_text

    text = write_text(tmp_path / "train.txt", patterned_sentences(200, seed=2))
    assert main(["ngram", "--text", str(text), "--order", "3", "--out", str(tmp_path / "lm.arpa"),
                 "--store", str(tmp_path / "lm")]) == 0
    assert json.loads(capsys.readouterr().out)["store"] == str(tmp_path / "lm")
    mapped, parsed = load_store(tmp_path / "lm"), load_store(tmp_path / "lm.arpa")
    assert mapped.words == parsed.words and mapped.counts == parsed.counts
    assert all(np.array_equal(a, b) for a, b in zip(mapped.logprobs, parsed.logprobs))
    sentences = write_text(tmp_path / "s.txt", patterned_sentences(20, seed=3))
    outputs = []
    for model in ("lm", "lm.arpa"):
        assert main(["score", "--model", str(tmp_path / model), "--text", str(sentences), "--json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
