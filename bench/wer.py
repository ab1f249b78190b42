"""Word error rates of n-best rescoring on real recogniser output (LibriSpeech dev, ESPnet 30-best).

  python -m bench.wer                       # models/librispeech (+ the exact baseline when trained)
  python -m bench.wer --train-baseline      # trains the baseline first (about 1 h on 2 CPU cores)
  python -m bench.wer --baseline DIR --limit 300        # a quick look

The baseline (b) is ``bench.train_bundled``'s ``librispeech`` candidate ``gru-h256-exact``, trained
into ``bench/results/bundled/librispeech/gru-h256-exact`` (weights gitignored) by
``--train-baseline`` or ``python -m bench.train_bundled librispeech --only gru-h256-exact --no-install``.

For each dev set: the first pass's WER, the oracle of the lists, and every system tuned on one dev
set and applied to the other, both ways (:func:`afp.transfer.transfer`: ``afp tune``'s search from
the first pass's own point, 3 restarts, no cross-validation), each with the matched-pairs
significance against the first pass and against re-weighting only:

  (a) ``afp``: the AFP model exactly (lattice engine), replacing the first-pass LM
      (``old_lm_weight`` held at 0);
  (b) ``rnn``: a full-recurrence model of the same size scoring each hypothesis in full (icefall's
      n-best method, :func:`bench.baselines.nbest_scored`), replacing the first-pass LM;
  (c) ``afp+lm`` / ``rnn+lm``: the same models added to the first-pass LM (the joint search);
  (d) ``lm reweighted``: no new LM (``lm_weight`` held at 0): what re-weighting alone gives, so
      that (c)'s gain can be told apart from the new model's.

The options are what ``afp rescore`` builds (:func:`afp.options.build_options`, the model's own
unknown-word penalty) with the recogniser's named weights ``decoder=0.6, ctc=0.4`` (SOURCES.md).
Speed: tokens per second of the AFP engine per utterance and with many utterances' (context, word)
pairs merged into one model call, against the full-recurrence model scoring every hypothesis, in
one run, and how many distinct contexts AFP scored against the number of tokens.

Writes ``bench/results/wer_librispeech.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import RESULTS, SHARED_DATA, bundled_afp, environment, pyplot, save_figure, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SETS = ("dev_clean", "dev_other")
SCORE_WEIGHTS = {"decoder": 0.6, "ctc": 0.4}
#: the full-recurrence baseline (b), as ``bench.train_bundled librispeech`` trains it
BASELINE = RESULTS / "bundled" / "librispeech" / "gru-h256-exact"
#: each system's held weights (None: the joint search over all four)
SYSTEMS: dict[str, dict[str, float] | None] = {"lm reweighted": {"lm_weight": 0.0}, "afp": {"old_lm_weight": 0.0},
                                               "afp+lm": None}


def load_set(name: str, limit: int | None) -> tuple[list[Any], dict[str, list[str]]]:
    from afp.wer import match_references, read_references
    from lattices.formats.nbest import read_espnet_nbest

    lists = read_espnet_nbest(NBEST / name)[:limit]
    return lists, match_references(read_references(NBEST / name / "ref_wer.trn"), [n.key for n in lists])


def oov_rate(lists: list[Any], vocab: Any) -> dict[str, float]:
    """Share of running words outside the model vocabulary: all hypotheses, and the 1-best."""
    words = [w for n in lists for h in n.hypotheses for w in h.words]
    first = [w for n in lists for w in n.hypotheses[0].words]
    return {"all_hypotheses": sum(w not in vocab for w in words) / max(1, len(words)),
            "first_best": sum(w not in vocab for w in first) / max(1, len(first))}


def cross_tuned(tuners: dict[str, Any], hold: dict[str, float] | None,
                reweighted: dict[str, list[int]] | None) -> tuple[dict[str, Any], dict[str, list[int]]]:
    """Each set's result tuned on the other (keys ``"SET (tuned on OTHER)"``, as the report reads
    them) and each set's per-utterance errors."""
    from afp.transfer import transfer

    others = {"reweighted": reweighted} if reweighted else None
    results, errors = {}, {}
    for applied in transfer(tuners, hold=hold, folds=1, others=others):
        decoded = applied.decoded
        results[f"{applied.applied_to} (tuned on {applied.tuned_on})"] = {
            "wer": decoded.wer, "point": applied.tuned.point, "tuned_wer": applied.tuned.wer,
            **{f"against_{name.replace(' ', '_')}": c.to_json() for name, c in decoded.against.items()}}
        errors[applied.applied_to] = list(decoded.errors)
    return results, errors


def speed(lists: list[Any], afp: Any, engine_s: float, tuner: Any, rnn: Any) -> dict[str, Any]:
    """AFP engine per utterance (``engine_s``, the tuner's scoring), AFP merged pairs, full recurrence
    per hypothesis: seconds and tokens/s, side by side."""
    from lm.corpus import encode
    from lm.evaluate import score_corpus
    from lm.scorer import LMScorer, score_sentences, sentence_pairs

    hyps = [list(h.words) for n in lists for h in n.hypotheses]
    tokens = sum(len(h) + 1 for h in hyps)
    scorer, merged, started = LMScorer(afp), [], time.perf_counter()
    for first in range(0, len(lists), 200):
        chunk = [list(h.words) for n in lists[first:first + 200] for h in n.hypotheses]
        merged += [float(t.sum()) for t in score_sentences(scorer, chunk)]
    merged_s = time.perf_counter() - started
    ids = [afp.vocab.encode(h) for h in hyps]
    contexts = sentence_pairs(ids, afp.vocab.bos_id, afp.vocab.eos_id, afp.config.context_size)[0].shape[0]
    engine_lm = [float(row[-3]) for u in tuner.utterances for row in u.hyp_parts]
    out = {"afp_engine_s": engine_s, "afp_merged_s": merged_s, "afp_engine_hyps_per_s": len(hyps) / engine_s,
           "afp_engine_tokens_per_s": tokens / engine_s, "afp_merged_hyps_per_s": len(hyps) / merged_s,
           "afp_merged_tokens_per_s": tokens / merged_s, "afp_distinct_contexts": contexts, "tokens": tokens,
           "contexts_per_token": contexts / tokens,
           "afp_engine_vs_merged_max_abs_diff": max(abs(a - b) for a, b in zip(engine_lm, merged))}
    if rnn is not None:
        started = time.perf_counter()
        score_corpus(rnn.model, encode(hyps, rnn.vocab))
        rnn_s = time.perf_counter() - started
        out.update({"rnn_s": rnn_s, "rnn_hyps_per_s": len(hyps) / rnn_s, "rnn_tokens_per_s": tokens / rnn_s,
                    "rnn_over_afp_engine": rnn_s / engine_s, "rnn_over_afp_merged": rnn_s / merged_s})
    return out


