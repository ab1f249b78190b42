"""Long lattices (one level per frame): the work of parsing, expansion and every search grows
linearly with the lattice, measured as tensor elements allocated (deterministic, not time)."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from lattices.kbest import search_distinct
from lattices.lattice import Lattice
from tests.factories import replacing_options
from lattices.rescore import RescoreOptions, rescore
from lattices.search import Dag


class AllocationCounter(TorchFunctionMode):
    """Counts the elements of every tensor a torch call returns in new memory (views and
    in-place results share their input's memory and are not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        self.elements += sum(t.numel() for t in _tensors(out) if t.untyped_storage().data_ptr() not in inputs)
        return out


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class TinyScorer:
    """A 2-word-context scorer with deterministic log-probabilities (no model)."""

    context_size, bos_id, eos_id, unk_id = 2, 0, 1, 2

    def word_ids(self, words):
        return torch.tensor([2 + (sum(map(ord, w)) % 50) for w in words], dtype=torch.int64)

    def known(self, words):
        return torch.ones(len(words), dtype=torch.bool)

    def score(self, contexts, lengths, targets, target_context):
        return -3.0 - 0.1 * ((targets * 7 + contexts[target_context, -1] * 3) % 11).to(torch.float32)


def chain(n: int) -> Lattice:
    """States 0..n, arc i -> i+1 with one of four words: n levels."""
    acoustic = (-10 * torch.rand(n, generator=torch.Generator().manual_seed(n), dtype=torch.float64)).tolist()
    return Lattice.from_arcs("chain", [(i, i + 1, 1 + i % 4, acoustic[i], -1.0) for i in range(n)], {n: (0.0, 0.0)},
                             ("<eps>", "a", "b", "c", "d"))


def chain_dag(n: int) -> Dag:
    score = -torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    src = torch.arange(n)
    return Dag(n + 1, 0, src, src + 1, score, torch.tensor([n]), torch.zeros(1, dtype=torch.float64),
               torch.arange(n + 1))


def allocated(work) -> int:
    with AllocationCounter() as counter:
        work()
    return counter.elements


def every_search(dag: Dag) -> None:
    dag.forward(), dag.backward(), dag.forward(log_sum=True), dag.backward(log_sum=True)
    dag.arc_posteriors(), dag.arc_best_scores(), dag.best_path()
    search_distinct(dag, torch.arange(dag.src.shape[0]) % 3, 2)


def test_searches_allocate_linearly_in_the_number_of_levels():
    small, large = (allocated(lambda n=n: every_search(chain_dag(n))) for n in (200, 800))
    # a full (S,) vector per level would make it 16x for 4x the levels
    assert large <= 4.2 * small, (small, large)
    assert large <= 400 * 800, large


def test_parsing_expansion_and_rescoring_allocate_linearly():
    options = replacing_options(nbest=2, posteriors=True, prune_beam=50.0)
    small, large = (allocated(lambda n=n: rescore(chain(n), TinyScorer(), options)) for n in (100, 400))
    assert large <= 4.2 * small, (small, large)


@pytest.mark.parametrize("n", [2000])
def test_long_chain_rescores_to_its_only_path(n):
    lattice = chain(n)
    (result,) = rescore(lattice, TinyScorer(), replacing_options(nbest=3, posteriors=True))
    assert result.best.arcs == list(range(n)) and len(result.nbest) == 1 and result.nbest_complete
    assert torch.allclose(result.arc_posteriors, torch.ones(n, dtype=torch.float64))
    assert result.kbest_expanded == n + 1
