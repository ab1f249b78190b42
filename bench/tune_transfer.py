"""Tuning that cannot lose: ``afp tune``'s joint search on one LibriSpeech dev set, applied to the
other, against the first pass and against the old default grid, with the significance of each
difference.

  python -m bench.tune_transfer                  # both directions, every utterance
  python -m bench.tune_transfer --limit 300      # a quick look

For each dev set (ESPnet 30-best lists, ``models/librispeech``) the lists are scored once
(``afp.tune.Tuner``); then, tuned on one set and applied to the other (both directions):

  * ``first pass``: the recogniser's 1-best;
  * ``joint``: ``afp tune``'s default search (MERT coordinate descent from the first pass's own
    weights, 3 restarts) over the new-LM and old-LM weights and the word and unknown-word penalties;
  * ``joint+scores``: the same, also tuning the decoder and CTC weights (``--tune-score-weights``);
  * ``reweight only``: the joint search with the new LM held at 0 (what re-weighting the
    recogniser's own scores gives, so that the new LM's share can be told apart);
  * ``old grid``: the default grid before this search (new-LM weights 0..1, old-LM weight 0): what
    the issue measured (it throws the recogniser's LM away).

Each applied WER comes with the matched-pairs p-value and the bootstrap interval against the
first pass on the same set, and the in-set (tuning) and 5-fold cross-validated WERs. The applied
weights are evaluated through the tuner of the other set (the same numbers ``afp rescore
--weights`` gives: ``tests/test_parity.py``). Writes ``bench/results/tune_transfer.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, bundled_afp, environment, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SETS = ("dev_clean", "dev_other")


def scored_set(name: str, limit: int | None) -> Any:
    from afp.jobs import iter_lattices
    from afp.tune import Tuner
    from afp.wer import read_references
    from lattices.rescore import RescoreOptions
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer

    refs = read_references(NBEST / name / "ref_wer.trn")
    options = RescoreOptions(score_weights=(("decoder", 0.6), ("ctc", 0.4)))
    tuner = Tuner(LMScorer(load_checkpoint(bundled_afp("librispeech")), precision="fp32"), options, refs)
    lattices = list(iter_lattices([str(NBEST / name)], "auto"))[:limit]
    tick = time.perf_counter()
    tuner.add(lattices)
    print(f"{name}: {len(lattices)} lists scored in {time.perf_counter() - tick:.0f} s", flush=True)
    return tuner


def systems(tuner: Any, folds: int) -> dict[str, dict[str, Any]]:
    """Each system's point tuned on ``tuner``'s set, with its in-set and cross-validated WERs."""
    from afp import mert
    from afp.tune import Grid, first_pass_point, joint_tune, mert_problem, tune

    out: dict[str, dict[str, Any]] = {}
    for name, scores in (("joint", ()), ("joint+scores", ("decoder", "ctc"))):
        report = joint_tune(tuner, scores, restarts=3, folds=folds)
        point = report["chosen"]["point"]
        out[name] = {"point": point, "tuned_wer": report["best"]["wer"], "chosen": report["chosen"]["reason"],
                     "cross_validated_wer": report.get("cross_validated", {}).get("wer"),
                     "start": report["start"], "at_edge": report["at_edge"], "seconds": report["seconds"],
                     "line_searches": report["line_searches"]}
    start, _ = first_pass_point(tuner)
    problem = mert_problem(tuner, tuner.utterances)
    found = mert.search(problem, start, ["old_lm_weight", "word_penalty", "unk_penalty"], restarts=3)
    out["reweight only"] = {"point": found.point, "tuned_wer": 100.0 * found.errors / tuner.first_pass().ref_words}
    grid = tune(tuner, Grid())  # the old default: lm 0..1, old LM 0
    best = grid["best"]
    named = {f"score:{k}": v for k, v in tuner.options.named_weights(tuner.names or ()).items()}
    out["old grid"] = {"point": {**{k: best[k] for k in ("lm_weight", "old_lm_weight", "word_penalty",
                                                           "unk_penalty")}, **named}, "tuned_wer": best["wer"]}
    return out


def main(argv: list[str] | None = None) -> None:
    from afp.significance import compare
    from afp.tune import utterance_errors

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, help="the first N utterances of each set")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args(argv)
    tuners = {name: scored_set(name, args.limit) for name in SETS}
    rows = []
    for tuned_on, applied_to in (("dev_clean", "dev_other"), ("dev_other", "dev_clean")):
        found = systems(tuners[tuned_on], args.folds)
        target = tuners[applied_to]
        first = [u.first_pass.errors for u in target.utterances]
        words = [u.first_pass.ref_words for u in target.utterances]
        for system, info in found.items():
            errors = utterance_errors(target, info["point"])
            comparison = compare(first, errors, words)
            rows.append({"tuned_on": tuned_on, "applied_to": applied_to, "system": system, **info,
                         "applied_wer": comparison.wer_b, "first_pass_wer": comparison.wer_a,
                         "against_first_pass": comparison.to_json()})
            print(f"{tuned_on} -> {applied_to} {system:>13}: tuned {info['tuned_wer']:.2f}%"
                  + (f" (cv {info['cross_validated_wer']:.2f}%)" if info.get("cross_validated_wer") else "")
                  + f", applied {comparison.summary()}", flush=True)
    write_json(RESULTS / "tune_transfer.json", {
        "command": "python -m bench.tune_transfer" + (f" --limit {args.limit}" if args.limit else ""),
        "environment": environment(), "model": str(bundled_afp("librispeech").relative_to(REPO_ROOT)), "rows": rows})


if __name__ == "__main__":
    main()