def main() -> None:
    from afp.options import build_options
    from afp.tune import Tuner
    from bench.baselines import nbest_scored
    from lattices.formats.nbest import nbest_to_lattice
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--afp", type=Path, default=bundled_afp("librispeech"))
    parser.add_argument("--baseline", type=Path, default=BASELINE,
                        help="full-recurrence model of the same size (mode exact); default: %(default)s, used "
                             "when trained")
    parser.add_argument("--train-baseline", action="store_true",
                        help="train (or finish) the default baseline first; resumable")
    parser.add_argument("--limit", type=int, help="only the first N utterances of each set")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS / "wer_librispeech.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not NBEST.is_dir():
        raise SystemExit(f"{NBEST} is missing: this needs ../shared/data")
    if args.train_baseline:
        from bench.train_bundled import train_candidates

        train_candidates("librispeech", [BASELINE.name], threads=args.threads)
    afp = load_checkpoint(args.afp)
    if not (args.baseline / "model.safetensors").is_file():
        if args.baseline != BASELINE:
            raise SystemExit(f"--baseline {args.baseline}: no model.safetensors there")
        print(f"no baseline at {BASELINE} (train it with --train-baseline): systems (b) are left out", flush=True)
    rnn = load_checkpoint(args.baseline) if (args.baseline / "model.safetensors").is_file() else None
    fields = {"score_weights": SCORE_WEIGHTS, "max_kbest_paths": 64}
    report: dict[str, Any] = {"environment": environment(), "afp_model": str(args.afp), "afp": afp.info(),
                              "baseline_model": str(args.baseline) if rnn else None, "score_weights": SCORE_WEIGHTS,
                              "sets": {}, "speed": {}, "systems": {},
                              "method": "each system tuned by afp.transfer (afp tune's search from the first pass's "
                                        "own point, 3 restarts) on one set, applied to the other"}
    groups: dict[str, dict[str, Any]] = {"afp": {}, "rnn": {}}
    for name in SETS:
        lists, refs = load_set(name, args.limit)
        tuner = Tuner(LMScorer(afp), build_options(fields, unk_default=afp.default_unk_penalty), refs)
        started = time.perf_counter()
        tuner.add(nbest_to_lattice(n) for n in lists)
        groups["afp"][name] = tuner
        entry = {"utterances": len(lists), "oov_afp": oov_rate(lists, afp.vocab),
                 "first_pass_wer": tuner.first_pass().wer, "oracle_wer": tuner.oracle().wer}
        report["speed"][name] = speed(lists, afp, time.perf_counter() - started, tuner, rnn)
        if rnn is not None:
            entry["oov_rnn"] = oov_rate(lists, rnn.vocab)
            options = build_options(fields, unk_default=rnn.default_unk_penalty)
            groups["rnn"][name] = Tuner(None, options, refs)
            for n in lists:
                groups["rnn"][name].add_scored(nbest_scored(n, nbest_to_lattice(n), rnn, options))
        report["sets"][name] = entry
        print(name, entry, report["speed"][name], flush=True)
    reweighted = None
    for prefix, tuners in groups.items():
        for system, hold in SYSTEMS.items():
            if not tuners or (prefix == "rnn" and system == "lm reweighted"):
                continue
            label = system.replace("afp", prefix)
            results, errors = cross_tuned(tuners, hold, reweighted)
            reweighted = reweighted or errors
            report["systems"][label] = {"results": results}
            print(label, {k: round(v["wer"], 3) for k, v in results.items()}, flush=True)
    write_json(args.out, report)
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def plot(report: dict[str, Any], path: Path) -> None:
    """Each system's WER on each set (tuned on the other), beside the first pass and the oracle."""
    plt = pyplot()
    sets, labels = list(report["sets"]), list(report["systems"])
    fig, axes = plt.subplots(1, len(sets), figsize=(11, 4.2), squeeze=False)
    for ax, name in zip(axes[0], sets):
        wers = [next(v["wer"] for k, v in report["systems"][label]["results"].items() if k.startswith(name))
                for label in labels]
        ax.bar(range(len(labels)), wers, color="tab:blue")
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
        ax.axhline(report["sets"][name]["first_pass_wer"], color="black", linestyle=":", label="first pass")
        ax.axhline(report["sets"][name]["oracle_wer"], color="grey", linestyle=":", label="oracle (30-best)")
        ax.set_ylim(min([*wers, report["sets"][name]["oracle_wer"]]) * 0.9,
                    max([*wers, report["sets"][name]["first_pass_wer"]]) * 1.05)
        ax.set_title(f"LibriSpeech {name}: tuned on the other set")
        ax.set_ylabel("WER (%)")
        ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
