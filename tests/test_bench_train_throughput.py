"""bench.train_throughput: its rates and ratios against values worked out by hand from given round
times, and every real configuration measured once (tiny ones here, in this process)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

import bench.train_throughput as tt
from bench.train_throughput import ThroughputConfig, benchmark, zipf_batches


def test_zipf_batches_are_full_rows_of_one_stream_shifted_by_one():
    batches = zipf_batches(vocab_size=50, batches=3, batch_size=2, bptt=5, seed=1)
    assert len(batches) == 3
    for batch in batches:
        assert batch.inputs.shape == batch.targets.shape == (2, 5)
        assert batch.lengths.tolist() == [5, 5]
        assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
        assert 0 <= int(batch.inputs.min()) and int(batch.targets.max()) < 50
    ids = torch.cat([b.targets.flatten() for b in batches])
    assert (ids == 0).sum() > (ids == 49).sum()  # the most frequent id comes first


@dataclass(frozen=True)
class Timed:
    """A configuration whose rounds take the given seconds, one after another."""

    name: str
    units: int
    seconds: tuple[float, ...]
    vocab_size: int = 50
    mode: str = "exact"
    softmax: str = "full"
    targets_per_context: int = 2
    hidden: int = 8
    rho: int = 4
    flops: int | None = None

    def prepare(self, device: torch.device):
        rounds = iter(self.seconds)

        def run() -> float:
            return next(rounds)

        if self.flops is not None:
            run.flops_per_round = self.flops
        return run


def test_rates_are_the_median_rounds_and_ratios_are_against_exact_full(monkeypatch):
    """Training: 20 tokens a round. Exact, full: rounds 3, 1, 2 s, median 2 s: 10 tokens/s. AFP,
    adaptive: 0.5, 0.4, 1 s, median 0.5 s: 40 tokens/s, 4 times exact full. At another V with no
    exact full: no ratio. Scoring: 8 contexts a round, medians 0.5 and 0.125 s: 16 and 64
    contexts/s, adaptive 4 times full."""
    train = [Timed("exact full", 20, (3.0, 1.0, 2.0)),
             Timed("afp adaptive", 20, (0.5, 0.4, 1.0), mode="afp", softmax="adaptive", flops=3 * 10**12),
             Timed("cudnn adaptive", 20, (1.0, 1.0, 1.0), mode="cudnn", softmax="adaptive"),
             Timed("other V", 20, (1.0, 1.0, 1.0), vocab_size=70, mode="afp")]
    score = [Timed("full", 8, (0.25, 0.5, 1.0)), Timed("adaptive", 8, (0.1, 0.2, 0.125), softmax="adaptive")]
    monkeypatch.setattr(tt, "train_setups", lambda cfg: train)
    monkeypatch.setattr(tt, "score_setups", lambda cfg: score)
    result = benchmark(ThroughputConfig(rounds=3, threads=1, isolate=False, score_vocab_size=50, peak_tflops=12.0),
                       log=lambda _: None)
    rows = {r["name"]: r for r in result["train"]}
    assert rows["exact full"]["median_round_seconds"] == 2.0 and rows["exact full"]["tokens_per_second"] == 10.0
    assert rows["exact full"]["round_seconds"] == [3.0, 1.0, 2.0]
    assert rows["afp adaptive"]["tokens_per_second"] == 40.0 and rows["afp adaptive"]["speedup_over_exact_full"] == 4.0
    assert rows["exact full"]["speedup_over_exact_full"] == 1.0
    assert rows["other V"]["tokens_per_second"] == 20.0 and rows["other V"]["speedup_over_exact_full"] is None
    # 3e12 FLOPs in a 0.5 s median round: 6 TFLOP/s, half of a 12 TFLOP/s peak; 2x torch.nn.GRU's 20 tokens/s
    assert rows["afp adaptive"]["tflops"] == 6.0 and rows["afp adaptive"]["roofline_fraction"] == 0.5
    assert rows["afp adaptive"]["speedup_over_cudnn"] == 2.0 and "tflops" not in rows["exact full"]
    scored = {r["softmax"]: r for r in result["score"]["rows"]}
    assert (scored["full"]["contexts_per_second"], scored["adaptive"]["contexts_per_second"]) == (16.0, 64.0)
    assert scored["adaptive"]["speedup_over_full"] == 4.0 and scored["adaptive"]["targets_per_round"] == 16


def test_every_real_configuration_is_measured_once_in_this_process():
    torch.set_num_threads(1)
    cfg = ThroughputConfig(vocab_sizes=(50,), hidden=8, batch_size=2, bptt=5, batches=2, rounds=1,
                           score_vocab_size=50, contexts=8, targets_per_context=2, threads=1, isolate=False)
    result = benchmark(cfg, log=lambda _: None)
    json.dumps(result)  # what main writes
    assert result["benchmark"] == "bench.train_throughput" and result["config"]["hidden"] == 8
    train = {(r["mode"], r["softmax"]): r for r in result["train"]}
    assert set(train) == {(mode, softmax) for mode in ("exact", "afp", "cudnn") for softmax in ("full", "adaptive")}
    for row in train.values():
        assert row["vocab_size"] == 50 and row["tokens_per_round"] == 20 and len(row["round_seconds"]) == 1
        assert math.isfinite(row["tokens_per_second"]) and row["tokens_per_second"] > 0
        assert "peak_rss_mib" not in row  # one process for all: no memory of its own
        assert row["flops_per_round"] > 0 and row["tflops"] > 0
    # the same network's math: torch.nn.GRU's rows count the library's exact mode's FLOPs
    assert train[("cudnn", "full")]["flops_per_round"] == train[("exact", "full")]["flops_per_round"]
    # AFP-4 does 4 recurrent steps per position where exact does 1
    assert train[("afp", "full")]["flops_per_round"] > train[("exact", "full")]["flops_per_round"]
    score = result["score"]
    assert (score["vocab_size"], score["contexts"], score["targets_per_context"]) == (50, 8, 2)
    assert {r["softmax"]: r["targets_per_round"] for r in score["rows"]} == {"full": 16, "adaptive": 16}
    assert all(math.isfinite(r["contexts_per_second"]) and r["contexts_per_second"] > 0 for r in score["rows"])


def test_the_grid_takes_every_width_and_every_rho():
    cfg = ThroughputConfig(vocab_sizes=(50,), modes=("exact", "afp"), softmaxes=("adaptive",), hiddens=(8, 16),
                           rhos=(2, 3, 4))
    grid = [(s.hidden, s.mode, s.rho) for s in tt.train_setups(cfg)]
    assert grid == [(h, "exact", 4) for h in (8,)] + [(8, "afp", r) for r in (2, 3, 4)] + \
        [(16, "exact", 4)] + [(16, "afp", r) for r in (2, 3, 4)]


def test_bad_options_are_refused_naming_them():
    with pytest.raises(ValueError, match="modes"):
        ThroughputConfig(modes=("fast",))
    with pytest.raises(ValueError, match="rounds"):
        ThroughputConfig(rounds=0)
