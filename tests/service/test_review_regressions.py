"""Regression tests for the review of the n-best / tune change: tune and rescore agree, no 500s."""

from __future__ import annotations

import pytest

from lattices.formats import read_lattices
from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.rescore import RescoreOptions, rescore
from afp.tune import Tuner
from tests.service.test_app import client_for
from tests.afp.test_tune import lm_scorer
from tests.factories import replacing_options, saved_model

SLF = """VERSION=1.0
UTTERANCE=h1
lmscale=2.0 wdpenalty=0.0
N=5 L=4
I=0 W=!NULL
I=1 W=the
I=2 W=a
I=3 W=cat
I=4 W=dog
J=0 S=0 E=1 a=-10 l=-2.5
J=1 S=1 E=3 a=-10 l=0
J=2 S=0 E=2 a=-12 l=-2
J=3 S=2 E=4 a=-12 l=0
"""


def nbest(rows, key="u"):
    return NBestList(key, tuple(NBestHypothesis(tuple(w.split()), {"lm": s}) for w, s in rows))


def test_tune_uses_the_lattice_header_like_rescore():
    (lattice,) = read_lattices(SLF, "htk")
    scorer = lm_scorer()
    point = {"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": 0.0, "unk_penalty": 0.0}
    (expected,) = rescore(lattice, scorer, replacing_options(lm_weights=(0.0,), old_lm_weight=1.0, word_penalty=0.0))
    tuner = Tuner(scorer, replacing_options(), {"h1": expected.best.words})
    tuner.add([lattice])
    assert tuner.choices([point])[0][0] == expected.best.words
    assert tuner.first_pass().errors == 0


def test_tune_mbr_weighs_the_same_hypotheses_as_rescore():
    lists = nbest([("the cat sat", -1.0), ("the cat sat", -1.1), ("a dog sat", -1.2), ("a dog ran", -1.3),
                   ("a dog", -1.4), ("a cat sat", -1.5)])
    scorer = lm_scorer()
    options = replacing_options(lm_weights=(0.0,), old_lm_weight=1.0, decode="mbr", mbr_nbest=2, mbr_scale=0.1)
    (expected,) = rescore(nbest_to_lattice(lists), scorer, options)
    tuner = Tuner(scorer, options, {"u": ["a", "dog", "sat"]}, mbr=True)
    tuner.add([nbest_to_lattice(lists)])
    point = {"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": 0.0, "unk_penalty": 0.0}
    assert tuner.choices([point], mbr=True)[0][0] == expected.best.words


def test_equal_scores_go_to_the_recognisers_rank():
    lists = nbest([("the cat", 0.0), ("a dog", 0.0), ("the dog", 0.0), ("a cat", 0.0)])
    scorer = lm_scorer()
    (result,) = rescore(nbest_to_lattice(lists), scorer, replacing_options(lm_weights=(0.0,), old_lm_weight=1.0,
                                                                        nbest=4))
    assert [h.words for h in result.nbest] == [["the", "cat"], ["a", "dog"], ["the", "dog"], ["a", "cat"]]
    assert [h.rank for h in result.nbest] == [1, 2, 3, 4]
    tuner = Tuner(scorer, replacing_options(), {"u": ["a", "dog"]})
    tuner.add([nbest_to_lattice(lists)])
    point = {"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": 0.0, "unk_penalty": 0.0}
    assert tuner.choices([point])[0][0] == ["the", "cat"]


def test_pruning_an_nbest_list_uses_its_scores_and_keeps_a_first_pass():
    lists = nbest([("the cat sat on", -1.0), ("a dog", -9.0), ("the cat", -20.0)])
    (result,) = rescore(nbest_to_lattice(lists), lm_scorer(),
                        replacing_options(prune_beam=1e-6, word_penalty=1.0, lm_weights=(0.0,), old_lm_weight=1.0))
    assert result.pruned["arcs_after"] < result.pruned["arcs_before"]
    assert result.best.words == ["the", "cat", "sat", "on"] == result.first_pass.words


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with client_for(saved_model(tmp_path_factory.mktemp("m") / "model", cell="gru", rho=2)) as c:
        yield c


def test_http_mbr_scale_and_nbest_lattice_output(client):
    body = {"lattice": {"key": "u", "hypotheses": [{"words": "the cat", "scores": {"lm": -1.0}}]}}
    bad = client.post("/v1/rescore", json={**body, "decode": "mbr", "mbr_scale": -1})
    assert bad.status_code == 422 and "mbr_scale" in bad.json()["error"]["message"]
    good = client.post("/v1/rescore", json={**body, "return_lattice": True})
    assert good.status_code == 200, good.text
    assert good.json()["results"][0]["lattice"]["key"] == "u"
