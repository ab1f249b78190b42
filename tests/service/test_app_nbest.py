"""N-best lists over HTTP: the JSON form, named score weights, first pass, MBR, clear 422s."""

from __future__ import annotations

import pytest

from lm.checkpoint import load_checkpoint
from lm.corpus import encode
from lm.evaluate import score_corpus

NBEST = {"key": "utt1", "hypotheses": [
    {"words": "the cat sat", "scores": {"decoder": -1.0, "ctc": -2.0, "lm": -9.0}},
    {"words": ["a", "cat", "sat", "zebra"], "scores": {"decoder": -0.5, "ctc": -1.0, "lm": -12.0}},
    {"words": "the dog ran", "scores": {"decoder": -3.0, "ctc": -2.5, "lm": -8.0}},
]}


@pytest.mark.parametrize("fmt", ["nbest-json", "auto"])
def test_nbest_json_is_rescored_exactly(client, model_dir, fmt):
    body = {"format": fmt, "lattice": NBEST, "nbest": 3, "lm_weight": 0.5, "old_lm_weight": 0.25,
            "score_weights": {"decoder": 0.6, "ctc": 0.4}, "word_penalty": 1.0, "unk_penalty": -4.0}
    response = client.post("/v1/rescore", json=body)
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    loaded = load_checkpoint(model_dir)
    for hyp in result["nbest"]:
        source = next(h for h in NBEST["hypotheses"] if h["scores"] == hyp["scores"])
        lm = float(score_corpus(loaded.model, encode([hyp["words"]], loaded.vocab)).token_logprobs[0].sum())
        s = source["scores"]
        expected = (0.6 * s["decoder"] + 0.4 * s["ctc"] + 0.25 * s["lm"] + 0.5 * (lm - 4.0 * hyp["unk"])
                    + 1.0 * len(hyp["words"]))
        assert hyp["score"] == pytest.approx(expected, abs=1e-4)
        assert hyp["lm_logprob"] == pytest.approx(lm, abs=1e-4)
    assert result["first_pass"]["words"] == ["the", "cat", "sat"]
    assert result["changed"] == (result["best"]["words"] != ["the", "cat", "sat"])
    assert result["oov_words"] == ["zebra"] and result["score_weights"] == {"decoder": 0.6, "ctc": 0.4}


def test_a_list_of_nbest_lists_and_mbr(client):
    second = {**NBEST, "key": "utt2"}
    response = client.post("/v1/rescore", json={"lattice": [NBEST, second], "decode": "mbr", "mbr_scale": 0.5})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["key"] for r in results] == ["utt1", "utt2"] and all(r["decode"] == "mbr" for r in results)


@pytest.mark.parametrize("body, field, text", [
    ({"lattice": NBEST, "score_weights": {"acustic": 1.0}}, "score_weights", "no score named acustic"),
    ({"lattice": NBEST, "old_lm_score": "graph"}, "old_lm_score", "graph"),
    ({"lattice": {**NBEST, "hypotheses": [{"words": "a", "scores": {"lm": "x"}}]}}, "hypotheses[0].scores.lm",
     "number"),
    ({"lattice": NBEST, "decode": "map"}, "decode", ""),
    ({"format": "nbest-json", "lattice": {"key": "u", "hypotheses": []}}, None, "hypothes"),
])
def test_bad_nbest_requests_are_422_naming_the_field(client, body, field, text):
    response = client.post("/v1/rescore", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert text in error["message"]
    if field:
        assert field in (error.get("field") or "") or field in error["message"]
