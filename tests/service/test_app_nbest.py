"""N-best lists over HTTP: the JSON form, named score weights, first pass, MBR, clear 422s."""

from __future__ import annotations

import pytest
import torch

from lm.checkpoint import load_checkpoint
from lm.corpus import encode
from lm.evaluate import score_corpus

NBEST = {"key": "utt1", "hypotheses": [
    {"words": "the cat sat", "scores": {"decoder": -1.0, "ctc": -2.0, "lm": -9.0}},
    {"words": ["a", "cat", "sat", "zebra"], "scores": {"decoder": -0.5, "ctc": -1.0, "lm": -12.0}},
    {"words": "the dog ran", "scores": {"decoder": -3.0, "ctc": -2.5, "lm": -8.0}},
]}


def words_of(hypothesis: dict) -> list[str]:
    words = hypothesis["words"]
    return words.split() if isinstance(words, str) else list(words)


def expected_totals(model_dir, lm_weight: float, old_lm_weight: float, score_weights: dict[str, float],
                    word_penalty: float, unk_penalty: float) -> list[float]:
    """Each hypothesis's total score under the documented combination (lattices/scored.py),
    computed from NBEST and the model alone (the sentence forward pass), not from a response."""
    loaded = load_checkpoint(model_dir)
    totals = []
    for h in NBEST["hypotheses"]:
        words, s = words_of(h), h["scores"]
        lm = float(score_corpus(loaded.model, encode([words], loaded.vocab)).token_logprobs[0].sum())
        unk = sum(1 for w in words if not loaded.vocab.is_known(w))
        named = sum(score_weights.get(name, 1.0) * value for name, value in s.items() if name != "lm")
        totals.append(named + old_lm_weight * s["lm"] + lm_weight * (lm + unk_penalty * unk) + word_penalty * len(words))
    return totals


@pytest.mark.parametrize("fmt", ["nbest-json", "auto"])
def test_nbest_json_is_rescored_exactly(client, model_dir, fmt):
    body = {"format": fmt, "lattice": NBEST, "nbest": 3, "lm_weight": 0.5, "old_lm_weight": 0.25,
            "score_weights": {"decoder": 0.6, "ctc": 0.4}, "word_penalty": 1.0, "unk_penalty": -4.0}
    response = client.post("/v1/rescore", json=body)
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    totals = expected_totals(model_dir, 0.5, 0.25, {"decoder": 0.6, "ctc": 0.4}, 1.0, -4.0)
    order = sorted(range(len(totals)), key=lambda i: -totals[i])
    assert [hyp["words"] for hyp in result["nbest"]] == [words_of(NBEST["hypotheses"][i]) for i in order]
    assert [hyp["score"] for hyp in result["nbest"]] == pytest.approx([totals[i] for i in order], abs=1e-4)
    assert result["best"]["words"] == words_of(NBEST["hypotheses"][order[0]])
    assert [hyp["unk"] for hyp in result["nbest"]] == [1 if i == 1 else 0 for i in order]  # "zebra"
    assert result["first_pass"]["words"] == ["the", "cat", "sat"]
    assert result["changed"] == (result["best"]["words"] != ["the", "cat", "sat"])
    assert result["oov_words"] == ["zebra"] and result["score_weights"] == {"decoder": 0.6, "ctc": 0.4}


def test_a_list_of_nbest_lists_and_mbr(client, model_dir):
    import kaldialign

    second = {**NBEST, "key": "utt2"}
    response = client.post("/v1/rescore", json={"lattice": [NBEST, second], "decode": "mbr", "mbr_scale": 0.5})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["key"] for r in results] == ["utt1", "utt2"] and all(r["decode"] == "mbr" for r in results)
    # MBR by hand: posteriors softmax(0.5 * total), expected word errors against every hypothesis
    totals = torch.tensor(expected_totals(model_dir, 1.0, 0.0, {}, 0.0, 0.0), dtype=torch.float64)
    posterior = torch.softmax(0.5 * totals, dim=0).tolist()
    hyps = [words_of(h) for h in NBEST["hypotheses"]]
    risk = [sum(p * kaldialign.edit_distance(h, other)["total"] for p, other in zip(posterior, hyps)) for h in hyps]
    chosen = hyps[min(range(len(hyps)), key=lambda i: (risk[i], -totals[i]))]
    assert all(r["best"]["words"] == chosen for r in results)


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
        assert field in (error.get("field") or ""), error
