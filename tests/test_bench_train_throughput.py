"""bench.train_throughput measures every configuration it is given (tiny ones here, in this process)."""

from __future__ import annotations

import json
import math

import pytest
import torch

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


def test_every_configuration_gets_a_positive_finite_rate_and_its_ratio():
    torch.set_num_threads(1)
    cfg = ThroughputConfig(vocab_sizes=(50,), hidden=8, batch_size=2, bptt=5, batches=2, rounds=1,
                           score_vocab_size=50, contexts=8, targets_per_context=2, threads=1, isolate=False)
    result = benchmark(cfg, log=lambda _: None)
    json.dumps(result)  # what main writes
    assert result["benchmark"] == "bench.train_throughput" and result["config"]["hidden"] == 8

    train = {(r["mode"], r["softmax"]): r for r in result["train"]}
    assert set(train) == {("exact", "full"), ("exact", "adaptive"), ("afp", "full"), ("afp", "adaptive")}
    exact_full = train["exact", "full"]["tokens_per_second"]
    for row in train.values():
        assert row["vocab_size"] == 50 and row["tokens_per_round"] == 2 * 2 * 5 and len(row["round_seconds"]) == 1
        assert math.isfinite(row["tokens_per_second"]) and row["tokens_per_second"] > 0
        assert row["tokens_per_second"] == pytest.approx(20 / row["median_round_seconds"])
        assert row["speedup_over_exact_full"] == pytest.approx(row["tokens_per_second"] / exact_full)
        assert "peak_rss_mib" not in row  # one process for all: no memory of its own
    assert train["exact", "full"]["speedup_over_exact_full"] == 1.0

    score = result["score"]
    assert (score["vocab_size"], score["contexts"], score["targets_per_context"]) == (50, 8, 2)
    rows = {r["softmax"]: r for r in score["rows"]}
    assert set(rows) == {"full", "adaptive"}
    for row in rows.values():
        assert math.isfinite(row["contexts_per_second"]) and row["contexts_per_second"] > 0
        assert row["targets_per_round"] == 16
    assert rows["adaptive"]["speedup_over_full"] == pytest.approx(
        rows["adaptive"]["contexts_per_second"] / rows["full"]["contexts_per_second"])
