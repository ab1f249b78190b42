"""bench.stage_bounds's helpers on a small real PocketSphinx lattice and a tiny model: the bound
parser reads the reader's very numbers, the grid acceptor determinizes alike in ours and OpenFst,
and the LM's counted work and FLOP formula match a count by hand."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.stage_bounds import (Acceptor, LMCounts, acceptor_lattice, arc_pruned_minimal, bit_equal, counting_lm,
                                grid_bits, lm_flops, lm_shapes, on_grid, our_summary, parse_links, parse_nodes,
                                reader_arrays, scalar_acceptor)
from lattices.determinize import determinize
from lattices.expand import DEFAULT_SKIP
from lattices.formats.pocketsphinx import read_pocketsphinx
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
    links = parse_links(text)
    assert len(links["src"]) == text.count("\nJ=") == 2836
    equal = bit_equal(reader_arrays(lattice, len(links["src"])), links)
    assert equal == {"src": True, "dst": True, "acoustic": True, "posterior": True}
    times, words = parse_nodes(text)
    assert len(words) == len(times) == text.count("\nI=")
    assert np.array_equal(times, lattice.state_extra["time"][:len(times)].numpy())
    # bit_equal sees one ulp of difference (as == on the values would) and -0.0 against 0.0 (which == would not)
    nudged = dict(links, acoustic=np.nextafter(links["acoustic"], 0.0))
    assert not bit_equal(links, nudged)["acoustic"]
    signed = {"posterior": np.array([0.0])}
    assert not bit_equal(signed, {"posterior": np.array([-0.0])})["posterior"]


def test_grid_costs_are_exact_in_float32_along_every_path():
    acc = Acceptor(3, 0, np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1, 2, 0]),
                   np.array([-1e5 / 3, 123.456, 7.0]), np.array([2]), np.array([0.5]))
    bits = grid_bits(acc)
    assert bits == 23 - 17  # a path of 2 arcs of at most 33,333.3, a final 0.5: at most 66,667.2 < 2^17
    grid = on_grid(acc, bits)
    step = 2.0 ** -bits
    assert np.array_equal(grid.cost / step, np.rint(grid.cost / step))
    assert np.abs(grid.cost - acc.cost).max() <= step / 2
    path = grid.cost[0] + grid.cost[1] + grid.final_cost[0]
    assert float(np.float32(grid.cost[0]) + np.float32(grid.cost[1]) + np.float32(grid.final_cost[0])) == path
    assert grid_bits(Acceptor(2, 0, np.array([0]), np.array([1]), np.array([1]), np.array([-3.0]), np.array([1]),
                              np.array([0.0]))) == 10  # small costs: the finest grid


def test_the_grid_acceptor_keeps_the_lattices_words_and_best_path(lattice):
    acc = scalar_acceptor(lattice, ORDERING, DEFAULT_SKIP)
    assert (acc.label == 0).sum() > 0 and set(acc.label[acc.label > 0].tolist()) <= set(lattice.words.tolist())
    expected = -(lattice.acoustic.numpy() * ORDERING["acoustic"] + lattice.graph.numpy())
    np.testing.assert_allclose(acc.cost, expected, rtol=1e-14, atol=0)  # x @ w may round unlike the sum
    bits = grid_bits(acc)
    one = acceptor_lattice(lattice, on_grid(acc, bits))
    exact = determinize(one, [1.0], skip=())
    ours = our_summary(exact)
    as_called = our_summary(determinize(lattice, ORDERING, skip=DEFAULT_SKIP), ORDERING)
    assert ours["best_words"] == as_called["best_words"]
    assert abs(ours["best_cost"] - as_called["best_cost"]) <= 2.0 ** -bits / 2 * (int(lattice.levels.max()) + 1)
    pruned = arc_pruned_minimal(exact, 10.0)
    assert pruned["arcs"] < exact.num_arcs and pruned["min_states"] <= pruned["states"]


@pytest.mark.skipif(importlib.util.find_spec("kaldifst") is None, reason="kaldifst (OpenFst) is not installed")
def test_openfst_determinizes_the_grid_acceptor_to_the_same_minimal_automaton(lattice):
    from bench.stage_bounds import GRID_DELTA_FRACTION, openfst_determinize, openfst_summary, to_openfst

    acc = scalar_acceptor(lattice, ORDERING, DEFAULT_SKIP)
    bits = grid_bits(acc)
    grid = on_grid(acc, bits)
    delta = GRID_DELTA_FRACTION * 2.0 ** -bits
    exact = determinize(acceptor_lattice(lattice, grid), [1.0], skip=())
    ours, theirs = our_summary(exact), openfst_summary(openfst_determinize(to_openfst(grid), None, delta), delta)
    assert (ours["min_states"], ours["min_arcs"]) == (theirs["min_states"], theirs["min_arcs"])
    assert ours["best_cost"] == theirs["best_cost"] and ours["best_words"] == theirs["best_words"]
    pruned = openfst_summary(openfst_determinize(to_openfst(grid), 10.0, delta), delta)
    mine = arc_pruned_minimal(exact, 10.0)
    assert (mine["min_states"], mine["min_arcs"]) == (pruned["min_states"], pruned["min_arcs"])


def test_the_counted_lm_work_and_its_flops_are_the_hand_count():
    vocab = tiny_vocab()
    model = make_model(vocab, hidden=4, cell="gru", mode="afp", rho=3, softmax="adaptive", cutoffs=(5, 10),
                       div_value=2.0)
    v = model.config.vocab_size
    shapes = lm_shapes(model)
    assert (shapes.input, shapes.recurrent, shapes.head) == ((4, 12), (4, 12), (4, 7))
    assert shapes.tails == ((4, 2, 5), (4, 1, v - 10))
    bos = vocab.bos_id
    contexts = torch.tensor([[bos, 3, 4], [bos, 3, 6]])  # one prefix at steps 0 and 1, two at step 2
    targets = torch.tensor([3, 7, 11, 12])  # shortlist; cluster 0; cluster 1 twice, after one context
    rows = torch.tensor([0, 1, 1, 1])
    plain = model.score_contexts(contexts, torch.tensor([3, 3]), targets, rows)
    counts = LMCounts()
    with counting_lm(model, counts):
        counted = model.score_contexts(contexts, torch.tensor([3, 3]), targets, rows)
    assert torch.equal(plain, counted)
    assert "score_contexts" not in vars(model) and "step" not in vars(model.cell)  # unwrapped again
    assert (counts.score_calls, counts.contexts, counts.targets) == (1, 2, 4)
    assert (counts.cell_rows, counts.project_rows, counts.head_rows) == (1 + 1 + 2, 1 + 4, 2)
    assert (counts.tail_contexts, counts.tail_targets) == ([1, 1], [1, 2])
    flops = lm_flops(counts, shapes)
    assert flops["recurrent"] == 4 * 2 * 4 * 12 and flops["input"] == 5 * 2 * 4 * 12
    assert flops["head"] == 2 * 2 * 4 * 7
    assert flops["tail0"] == 2 * 4 * 2 + 2 * 2 * 5 and flops["tail1"] == 2 * 4 * 1 + 2 * 1 * (v - 10)
    assert flops["targets"] == 4 * 2 * 4 + 1 * 2 * 2 + 2 * 2 * 1
    assert flops["total"] == (384 + 480) + (112 + 36 + 8 + 2 * (v - 10) + 40)
