"""Word error rates of n-best rescoring on real recogniser output (LibriSpeech dev, ESPnet 30-best).

  python -m bench.wer                       # models/librispeech (+ the exact baseline when trained)
  python -m bench.wer --train-baseline      # trains the baseline first (about 1 h on 2 CPU cores)
  python -m bench.wer --baseline DIR --limit 300        # a quick look

The baseline (b) is ``bench.train_bundled``'s ``librispeech`` candidate ``gru-h256-exact``, trained
into ``bench/results/bundled/librispeech/gru-h256-exact`` (weights gitignored) by
``--train-baseline`` or ``python -m bench.train_bundled librispeech --only gru-h256-exact --no-install``.

For each dev set: the first pass's WER, the oracle of the lists, and after rescoring, every system
tuned on one dev set and applied to the other (both directions), by ``afp tune``'s joint search
(MERT coordinate descent with exact line searches from the first pass's own point, 3 restarts),
each with the matched-pairs significance against the first pass and against re-weighting only:

  (a) ``afp``: the AFP model exactly (lattice engine), replacing the first-pass LM
      (``old_lm_weight`` 0);
  (b) ``rnn``: a full-recurrence model of the same size scoring each hypothesis in full (icefall's
      n-best method), replacing the first-pass LM, tuned the same way;
  (c) ``afp+lm`` / ``rnn+lm``: the same models added to the first-pass LM (``old_lm_weight > 0``);
  (d) ``lm reweighted``: no new LM at all (``lm_weight`` 0), the first-pass LM weight, word and
      unknown-word penalties tuned the same way: what re-weighting alone gives, so that (c)'s
      gain can be told apart from the new model's.

The recogniser's own combination is ``0.6 decoder + 0.4 ctc + 0.6 lm`` (SOURCES.md); the named
weights stay ``decoder=0.6, ctc=0.4`` and the search tunes the LM weights, the word penalty and
the unknown-word penalty (MBR decoding is tuned by ``afp tune --mbr``'s grid, not here).
Speed: hypotheses and tokens per second of the AFP engine (per
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

from bench.common import RESULTS, SHARED_DATA, bundled_afp, environment, pyplot, save_figure, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SETS = ("dev_clean", "dev_other")
SCORE_WEIGHTS = (("decoder", 0.6), ("ctc", 0.4))
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


#: each system's weights: fixed ones, and those the search tunes (afp tune's joint MERT search,
#: from the first pass's own point with the fixed ones set)
SYSTEMS = {
    "lm reweighted": ({"lm_weight": 0.0}, ["old_lm_weight", "word_penalty", "unk_penalty"]),
    "afp": ({"old_lm_weight": 0.0}, ["lm_weight", "word_penalty", "unk_penalty"]),
    "afp+lm": ({}, ["lm_weight", "old_lm_weight", "word_penalty", "unk_penalty"]),
}


def tuned_point(tuner: Any, fixed: dict[str, float], free: list[str], restarts: int = 3) -> dict[str, float]:
    """The point ``afp tune``'s search finds on ``tuner``'s set with ``fixed`` weights held."""
    from afp import mert
    from afp.tune import first_pass_point, mert_problem

    start, _ = first_pass_point(tuner)
    return mert.search(mert_problem(tuner, tuner.utterances), {**start, **fixed}, free, restarts=restarts).point


def cross_tune(tuners: dict[str, Any], fixed: dict[str, float], free: list[str],
               against: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """Tune on each set, apply to the other: per set its WER at the other set's point (and at its
    own), with the matched-pairs significance against the first pass and against ``against``
    (each set's per-utterance errors of another system, e.g. re-weighting only)."""
    from afp.significance import compare
    from afp.tune import utterance_errors

    points = {s: tuned_point(t, fixed, free) for s, t in tuners.items()}
    out: dict[str, Any] = {}
    errors: dict[str, list[int]] = {}
    for target, tuner in tuners.items():
        first = [u.first_pass.errors for u in tuner.utterances]
        words = [u.first_pass.ref_words for u in tuner.utterances]
        for source in tuners:
            if source == target and len(tuners) > 1:
                continue
            applied = utterance_errors(tuner, points[source])
            errors[target] = applied
            key = target if source == target else f"{target} (tuned on {source})"
            out[key] = {"wer": 100.0 * sum(applied) / sum(words), "point": points[source],
                        "against_first_pass": compare(first, applied, words).to_json()}
            if against is not None:
                out[key]["against_reweighted"] = compare(against[target], applied, words).to_json()
        own = utterance_errors(tuner, points[target])
        out[f"{target} (own best)"] = {"wer": 100.0 * sum(own) / sum(words), "point": points[target]}
    return {"results": out, "errors": errors}


def main() -> None:
    from lattices.formats.nbest import nbest_to_lattice
    from lattices.rescore import RescoreOptions
    from lm.checkpoint import load_checkpoint
    from lm.corpus import encode
    from lm.evaluate import score_corpus
    from lm.scorer import LMScorer, score_sentences
    from afp.tune import Tuner

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
    options = RescoreOptions(score_weights=SCORE_WEIGHTS, max_kbest_paths=64)
    data = {s: load_set(s, args.limit) for s in SETS}
    report: dict[str, Any] = {"environment": environment(), "afp_model": str(args.afp), "afp": afp.info(),
                              "baseline_model": str(args.baseline) if rnn else None,
                              "score_weights": dict(SCORE_WEIGHTS),
                              "sets": {}, "speed": {}}
    afp_tuners, rnn_tuners = {}, {}
    for name, (lists, refs) in data.items():
        hyps = [list(h.words) for n in lists for h in n.hypotheses]
        tokens = sum(len(h) + 1 for h in hyps)
        entry: dict[str, Any] = {"utterances": len(lists), "hypotheses": len(hyps), "tokens": tokens,
                                 "oov_afp": oov_rate(lists, afp.vocab)}

        tuner = Tuner(LMScorer(afp), options, refs)
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
            rnn_tuner = Tuner(None, options, refs)
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

    report["method"] = ("each system tuned by afp tune's joint search (MERT coordinate descent with exact line "
                        "searches from the first pass's own point, 3 restarts) on one set, applied to the other")
    report["systems"] = {}
    groups = [("", afp_tuners)] + ([("rnn", rnn_tuners)] if rnn_tuners else [])
    reweighted: dict[str, list[int]] | None = None
    for prefix, tuners in groups:
        for system, (fixed, free) in SYSTEMS.items():
            if prefix and system == "lm reweighted":
                continue
            label = system.replace("afp", prefix) if prefix else system
            found = cross_tune(tuners, fixed, free, reweighted)
            if system == "lm reweighted":
                reweighted = found["errors"]
            report["systems"][label] = {"results": found["results"]}
            print(label, {k: round(v["wer"], 3) for k, v in found["results"].items()}, flush=True)
    write_json(args.out, report)
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out}")


def plot(report: dict[str, Any], path: Path) -> None:
    """Each system's WER on each set (tuned on the other), beside the first pass and the oracle."""
    plt = pyplot()
    sets = list(report["sets"])
    labels = list(report["systems"])
    fig, axes = plt.subplots(1, len(sets), figsize=(11, 4.2), squeeze=False)
    for ax, name in zip(axes[0], sets):
        wers = [next(v["wer"] for k, v in report["systems"][label]["results"].items()
                     if k.startswith(name) and "tuned on" in k) for label in labels]
        ax.bar(range(len(labels)), wers, color="tab:blue")
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
        ax.axhline(report["sets"][name]["first_pass_wer"], color="black", linestyle=":", label="first pass")
        ax.axhline(report["sets"][name]["oracle_wer"], color="grey", linestyle=":", label="oracle (30-best)")
        low = min([*wers, report["sets"][name]["oracle_wer"]])
        ax.set_ylim(low * 0.9, max([*wers, report["sets"][name]["first_pass_wer"]]) * 1.05)
        ax.set_title(f"LibriSpeech {name}: tuned on the other set")
        ax.set_ylabel("WER (%)")
        ax.legend(fontsize=7)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
