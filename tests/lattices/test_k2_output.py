"""What :func:`write_k2` writes is a valid k2 FSA and reads back to the same lattice.

k2's rules for one FSA (https://k2-fsa.github.io/k2/core_concepts/index.html, ``k2/csrc/fsa.h``):
the start state is 0; there is one final state, the largest state number; every arc goes from a
lower to a higher state number (top-sorted, as k2's shortest path assumes); exactly the arcs
entering it have label -1 (and aux_label -1 in a transducer); no arc leaves it; the arcs are
grouped by source state in increasing order. :func:`assert_valid_k2` checks them on the dict,
as ``k2.Fsa.from_dict`` would get it. Lattices with several final states and final weights (the
random ones, every rescored one: ``</s>`` log-probs are final weights) need a super-final state.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from lattices.formats import read_lattice_file
from lattices.formats.k2 import read_k2, write_k2
from lattices.lattice import Lattice
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from tests.factories import require_shared, replacing_options, all_paths, make_model, random_lattice, tiny_vocab
from tests.lattices.test_k2 import WORDS, transducer
from tests.lattices.test_real_lattices import FILES, model_for


def assert_valid_k2(d: dict[str, Any]) -> None:
    """The k2 single-FSA rules (module docstring) on an ``as_dict()`` dict, with the offending values."""
    arcs = d["arcs"]
    assert arcs.dtype == torch.int32 and arcs.dim() == 2 and arcs.shape[1] == 4 and arcs.shape[0] > 0, arcs.shape
    src, dst, labels = arcs[:, 0], arcs[:, 1], arcs[:, 2]
    scores = arcs[:, 3].contiguous().view(torch.float32)
    final = int(torch.maximum(src, dst).max())  # k2: num_states - 1
    assert int(src.min()) == 0 and int(dst.min()) >= 0, "state ids start at 0 (the start state) and are not negative"
    assert final >= 1 and bool((dst == final).any()), f"no arc enters the final state {final}"
    assert bool((src[1:] >= src[:-1]).all()), f"arcs not grouped by source: {src.tolist()[:40]}"
    assert not bool((src == final).any()), f"arcs {(src == final).nonzero().flatten().tolist()} leave the final state"
    backward = (src >= dst).nonzero().flatten().tolist()
    assert not backward, f"not top-sorted (k2's shortest path and intersection assume it): arcs {backward[:10]}"
    wrong = ((labels == -1) != (dst == final)).nonzero().flatten().tolist()
    assert not wrong, f"label -1 must be exactly on the arcs into {final}: arcs {wrong}, " \
                      f"labels {labels[wrong].tolist()}"
    assert int(labels.min()) >= -1, f"negative label {int(labels.min())}"
    assert not bool(scores.isnan().any()), "NaN score"
    if "aux_labels" in d:
        aux = d["aux_labels"]
        assert aux.dtype == torch.int32 and aux.shape == (arcs.shape[0],), (aux.dtype, aux.shape)
        wrong = ((aux == -1) != (dst == final)).nonzero().flatten().tolist()
        assert not wrong, f"aux_label -1 must be exactly on the arcs into {final}: arcs {wrong}"
        assert int(aux.min()) >= -1
    if "lm_scores" in d:
        assert d["lm_scores"].dtype == torch.float32 and d["lm_scores"].shape == (arcs.shape[0],)


def path_set(lattice: Lattice) -> list[tuple[tuple[str, ...], float, float]]:
    """Every complete path as (words without epsilons, acoustic, graph), final weights included, sorted."""
    out = []
    for arcs, f in all_paths(lattice):
        words = tuple(lattice.word(a) for a in arcs if int(lattice.words[a]) != 0)
        out.append((words, float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[f]),
                    float(lattice.graph[arcs].sum() + lattice.final_graph[f])))
    return sorted(out)


def assert_same_paths(again: Lattice, lattice: Lattice) -> None:
    """Same word sequences with the same acoustic and graph scores (k2 stores float32)."""
    got, want = path_set(again), path_set(lattice)
    assert len(got) == len(want) > 0
    for (gw, ga, gg), (ww, wa, wg) in zip(got, want):
        assert gw == ww and ga == pytest.approx(wa, rel=1e-6, abs=1e-3) and gg == pytest.approx(wg, rel=1e-6, abs=1e-3)


def path_summary(lattice: Lattice, acoustic_scale: float) -> tuple[int, float, float]:
    """(number of complete paths, best and log-sum-exp of ``scale * acoustic + graph``) by dynamic
    programming in topological order: for real lattices, whose paths are too many to list."""
    n = lattice.num_states
    count, best, total = [0] * n, [-math.inf] * n, [-math.inf] * n
    count[lattice.start], best[lattice.start], total[lattice.start] = 1, 0.0, 0.0
    weight = (acoustic_scale * lattice.acoustic + lattice.graph).tolist()
    src, dst = lattice.src.tolist(), lattice.dst.tolist()
    level = lattice.levels.tolist()
    for a in sorted(range(lattice.num_arcs), key=lambda a: level[src[a]]):
        s, d = src[a], dst[a]
        count[d] += count[s]
        best[d] = max(best[d], best[s] + weight[a])
        total[d] = logaddexp(total[d], total[s] + weight[a])
    ends = [(int(f), acoustic_scale * float(fa) + float(fg))
            for f, fa, fg in zip(lattice.finals, lattice.final_acoustic, lattice.final_graph)]
    whole = -math.inf
    for f, w in ends:
        whole = logaddexp(whole, total[f] + w)
    return sum(count[f] for f, _ in ends), max(best[f] + w for f, w in ends), whole


def logaddexp(x: float, y: float) -> float:
    high, low = max(x, y), min(x, y)
    return high if low == -math.inf else high + math.log1p(math.exp(low - high))


def assert_round_trip(lattice: Lattice, exact_paths: bool) -> dict[str, Any]:
    """Write ``lattice`` as k2, check the rules, read it back: the same paths and scores."""
    out = write_k2([lattice])
    assert_valid_k2(out)
    (again,) = read_k2(out, symbols=lattice.symbols)
    if exact_paths:
        assert_same_paths(again, lattice)
    else:
        for scale in (1.0, 0.1):
            got, want = path_summary(again, scale), path_summary(lattice, scale)
            assert got[0] == want[0], (lattice.key, scale)
            assert got[1:] == pytest.approx(want[1:], rel=1e-6, abs=1e-2), (lattice.key, scale)
    return out


def scorer_for(rho: int = 2) -> LMScorer:
    """A random AFP-rho GRU over the tiny vocabulary (cat, sat, dog are in it)."""
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=rho, hidden=8)
    return LMScorer(LoadedModel(model.config, vocab, model))


def rescored(lattice: Lattice, scorer: LMScorer) -> Lattice:
    result = rescore(lattice, scorer, replacing_options(return_lattice=True))[0]
    assert result.lattice is not None
    return result.lattice


# ----------------------------------------------------------------------------------- the validator
def broken_variants() -> list[tuple[str, dict[str, Any]]]:
    """A valid written transducer, broken one rule at a time: (what the validator says, dict)."""
    good = write_k2(read_k2(transducer(), symbols=WORDS))
    out = []
    arcs = good["arcs"].clone()
    arcs[4, 2] = 5  # the arc into the final state without -1
    out.append(("label -1 must be exactly", {**good, "arcs": arcs}))
    arcs = good["arcs"].clone()
    arcs[[0, 3]] = arcs[[3, 0]]
    out.append(("not grouped by source", {**good, "arcs": arcs}))
    arcs = torch.cat([good["arcs"], torch.tensor([[3, 1, 4, 0]], dtype=torch.int32)])
    aux = torch.cat([good["aux_labels"], torch.tensor([0], dtype=torch.int32)])
    out.append(("leave the final state", {**good, "arcs": arcs, "aux_labels": aux}))
    aux = good["aux_labels"].clone()
    aux[1] = -1
    out.append(("aux_label -1 must be exactly", {**good, "aux_labels": aux}))
    return out


def test_the_validator_catches_each_broken_rule() -> None:
    assert_valid_k2(write_k2(read_k2(transducer(), symbols=WORDS)))
    for message, d in broken_variants():
        with pytest.raises(AssertionError, match=message):
            assert_valid_k2(d)


# ----------------------------------------------------------------------------- random lattices
@pytest.mark.parametrize("seed", range(12))
def test_random_lattices_with_final_weights_write_valid_k2(seed: int) -> None:
    # two final states, one with final weights: a super-final state takes -1 arcs from both
    lattice = random_lattice(seed, num_states=4 + seed % 5, extra_arcs=seed % 7)
    out = assert_round_trip(lattice, exact_paths=True)
    assert int(out["arcs"][:, 1].max()) == lattice.num_states  # one state added
    assert int((out["arcs"][:, 2] == -1).sum()) == lattice.finals.numel()


@pytest.mark.parametrize("seed", range(8))
def test_kept_k2_token_labels_stay_valid_when_finals_change(seed: int) -> None:
    # a k2 transducer's token labels (-1 into its final state) kept on a lattice whose final states
    # are no longer k2's single final state: those -1s must not survive on inner arcs
    lattice = random_lattice(seed, num_states=5 + seed % 3, extra_arcs=seed % 5)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, 50, (lattice.num_arcs,), generator=generator)
    tokens[torch.isin(lattice.dst, lattice.finals)] = -1
    lattice = lattice.replace(arc_extra={"k2_labels": tokens}, meta={"k2_lm_scores": True})
    out = assert_round_trip(lattice, exact_paths=True)
    assert "aux_labels" in out and int((out["arcs"][:, 2] == 0).sum()) == int((tokens == -1).sum())


def test_k2_transducer_rescored_writes_valid_k2() -> None:
    # the production case: a k2 lattice in, the rescored lattice (</s> scores as final weights) out
    (lattice,) = read_k2(transducer(), symbols=WORDS)
    new = rescored(lattice, scorer_for())
    assert bool(new.final_graph.ne(0).any())  # </s> log-probs, so a super-final state is needed
    out = assert_round_trip(new, exact_paths=True)
    assert "aux_labels" in out and "lm_scores" in out
    assert_same_paths(read_k2(write_k2([lattice]), symbols=WORDS)[0], lattice)  # the input is unchanged


@pytest.mark.parametrize("seed", range(4))
def test_rescored_random_lattices_write_valid_k2(seed: int) -> None:
    lattice = random_lattice(seed, num_states=5, extra_arcs=3)
    assert_round_trip(rescored(lattice, scorer_for(rho=1 + seed % 2)), exact_paths=True)


# ------------------------------------------------------------------------------- real lattices
def real_lattices(name: str, count: int) -> list[Lattice]:
    require_shared(*FILES[name])
    assert FILES[name], name
    return [lattice for f in FILES[name][:count] for lattice in read_lattice_file(f)][:count]


@pytest.mark.parametrize("name", sorted(FILES))
def test_real_lattices_write_valid_k2(name: str) -> None:
    lattices = real_lattices(name, 2)
    for lattice in lattices:
        assert_round_trip(lattice, exact_paths=False)
    _, scorer = model_for(lattices, 2, "elman")
    new = rescored(lattices[0], scorer)
    assert new.finals.numel() >= 1
    assert_round_trip(new, exact_paths=False)


def test_states_numbered_out_of_topological_order_are_written_top_sorted():
    """States 0 -> 3 -> 1 -> 2 (final) and a branch 0 -> 1: k2 gets them renumbered in order."""
    lattice = Lattice.from_arcs("k", [(0, 3, 1, -1.0, -0.5), (3, 1, 2, -2.0, -0.25), (1, 2, 3, -0.5, 0.0),
                                      (0, 1, 2, -4.0, -1.0)], {2: (0.0, 0.0)}, ("<eps>", "a", "b", "c"))
    d = write_k2([lattice])
    assert_valid_k2(d)
    (again,) = read_k2(d, lattice.symbols)
    assert_same_paths(again, lattice)
