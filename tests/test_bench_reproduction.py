"""The AFP paper study's driver: which runs, in which order, and what its summary records."""

from __future__ import annotations

import json

from bench.paper_reproduction import priority, run_specs, summarize


def test_the_study_has_every_configuration_once():
    specs = run_specs(list(range(1, 9)))
    assert len(specs) == 1 + 8 + 7 + 3
    assert specs["kn-5gram"] == {"arch": "kn", "order": 5}
    assert "afp-fpi-detach-rho1" not in specs  # one iteration: FPI|theta would repeat afp-fpi-rho1 exactly
    assert specs["afp-fpi-detach-rho5"] == {"mode": "afp", "rho": 5, "detach": True}
    assert specs["ffnn-2gram"] == {"arch": "ffnn", "order": 2}


def test_coarse_rhos_train_first_and_nothing_is_lost():
    names = list(run_specs(list(range(1, 9))))
    ordered = priority(names)
    assert sorted(ordered) == sorted(names)
    assert ordered[:5] == ["rnn-bptt", "afp-fpi-rho1", "afp-fpi-rho2", "afp-fpi-rho4", "afp-fpi-rho8"]
    late = ordered[-7:]
    assert all(int(n.rsplit("-rho", 1)[1]) in (3, 5, 6, 7) for n in late)
    assert ordered.index("lstm-bptt") < ordered.index("afp-fpi-rho3")


def test_summary_records_best_epoch_completeness_and_precision(tmp_path):
    specs = run_specs([1, 2])
    for name, ppls, precision in (("rnn-bptt", [200.0, 150.0, 160.0], None), ("afp-fpi-rho2", [210.0], "bf16")):
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        lines = [{"epoch": i + 1, "valid_ppl": p, "seconds": 10.0 * (i + 1), "device": "cpu",
                  **({"precision": precision} if precision else {})} for i, p in enumerate(ppls)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = summarize("ptb", tmp_path, specs, epochs=3)
    bptt, afp = summary["runs"]["rnn-bptt"], summary["runs"]["afp-fpi-rho2"]
    assert (bptt["best_valid_ppl"], bptt["best_epoch"], bptt["complete"], bptt["seconds_per_epoch"]) == \
        (150.0, 2, True, 20.0)
    assert bptt["precision"] == "fp32"  # runs from before the option existed were float32
    assert (afp["complete"], afp["precision"]) == (False, "bf16")
    assert set(summary["runs"]) == {"rnn-bptt", "afp-fpi-rho2"}
    assert json.loads((tmp_path / "summary.json").read_text())["runs"]["rnn-bptt"]["best_epoch"] == 2
    assert (tmp_path / "ppl_vs_rho.png").stat().st_size > 1000
