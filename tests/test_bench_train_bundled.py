"""How bench.train_bundled picks the model it installs."""

from __future__ import annotations

from bench.train_bundled import choose_winner


def _row(rho: int) -> dict:
    return {"fields": {"mode": "afp", "rho": rho}}


def _metrics(*ppls: float) -> list[dict]:
    return [{"epoch": i + 1, "valid_ppl": p} for i, p in enumerate(ppls)]


def test_candidates_are_compared_at_equal_epochs():
    table = {"rho3": _row(3), "rho4": _row(4)}
    # rho3 went on training (75.0 after 3 epochs), rho4 had the sweep's one epoch: at one epoch rho4 is better
    metrics = {"rho3": _metrics(84.75, 78.0, 75.0), "rho4": _metrics(83.22)}
    assert choose_winner(table, metrics, 0.0) == "rho4"


def test_a_cheaper_rho_within_the_margin_wins():
    table = {"rho3": _row(3), "rho4": _row(4), "rho5": _row(5)}
    metrics = {"rho3": _metrics(84.75, 75.0), "rho4": _metrics(83.22), "rho5": _metrics(80.0)}
    assert choose_winner(table, metrics, 0.02) == "rho5"  # 84.75 and 83.22 are more than 2% above 80
    metrics["rho5"] = _metrics(83.5)
    assert choose_winner(table, metrics, 0.02) == "rho3"  # 84.75 <= 1.02 * 83.22
    assert choose_winner(table, metrics, 0.01) == "rho4"


def test_a_committed_metrics_record_without_weights_is_not_a_trained_run(tmp_path):
    from bench.common import trained

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(f'{{"epoch": {e}, "valid_ppl": 100.0}}\n' for e in (1, 2, 3)))
    assert not trained(run, 3)  # a fresh clone: metrics committed, weights gitignored
    (run / "model.safetensors").write_bytes(b"weights")
    assert trained(run, 3) and not trained(run, 4)
