"""bench.stage_bounds's helpers on a small real PocketSphinx lattice and a tiny model: the bound parser reads the
reader's very numbers, the grid acceptor determinizes alike in ours and OpenFst, and the LM's counted work and
FLOP formula match a count by hand."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.stage_bounds import (bit_equal, compare_determinization, counting_lm, lm_bound, lm_flops, lm_shapes,
                                on_grid, our_summary, scalar_acceptor, summarise_determinization, tokenise_bound)
from lattices.determinize import determinize
from lattices.expand import DEFAULT_SKIP
from lattices.formats.pocketsphinx import read_pocketsphinx
from lattices.lattice import Lattice
from tests.factories import make_model, tiny_vocab

#: the smallest PocketSphinx fixture (414 nodes, 2,836 links)
FIXTURE = Path(__file__).parent / "fixtures" / "pocketsphinx" / "sense_and_sensibility_01_austen_64kb-0920.slf.gz"
#: the first pass's ordering weights of a PocketSphinx lattice (acoustic / lmscale, graph)
ORDERING = {"acoustic": 1 / 9.5, "graph": 1.0}


@pytest.fixture(scope="module")
def text() -> str:
    return gzip.open(FIXTURE, "rt", encoding="utf-8").read()


@pytest.fixture(scope="module")
def lattice(text):
    return read_pocketsphinx(text, str(FIXTURE))


def test_the_bound_parser_gives_the_readers_arrays_bit_for_bit(text, lattice):
    links, (times, words) = tokenise_bound(text)
    assert len(links["src"]) == text.count("\nJ=") == 2836
    assert bit_equal(lattice, links) == {"src": True, "dst": True, "acoustic": True, "posterior": True}
    assert len(words) == len(times) == text.count("\nI=")
    assert np.array_equal(times, lattice.state_extra["time"][:len(times)].numpy())
    # bit_equal sees one ulp of difference (as == on the values would) and -0.0 against 0.0 (which == would not)
    assert not bit_equal(lattice, dict(links, acoustic=np.nextafter(links["acoustic"], 0.0)))["acoustic"]
    zeros = lattice.replace(arc_extra={"ps_posterior": torch.zeros(lattice.num_arcs, dtype=torch.float64)})
    assert bit_equal(zeros, {"posterior": np.zeros(2836)}) == {"posterior": True}
    assert bit_equal(zeros, {"posterior": np.full(2836, -0.0)}) == {"posterior": False}


def test_grid_costs_are_exact_in_float32_along_every_path():
    arcs = [(0, 1, 1, 1e5 / 3, 0.0), (1, 2, 2, -123.456, 0.0), (0, 2, 0, -7.0, 0.0)]  # scores = -costs
    acc = scalar_acceptor(Lattice.from_arcs("k", arcs, {2: (-0.5, 0.0)}, ("<eps>", "a", "b")), [1.0, 1.0], ())
    grid, bits = on_grid(acc)
    assert bits == 23 - 17  # a path of 2 arcs of at most 33,333.3, a final 0.5: at most 66,667.2 < 2^17
    step, cost, final = 2.0 ** -bits, -grid.scores["first_pass"].numpy(), -grid.final_scores["first_pass"].numpy()
    assert np.array_equal(cost / step, np.rint(cost / step))
    assert np.abs(cost + acc.scores["first_pass"].numpy()).max() <= step / 2
    assert float(np.float32(cost[0]) + np.float32(cost[1]) + np.float32(final[0])) == cost[0] + cost[1] + final[0]
    small = scalar_acceptor(Lattice.from_arcs("k", [(0, 1, 1, 3.0, 0.0)], {1: (0.0, 0.0)}, ("<eps>", "a")), [1.0, 1.0], ())
    assert on_grid(small)[1] == 10  # small costs: the finest grid


def test_the_grid_acceptor_keeps_the_lattices_words_and_best_path(lattice):
    acc = scalar_acceptor(lattice, ORDERING, DEFAULT_SKIP)
    assert (acc.words == 0).sum() > 0 and set(acc.words[acc.words > 0].tolist()) <= set(lattice.words.tolist())
    expected = lattice.acoustic.numpy() * ORDERING["acoustic"] + lattice.graph.numpy()
    np.testing.assert_allclose(acc.scores["first_pass"].numpy(), expected, rtol=1e-14, atol=0)  # x @ w may round
    grid, bits = on_grid(acc)
    exact = determinize(grid, [1.0], skip=())
    ours, as_called = our_summary(exact), our_summary(determinize(lattice, ORDERING, skip=DEFAULT_SKIP), ORDERING)
    assert ours["best_words"] == as_called["best_words"]
    assert abs(ours["best_cost"] - as_called["best_cost"]) <= 2.0 ** -bits / 2 * (int(lattice.levels.max()) + 1)
    pruned = our_summary(exact, prune_beam=10.0)
    assert pruned["arcs"] < exact.num_arcs and pruned["min_states"] <= pruned["states"]


@pytest.mark.skipif(importlib.util.find_spec("kaldifst") is None, reason="kaldifst (OpenFst) is not installed")
def test_openfst_determinizes_the_grid_acceptor_to_the_same_minimal_automaton(lattice):
    call = {"lattice": lattice, "weights": ORDERING, "options": {"beam": 10.0, "skip": DEFAULT_SKIP}, "seconds": 0.1,
            "stopped": False}
    row = compare_determinization(call, 20_000, openfst=True)
    assert row["as_called"]["agree"] == {"best_cost": True, "best_words": True}
    assert row["grid_exact"]["agree"] == dict.fromkeys(("min_states", "min_arcs", "best_cost", "best_words"), True)
    assert row["grid_exact"]["ours"]["min_states"] == row["grid_exact"]["openfst"]["min_states"] > 1
    assert row["grid_pruned"]["agree"] == dict.fromkeys(
        ("best_cost", "best_words", "arc_pruned_min_states", "arc_pruned_min_arcs"), True)
    summary = summarise_determinization([row, {**compare_determinization(call, 10, openfst=True), "key": "capped"}])
    assert summary["grid_exact"]["skipped"] == 1 and summary["grid_exact"]["agree"]["min_states"] == [1, 1]
    assert summary["grid_pruned"]["agree"]["arc_pruned_min_arcs"] == [1, 1]  # no exact result to prune: not checked
    assert summary["as_called"]["agree"]["best_words"] == [2, 2] and summary["ours_as_called_seconds_in_rescoring"] == 0.2
    assert compare_determinization({**call, "stopped": True}, 20_000, openfst=True).keys() == {"key", "in_rescoring_s",
                                                                                                "stopped"}


def test_the_counted_lm_work_and_its_flops_are_the_hand_count():
    vocab = tiny_vocab()
    model = make_model(vocab, hidden=4, cell="gru", mode="afp", rho=3, softmax="adaptive", cutoffs=(5, 10),
                       div_value=2.0)
    v = model.config.vocab_size
    shapes = lm_shapes(model)
    assert shapes == {"recurrent": [4, 12], "input": [4, 12], "head": [4, 7], "tail0_projection": [4, 2],
                      "tail0_output": [2, 5], "tail1_projection": [4, 1], "tail1_output": [1, v - 10]}
    contexts = torch.tensor([[vocab.bos_id, 3, 4], [vocab.bos_id, 3, 6]])  # one prefix at steps 0 and 1, two at 2
    targets = torch.tensor([3, 7, 11, 12])  # shortlist; cluster 0; cluster 1 twice, after one context
    rows = torch.tensor([0, 1, 1, 1])
    plain = model.score_contexts(contexts, torch.tensor([3, 3]), targets, rows)
    with counting_lm(model) as counts:
        counted = model.score_contexts(contexts, torch.tensor([3, 3]), targets, rows)
    assert torch.equal(plain, counted)
    assert "score_contexts" not in vars(model) and "step" not in vars(model.cell)  # unwrapped again
    assert (counts["score_calls"], counts["contexts"], counts["targets"]) == (1, 2, 4)
    # the input part once per distinct word (<s>, 3, 4, 6), the cell once per distinct prefix
    assert (counts["recurrent_rows"], counts["input_rows"], counts["head_rows"]) == (1 + 1 + 2, 4, 2)
    assert [counts[f"tail{i}_{k}"] for i in (0, 1) for k in ("rows", "targets", "calls")] == [1, 1, 1, 1, 2, 1]
    assert counts["score_seconds"] >= counts["output_seconds"] > 0
    flops = lm_flops(counts, shapes)
    assert flops["recurrent"] == 4 * 2 * 4 * 12 and flops["input"] == 4 * 2 * 4 * 12 and flops["head"] == 2 * 2 * 4 * 7
    assert (flops["tail0_projection"], flops["tail0_output"]) == (2 * 4 * 2, 2 * 2 * 5)
    assert (flops["tail1_projection"], flops["tail1_output"]) == (2 * 4 * 1, 2 * 1 * (v - 10))
    assert flops["targets"] == 4 * 2 * 4 + 1 * 2 * 2 + 2 * 2 * 1
    assert flops["total"] == (384 + 384) + (112 + 36 + 8 + 2 * (v - 10) + 40) == flops["cell"] + flops["output"]
    bound = lm_bound(counts, shapes)
    parts = bound["parts"]
    assert parts["recurrent"]["rows_per_call"] == 1 and parts["tail1_output"]["bias"] is False
    assert bound["bound_s"]["total"] == pytest.approx(sum(p["bound_s"] for p in parts.values()))
    assert bound["ratio"]["score"] == pytest.approx(counts["score_seconds"] / bound["bound_s"]["total"])
    assert set(parts["head"]) >= {"with_logsumexp_s"} and "with_logsumexp_s" not in parts["tail0_projection"]
