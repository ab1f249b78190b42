"""An acausal window model as a rescoring feature: every returned hypothesis's ``scores[name]``
is exactly ``afp score`` of its words with that model (right context and ``</s>`` included), on
random lattices and n-best lists, beside the causal LM whose scores it leaves unchanged."""

from __future__ import annotations

import pytest

from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import load_checkpoint
from lm.scorer import LMScorer, WindowScorer, score_sentences
from tests.factories import require_shared, replacing_options, SHARED_DATA, WORDS, espnet_subset, random_lattice, saved_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("acausal")
    causal = LMScorer(load_checkpoint(saved_model(root / "causal", cell="gru", rho=2)), precision="fp32")
    windows = {k: WindowScorer(load_checkpoint(saved_model(root / f"window{k}", cell="gru", rho=r, future=k, seed=k)),
                               precision="fp32")
               for r, k in ((2, 1), (1, 3))}
    return causal, windows


def check_exact(results, causal, features) -> None:
    for result in results:
        assert result.nbest
        for hyp in result.nbest:
            for name, feature in features.items():
                expected = float(score_sentences(feature, [hyp.words])[0].sum())
                assert hyp.scores[name] == pytest.approx(expected, abs=1e-3), (name, hyp.words)
            assert hyp.lm_logprob == pytest.approx(float(score_sentences(causal, [hyp.words])[0].sum()), abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
def test_every_hypothesis_of_a_lattice_has_its_exact_acausal_score(models, seed):
    causal, windows = models
    lattice = random_lattice(seed, num_states=7, extra_arcs=6, symbols=("<eps>", *WORDS[:6], "!SIL", "zork"))
    features = {"acausal": windows[1], "wide": windows[3]}
    options = replacing_options(nbest=40, score_weights=(("acausal", 0.5), ("wide", 0.25)), old_lm_weight=1.0)
    results = rescore(lattice, causal, options, features=features)
    check_exact(results, causal, features)
    assert results[0].stats["future"] == 3 and results[0].stats["acausal_windows"] > 0
    plain = rescore(lattice, causal, replacing_options(nbest=40, old_lm_weight=1.0))
    assert plain[0].stats["expanded_arcs"] <= results[0].stats["expanded_arcs"]


def test_an_nbest_list_and_the_first_pass_without_the_feature(models):
    causal, windows = models
    hyps = (("the", "cat", "sat"), ("the", "cat"), ("a", "cat", "sat", "down"), ("the", "dog", "sat"), ())
    nbest = NBestList("u", tuple(NBestHypothesis(h, {"decoder": -1.0 - i, "lm": -5.0 - i}) for i, h in enumerate(hyps)))
    features = {"acausal": windows[1]}
    options = replacing_options(nbest=10, score_weights=(("acausal", 3.0), ("decoder", 1.0)), old_lm_weight=1.0)
    results = rescore(nbest_to_lattice(nbest), causal, options, features=features)
    check_exact(results, causal, features)
    assert len(results[0].nbest) == len(hyps)
    assert results[0].first_pass.words == list(hyps[0])  # the recogniser's own 1-best, whatever the feature says


def test_a_feature_may_not_take_the_name_of_a_score(models):
    causal, windows = models
    nbest = NBestList("u", (NBestHypothesis(("the", "cat"), {"decoder": -1.0}),))
    with pytest.raises(ValueError, match="feature 'decoder' has the name of one of its scores"):
        rescore(nbest_to_lattice(nbest), causal, replacing_options(), features={"decoder": windows[1]})


def test_every_door_adds_the_same_feature(tmp_path, capsys):
    """``afp rescore --feature`` (plain and --workers 2), ``POST /v1/rescore`` on a server with
    ``AFP_FEATURES``, ``afp.Model.rescore(features=)`` give the same words and feature scores;
    a request naming a feature the server lacks is a 422; the tuner tunes the feature's weight."""
    import json

    import afp
    from afp.tune import Tuner, joint_tune
    from lattices.formats import read_lattice_file
    from service.cli import main
    from tests.service.test_app import client_for

    causal = saved_model(tmp_path / "causal", cell="gru", rho=2)
    window = saved_model(tmp_path / "window", cell="gru", rho=2, future=2, seed=7)
    text = "u1\n0 1 the 1,10,\n0 1 a 1.5,9,\n1 2 cat 0.5,8,\n1 2 dog 0.5,8.2,\n2 3 sat 1,20,\n3\n\n" \
           "u2\n0 1 big 1,10,\n1 2 dog 2,11,\n1 2 cat 1.5,11.5,\n2 3 ran 1,45,\n3\n\n"
    lattices = tmp_path / "lats.txt"
    lattices.write_text(text)
    flags = ["--feature", f"acausal={window}", "--score-weights", "acausal=2", "--lm-weight", "0.5",
             "--old-lm-weight", "1"]

    def answers(rows):
        return [(r["key"], r["best"]["words"], round(r["best"]["scores"]["acausal"], 4), round(r["best"]["score"], 4))
                for r in rows]

    runs = []
    for extra in ([], ["--workers", "2"]):
        assert main(["rescore", "--model", str(causal), "--json", *flags, *extra, str(lattices)]) == 0
        runs.append(answers([json.loads(line) for line in capsys.readouterr().out.splitlines()]))
    with client_for(causal, features=f"acausal={window}") as client:
        body = {"lattice": text, "score_weights": {"acausal": 2}, "lm_weight": 0.5, "old_lm_weight": 1}
        r = client.post("/v1/rescore", json=body)
        assert r.status_code == 200, r.text
        runs.append(answers(r.json()["results"]))
        assert client.get("/v1/models").json()["models"][0]["features"]["acausal"]["future"] == 2
        bad = client.post("/v1/rescore", json={**body, "features": ["nope"]})
        assert bad.status_code == 422 and "no feature named 'nope'" in bad.text
        none = client.post("/v1/rescore", json={**body, "features": [], "score_weights": {}})
        assert "acausal" not in none.json()["results"][0]["best"]["scores"]
    model = afp.load_model(causal)
    runs.append(answers([res[0].to_json() for res in model.rescore(
        str(lattices), features={"acausal": str(window)}, score_weights={"acausal": 2}, lm_weight=0.5,
        old_lm_weight=1)]))
    assert all(run == runs[0] for run in runs[1:]), runs
    tuner = Tuner(model.scorer, replacing_options(), {"u1": ["the", "cat", "sat"], "u2": ["big", "dog", "ran"]},
                  features={"acausal": WindowScorer(load_checkpoint(window), precision="fp32")})
    tuner.add(read_lattice_file(lattices, "kaldi"))
    report = joint_tune(tuner, restarts=1, folds=1)
    assert "score:acausal" in report["best"] and report["start"]["point"]["score:acausal"] == 0.0


AMI = SHARED_DATA / "lattices" / "ami-htk"
ESPNET = SHARED_DATA / "nbest" / "librispeech-espnet" / "dev_clean"


def test_real_lattices_and_lists_get_their_exact_acausal_scores(tmp_path, capsys):
    """A real AMI lattice and 15 real ESPnet lists rescored with ``--feature``: every returned
    hypothesis's ``scores.acausal`` equals ``afp score`` of its words with the window model (whose
    vocabulary is the data's own, from a few steps of training on the lists' text)."""
    require_shared(AMI, ESPNET)
    import json

    from lattices.formats import read_lattice_file
    from service.cli import main

    lists = espnet_subset(ESPNET, tmp_path / "lists", 15)
    ami = sorted(AMI.glob("*.lat.gz"))[0]
    words = {w for lat in read_lattice_file(ami) for w in lat.symbols}
    text = tmp_path / "train.txt"
    lines = [line.split(maxsplit=1)[1] for line in (ESPNET / "1best_recog" / "text").read_text().splitlines()[:300]
             if len(line.split()) > 1]
    text.write_text("\n".join([*lines, " ".join(sorted(words))]) + "\n")  # the lattice's words in the vocabulary
    window, causal = tmp_path / "window", tmp_path / "causal"
    for out, extra in ((window, ["--future", "2"]), (causal, [])):
        assert main(["train", "--train", str(text), "--out", str(out), "--hidden", "16", "--rho", "2",
                     "--max-steps", "10", "--batch-size", "16", *extra]) == 0
    capsys.readouterr()
    for source, fmt in ((lists, "espnet-nbest"), (ami, "htk")):
        assert main(["rescore", "--model", str(causal), "--feature", f"acausal={window}", "--format", fmt,
                     "--score-weights", "acausal=0.5", "--nbest", "5", "--json", str(source)]) == 0
        rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        hyps = [h for r in rows for h in r["nbest"]]
        assert len(hyps) > len(rows)
        sentences = tmp_path / "hyps.txt"
        sentences.write_text("".join(" ".join(h["words"]) + "\n" for h in hyps))
        assert main(["score", "--model", str(window), "--text", str(sentences), "--json"]) == 0
        expected = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
        assert [h["scores"]["acausal"] for h in hyps] == pytest.approx(expected, abs=1e-3)
        assert rows[0]["future"] == 2 and rows[0]["expanded_arcs"] >= rows[0]["lattice_arcs"]
