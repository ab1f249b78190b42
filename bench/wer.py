"""Word error rates of n-best rescoring on real recogniser output (LibriSpeech dev, ESPnet 30-best).

  python -m bench.wer                       # models/librispeech (+ the exact baseline when trained)
  python -m bench.wer --train-baseline      # trains the baseline first (about 1 h on 2 CPU cores)
  python -m bench.wer --baseline DIR --limit 300        # a quick look

The baseline (b) is ``bench.train_bundled``'s ``librispeech`` candidate ``gru-h256-exact``, trained
into ``bench/results/bundled/librispeech/gru-h256-exact`` (weights gitignored) by
``--train-baseline`` or ``python -m bench.train_bundled librispeech --only gru-h256-exact --no-install``.

For each dev set: the first pass's WER, the oracle of the lists, and after rescoring, every system
tuned on one dev set and applied to the other (both directions):

  (a) ``afp``: the AFP model exactly (lattice engine), replacing the first-pass LM
      (``old_lm_weight`` 0), Viterbi and MBR;
  (b) ``rnn``: a full-recurrence model of the same size scoring each hypothesis in full (icefall's
      n-best method), replacing the first-pass LM, tuned the same way;
  (c) ``afp+lm`` / ``rnn+lm``: the same models added to the first-pass LM (``old_lm_weight > 0``);
  (d) ``lm reweighted``: no new LM at all (``lm_weight`` 0), the first-pass LM weight, word and
      unknown-word penalties tuned on the same grid: what re-weighting alone gives, so that (c)'s
      gain can be told apart from the new model's.

The recogniser's own combination is ``0.6 decoder + 0.4 ctc + 0.6 lm`` (SOURCES.md); the named
weights stay ``decoder=0.6, ctc=0.4`` and the grid tunes the LM weights, the word penalty and
the unknown-word penalty. Speed: hypotheses and tokens per second of the AFP engine (per
utterance, and with many utterances' (context, word) pairs merged into one model call) against
the full-recurrence model scoring every hypothesis, in one run, and how many distinct contexts
AFP scored against the number of tokens.

Writes ``bench/results/wer_librispeech.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, environment, pyplot, save_figure, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SETS = ("dev_clean", "dev_other")
SCORE_WEIGHTS = (("decoder", 0.6), ("ctc", 0.4))
LM_WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
OLD_LM_WEIGHTS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
WORD_PENALTIES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
UNK_PENALTIES = (0.0, -2.0, -5.0, -10.0)
MBR_SCALES = (0.5, 1.0, 2.0)
#: the full-recurrence baseline (b), as ``bench.train_bundled librispeech`` trains it
BASELINE = RESULTS / "bundled" / "librispeech" / "gru-h256-exact"


def load_set(name: str, limit: int | None) -> tuple[list[Any], dict[str, list[str]]]:
    from lattices.formats.nbest import read_espnet_nbest
    from afp.wer import match_references, read_references

    lists = read_espnet_nbest(NBEST / name)[:limit]
    refs = match_references(read_references(NBEST / name / "ref_wer.trn"), [n.key for n in lists])
    return lists, refs


def oov_rate(lists: list[Any], vocab: Any) -> dict[str, float]:
    """Share of running words outside the model vocabulary: all hypotheses, and the 1-best."""
    words = [w for n in lists for h in n.hypotheses for w in h.words]
    first = [w for n in lists for w in n.hypotheses[0].words]
    return {"all_hypotheses": sum(w not in vocab for w in words) / max(1, len(words)),
            "first_best": sum(w not in vocab for w in first) / max(1, len(first))}


def table_parts(nbest: Any, names: tuple[str, ...], logprobs: list[float], vocab: Any) -> torch.Tensor:
    """``(H, C)`` components of an n-best list under a sentence scorer (:mod:`lattices.scored`)."""
    rows = []
    named = names[:-4]
    for hyp, lp in zip(nbest.hypotheses, logprobs):
        rows.append([hyp.scores[n] for n in named] + [hyp.scores["lm"], lp, float(vocab.count_oov(list(hyp.words))),
                                                     float(len(hyp.words))])
    return torch.tensor(rows, dtype=torch.float64)


def grid_points(lm_weights: tuple[float, ...], old_weights: tuple[float, ...]) -> list[dict[str, float]]:
    from afp.tune import Grid

    return Grid(lm_weights, old_weights, WORD_PENALTIES, UNK_PENALTIES).points()


def cross_tune(tuners: dict[str, Any], lm_weights: tuple[float, ...], old_weights: tuple[float, ...],
               mbr: bool) -> dict[str, Any]:
    """Tune on each set, apply to the other: per set its WER at its own best point and at the other's.
    MBR tunes its posterior scale too (:data:`MBR_SCALES`)."""
    import numpy

    points = grid_points(lm_weights, old_weights)
    if mbr:
        points = [{**p, "mbr_scale": scale} for scale in MBR_SCALES for p in points]
        errors = {s: numpy.concatenate([t.evaluate(points[:len(points) // len(MBR_SCALES)], mbr=True, mbr_scale=x)
                                        for x in MBR_SCALES]) for s, t in tuners.items()}
    else:
        errors = {s: t.evaluate(points) for s, t in tuners.items()}
    refs = {s: t.first_pass().ref_words for s, t in tuners.items()}
    best = {s: int(errors[s].argmin()) for s in tuners}
    out: dict[str, Any] = {}
    for target in tuners:
        for source in tuners:
            if source == target and len(tuners) > 1:
                continue
            key = f"{target}" if source == target else f"{target} (tuned on {source})"
            out[key] = {"wer": 100.0 * int(errors[target][best[source]]) / refs[target], "point": points[best[source]]}
        out[f"{target} (own best)"] = {"wer": 100.0 * int(errors[target][best[target]]) / refs[target],
                                       "point": points[best[target]]}
    curves = {}
    for s in tuners:  # WER against the (new or, with no new LM, old) LM weight at the set's best other weights
        b = points[best[s]]
        axis = "lm_weight" if len(lm_weights) > 1 else "old_lm_weight"
        fixed = tuple(k for k in ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "mbr_scale") if k != axis)
        curves[s] = [(p[axis], 100.0 * int(e) / refs[s]) for p, e in zip(points, errors[s])
                     if all(p.get(k) == b.get(k) for k in fixed)]
    return {"results": out, "curves": curves, "curve_axis": axis}


def main() -> None:
    from lattices.formats.nbest import nbest_to_lattice
    from lattices.rescore import RescoreOptions
    from lm.checkpoint import load_checkpoint
    from lm.corpus import encode
    from lm.evaluate import score_corpus
    from lm.scorer import LMScorer, score_sentences
    from afp.tune import Tuner

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--afp", type=Path, default=REPO_ROOT / "models" / "librispeech")
    parser.add_argument("--baseline", type=Path, default=BASELINE,
                        help="full-recurrence model of the same size (mode exact); default: %(default)s, used "
                             "when trained")
    parser.add_argument("--train-baseline", action="store_true",
                        help="train (or finish) the default baseline first; resumable")
    parser.add_argument("--limit", type=int, help="only the first N utterances of each set")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mbr-scale", type=float, default=1.0)
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
    options = RescoreOptions(score_weights=SCORE_WEIGHTS, mbr_scale=args.mbr_scale, max_kbest_paths=64)
    data = {s: load_set(s, args.limit) for s in SETS}
    report: dict[str, Any] = {"environment": environment(), "afp_model": str(args.afp), "afp": afp.info(),
                              "baseline_model": str(args.baseline) if rnn else None,
                              "score_weights": dict(SCORE_WEIGHTS), "mbr_scale": args.mbr_scale,
                              "grid": {"lm_weights": LM_WEIGHTS, "old_lm_weights": OLD_LM_WEIGHTS,
                                       "word_penalties": WORD_PENALTIES, "unk_penalties": UNK_PENALTIES,
                                       "mbr_scales": MBR_SCALES},
                              "sets": {}, "speed": {}}
    afp_tuners, rnn_tuners = {}, {}
    for name, (lists, refs) in data.items():
        hyps = [list(h.words) for n in lists for h in n.hypotheses]
        tokens = sum(len(h) + 1 for h in hyps)
        entry: dict[str, Any] = {"utterances": len(lists), "hypotheses": len(hyps), "tokens": tokens,
                                 "oov_afp": oov_rate(lists, afp.vocab)}

        tuner = Tuner(LMScorer(afp), options, refs, mbr=True)
        started = time.perf_counter()
        tuner.add(nbest_to_lattice(n) for n in lists)
        engine_s = time.perf_counter() - started
        afp_tuners[name] = tuner
        entry["first_pass_wer"] = tuner.first_pass().wer
        entry["oracle_wer"] = tuner.oracle().wer
        first_pass_point = {"lm_weight": 0.0, "old_lm_weight": 0.6, "word_penalty": 0.0, "unk_penalty": 0.0}
        entry["first_pass_wer_recombined"] = 100.0 * int(tuner.evaluate([first_pass_point])[0]) / tuner.first_pass().ref_words

        # speed, side by side: AFP engine per utterance, AFP merged pairs, full recurrence per hypothesis
        scorer = LMScorer(afp)
        started = time.perf_counter()
        merged = []
        for start in range(0, len(lists), 200):
            chunk = [list(h.words) for n in lists[start:start + 200] for h in n.hypotheses]
            merged += [float(t.sum()) for t in score_sentences(scorer, chunk)]
        merged_s = time.perf_counter() - started
        from lm.scorer import sentence_pairs

        ids = [afp.vocab.encode(h) for h in hyps]
        contexts = sentence_pairs(ids, afp.vocab.bos_id, afp.vocab.eos_id, afp.config.context_size)[0].shape[0]
        engine_lm = [float(row[-3]) for u in tuner.utterances for row in u.hyp_parts]
        speed = {"afp_engine_s": engine_s, "afp_merged_s": merged_s,
                 "afp_engine_hyps_per_s": len(hyps) / engine_s, "afp_engine_tokens_per_s": tokens / engine_s,
                 "afp_merged_hyps_per_s": len(hyps) / merged_s, "afp_merged_tokens_per_s": tokens / merged_s,
                 "afp_distinct_contexts": contexts, "tokens": tokens, "contexts_per_token": contexts / tokens,
                 "afp_engine_vs_merged_max_abs_diff": max(abs(a - b) for a, b in zip(engine_lm, merged))}
        if rnn is not None:
            entry["oov_rnn"] = oov_rate(lists, rnn.vocab)
            started = time.perf_counter()
            scored = score_corpus(rnn.model, encode(hyps, rnn.vocab))
            rnn_s = time.perf_counter() - started
            speed.update({"rnn_s": rnn_s, "rnn_hyps_per_s": len(hyps) / rnn_s, "rnn_tokens_per_s": tokens / rnn_s,
                          "rnn_over_afp_engine": rnn_s / engine_s, "rnn_over_afp_merged": rnn_s / merged_s})
            logprobs = [float(t.sum()) for t in scored.token_logprobs]
            rnn_tuner = Tuner(None, options, refs, mbr=True)
            names = tuner.names
            position = 0
            for n in lists:
                count = len(n.hypotheses)
                rnn_tuner.add_table(n.key, refs[n.key], [list(h.words) for h in n.hypotheses],
                                    table_parts(n, names, logprobs[position:position + count], rnn.vocab), names)
                position += count
            rnn_tuners[name] = rnn_tuner
        report["speed"][name] = speed
        report["sets"][name] = entry
        print(name, {k: v for k, v in entry.items()}, speed, flush=True)

    systems = {"lm reweighted": (afp_tuners, (0.0,), OLD_LM_WEIGHTS[1:]),
               "afp": (afp_tuners, LM_WEIGHTS, (0.0,)), "afp+lm": (afp_tuners, LM_WEIGHTS, OLD_LM_WEIGHTS[1:])}
    if rnn_tuners:
        systems.update({"rnn": (rnn_tuners, LM_WEIGHTS, (0.0,)), "rnn+lm": (rnn_tuners, LM_WEIGHTS, OLD_LM_WEIGHTS[1:])})
    report["systems"] = {}
    for system, (tuners, new, old) in systems.items():
        for mbr in (False, True):
            label = f"{system}{' mbr' if mbr else ''}"
            report["systems"][label] = cross_tune(tuners, new, old, mbr)
            print(label, {k: round(v["wer"], 3) for k, v in report["systems"][label]["results"].items()}, flush=True)
    write_json(args.out, report)
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(report["sets"]), figsize=(11, 4.2), squeeze=False)
    for ax, name in zip(axes[0], report["sets"]):
        for label, system in report["systems"].items():
            curve = system["curves"].get(name)
            if system.get("curve_axis", "lm_weight") != "lm_weight":  # no new LM: its tuned WER as a line
                tuned = next(v["wer"] for k, v in system["results"].items() if k.startswith(name) and "tuned on" in k)
                ax.axhline(tuned, color="tab:brown", linestyle="-." if "mbr" in label else "--", label=label)
            elif curve:
                ax.plot([x for x, _ in curve], [y for _, y in curve], marker="." if "mbr" in label else "o",
                        linestyle="--" if "mbr" in label else "-", label=label)
        ax.axhline(report["sets"][name]["first_pass_wer"], color="black", linestyle=":", label="first pass")
        ax.axhline(report["sets"][name]["oracle_wer"], color="grey", linestyle=":", label="oracle (30-best)")
        ax.set_title(f"LibriSpeech {name}: WER against LM weight")
        ax.set_xlabel("new LM weight (other weights at the set's best)")
        ax.set_ylabel("WER (%)")
        ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
