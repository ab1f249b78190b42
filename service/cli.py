"""The ``afp`` command line: a thin layer over ``lm`` (and, later, ``lattices`` and the server).

Commands:
  afp info   [--model DIR] [--json]                 what a model is
  afp ppl    [--model DIR] --text FILE [--json]     perplexity of a text (one sentence per line)
  afp score  [--model DIR] --text FILE [--json]     per-sentence and per-token log-probabilities
  afp prepare --text FILE... --out DIR [options]    tokenize a corpus once into memory-mapped shards
  afp ngram  (--text FILE... | --data DIR) --order N [--prune T] --out LM.arpa[.gz] | --store DIR   a modified Kneser-Ney n-gram
  afp mix    --text DEV --out DIR MODEL...          EM interpolation weights; a mixture --model DIR loads
  afp train  [--config FILE] (--train FILE | --data DIR) --out DIR [options]   train a model
  afp rescore [--model DIR] [options] INPUT...       rescore lattices or n-best lists exactly
  afp tune   [--model DIR] --refs REFS INPUT...     choose weights on a dev set by WER (joint search)
  afp wer    --refs REFS HYP [HYP...]               WER, its breakdown and the significance of differences
  afp rescore-cuts --cuts CUTS --out CUTS            rescore the lattices a lhotse CutSet names
  afp serve  [--model DIR] [options]                the HTTP server

Without ``--model`` the bundled default model is used (see :mod:`afp.defaults`).
Errors in user input print one line ``afp: error: ...`` and exit with status 2; when standard
output is closed early (``afp rescore ... | head``) the command stops quietly with status 141.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from afp.defaults import default_model_dir

#: what ``afp train`` trains when the command line names no model (the shipped models' kind: a GRU
#: AFP-4 with an adaptive softmax, models/librispeech); the ModelConfig defaults stay the library's
TRAIN_MODEL_DEFAULTS: dict[str, Any] = {"cell": "gru", "mode": "afp", "rho": 4, "hidden": 256, "softmax": "adaptive"}

#: one-line help for the training options generated from the config dataclasses
_HELP = {
    "arch": "rnn (recurrent cell) or ffnn (feed-forward n-gram)",
    "cell": "elman, lstm, gru or scrn",
    "layers": "stacked layers", "hidden": "hidden units per layer",
    "activation": "Elman non-linearity: tanh or sigmoid",
    "context_units": "SCRN slow context units", "decay": "SCRN context decay", "learn_decay": "learn SCRN decay per unit",
    "embedding": "embedding width (default: hidden)",
    "mode": "exact (full recurrence, BPTT) or afp (rho fixed-point iterations)",
    "rho": "AFP iterations = tokens of context", "order": "n of an ffnn n-gram model",
    "tie_weights": "share embedding and output weights", "dropout": "dropout on embeddings and output features",
    "softmax": "full, or adaptive (a head of frequent words plus low-rank tail clusters: much faster for large "
               "vocabularies, still exact)",
    "cutoffs": "adaptive softmax cluster boundaries, e.g. 2000,10000 (default: by vocabulary size)",
    "div_value": "adaptive softmax: each tail cluster's projection is this many times narrower",
    "train": "training text (one sentence per line) or lhotse cuts/supervisions manifest",
    "data": "a directory written by afp prepare (instead of --train): memory-mapped shards, their vocabulary "
            "and validation split",
    "batch_tokens": "token budget: length-bucketed batches of at most this many padded positions (replaces "
                    "--batch-size)",
    "valid": "validation text, for the best-checkpoint choice", "words_txt": "read the vocabulary from a Kaldi words.txt",
    "max_vocab": "keep at most this many words", "min_count": "drop rarer words to <unk>",
    "epochs": "training epochs", "batch_size": "sentences per batch", "lr": "Adam learning rate",
    "lr_decay": "multiply lr by this after an epoch without validation gain",
    "weight_decay": "Adam weight decay", "clip": "gradient-norm clipping (0 = off)",
    "init_range": "uniform init range", "detach": "FPI|theta: no gradient through earlier iterations",
    "seed": "random seed", "device": "auto, cpu, cuda, cuda:N", "num_threads": "CPU threads",
    "max_train_sentences": "use only the first N training sentences",
    "precision": "fp32, bf16 (bfloat16 autocast in the training forward pass), or auto (bf16 where the device computes it natively: CUDA, AVX512-BF16/AMX CPUs)",
    "tf32": "TF32 tensor-core matmuls in CUDA training steps (default on; validation and scoring stay float32)",
    "checkpoint_every_steps": "also save the resume state every N optimizer steps, not only at epoch ends",
    "checkpoint_every_minutes": "also save the resume state every M minutes",
    "max_steps": "stop after N optimizer steps in all, with a resume state (continue with --resume)",
    "eval_max_elements": "validation holds at most this many output-layer logits at once",
}


class CLIError(Exception):
    """A user error the CLI reports in one line."""


def _load(model_dir: str | None, device: str = "cpu"):
    """``--model``: a model directory or an ARPA n-gram (``.arpa``, ``.arpa.gz``)."""
    from afp.mixtures import open_model

    return open_model(model_dir or default_model_dir(), device=_device(device))


def _device(name: str) -> str:
    from lm.device import resolve_device

    return str(resolve_device(name))


def _read_text(path: str, keep_empty: bool) -> Iterator[list[str]]:
    """The sentences of ``path`` (``-``: stdin), streaming, boundaries stripped as
    :func:`lm.corpus.iter_sentences` strips them."""
    from lm.corpus import iter_sentences

    return iter_sentences("/dev/stdin" if path == "-" else path, keep_empty=keep_empty)


# ---------------------------------------------------------------------------- commands
def cmd_info(args: argparse.Namespace) -> None:
    loaded = _load(args.model, args.device)
    info = {**loaded.info(), "score_precision": _scorer(loaded, args, windows=True).precision}
    if args.json:
        print(json.dumps(info))
        return
    for key, value in info.items():
        if key != "training":
            print(f"{key:>15}: {value}")
    for key in ("command", "epochs", "best_valid_ppl"):
        if key in info["training"]:
            print(f"{key:>15}: {info['training'][key]}")


def cmd_ppl(args: argparse.Namespace) -> None:
    from lm.scorer import text_score

    loaded = _load(args.model, args.device)
    result = text_score(_scorer(loaded, args, windows=True), _read_text(args.text, keep_empty=False)).to_json()
    if loaded.config.is_window:  # each word from the words around it: not a sentence probability
        result["pseudo"] = True
        result["note"] = (f"pseudo-perplexity of a window model ({loaded.config.rho} words before, "
                          f"{loaded.config.future} after each word): not comparable with a causal perplexity")
    if args.json:
        print(json.dumps(result))
    else:
        name = "pseudo-ppl" if loaded.config.is_window else "ppl"
        print(f"{name} {result['ppl']:.2f} over {result['tokens']} tokens in {result['sentences']} sentences "
              f"({result['oov']} unknown words scored as {loaded.vocab.unk})"
              + (f"; {result['note']}" if loaded.config.is_window else ""))


def cmd_score(args: argparse.Namespace) -> None:
    from lm.scorer import text_score

    def show(words: Sequence[str], token_logprobs: Any) -> None:
        values = token_logprobs.tolist()
        if args.json:
            print(json.dumps({"words": list(words), "logprob": sum(values), "token_logprobs": values}))
        else:
            print(f"{sum(values):.4f}\t{' '.join(words)}")

    loaded = _load(args.model, args.device)
    if loaded.config.is_window and not args.json:
        print(f"# acausal scores (pseudo-log-likelihoods) of a window model: each word given {loaded.config.rho} "
              f"words before and {loaded.config.future} after it", file=sys.stderr)
    text_score(_scorer(loaded, args, windows=True), _read_text(args.text, keep_empty=True), on_sentence=show)


def cmd_train(args: argparse.Namespace) -> None:
    from lm.config import ModelConfig, TrainConfig
    from lm.train import train

    model_fields, train_fields = {}, {}
    if args.config:
        data = _read_json(args.config)
        model_fields, train_fields = dict(data.get("model", {})), dict(data.get("train", {}))
        extra = sorted(set(data) - {"model", "train"})
        if extra:
            raise CLIError(f"{args.config}: unknown section(s) {extra}; expected 'model' and 'train'")
    saved = _saved_run_options(args.out) if args.resume else None
    if saved is not None:  # a resume reads the run's own options; what is given again overrides them
        model_fields, train_fields = {**saved[0], **model_fields}, {**saved[1], **train_fields}
    for cls, fields in ((ModelConfig, model_fields), (TrainConfig, train_fields)):
        for f in dataclasses.fields(cls):
            value = getattr(args, f.name, None)
            if value is not None:
                fields[f.name] = value
    if saved is None and model_fields.get("arch", "rnn") == "rnn":
        for name, value in TRAIN_MODEL_DEFAULTS.items():
            if name == "rho" and model_fields.get("mode", "afp") != "afp":
                continue
            model_fields.setdefault(name, value)
    if model_fields.get("mode") == "afp" and "rho" not in model_fields:
        raise CLIError("--mode afp needs --rho")
    if "rho" in model_fields and "mode" not in model_fields and model_fields.get("arch", "rnn") == "rnn":
        model_fields["mode"] = "afp"
    if "train" not in train_fields and "data" not in train_fields:
        raise CLIError("give --train FILE or --data DIR (or 'train' or 'data' in the config's 'train' section)")
    cfg = TrainConfig.from_dict(train_fields, where="training options")
    # fail before reading data (the vocabulary's size is checked against the options once it is known)
    model = ModelConfig.from_dict(model_fields, where="model options")
    record = {"command": " ".join(["afp", *args.argv])}
    result = train(model, cfg, args.out, resume=args.resume, record=record,
                   on_epoch=lambda m: print(json.dumps(m), file=sys.stderr) if args.verbose else None)
    if result.rank == 0:
        print(json.dumps({"out": args.out, "epochs": result.epochs_run, "steps": result.steps,
                          "best_valid_ppl": result.best_valid_ppl, "model": result.saved}))


def _saved_run_options(out: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The model and training options a run directory's resume state was saved with (None
    without one): ``afp train --out DIR --resume`` alone continues the run as it was."""
    from pathlib import Path

    from lm.resume import find_resume

    directory = find_resume(Path(out))
    if directory is None:
        return None
    config = _read_json(str(directory / "config.json"))
    state = _read_json(str(directory / "state.json"))
    model = dict(config.get("model", {}))
    model.pop("vocab_size", None)  # set from the data again (and checked against the saved weights)
    # --max-steps paused the run: resuming continues it (to its epochs, or a new --max-steps)
    train = {k: v for k, v in dict(state.get("train_config", {})).items() if v is not None and k != "max_steps"}
    return model, train


def cmd_prepare(args: argparse.Namespace) -> None:
    from lm.config import PrepareConfig
    from lm.shards import prepare

    fields = {name: getattr(args, name) for name in ("text", "out", "valid", "words_txt", "min_count", "max_vocab",
                                                     "shard_tokens") if getattr(args, name) is not None}
    meta = prepare(PrepareConfig.from_dict(fields, where="prepare options"))
    summary = {"out": args.out, "vocab_size": meta["vocab"]["size"]}
    for name, split in meta["splits"].items():
        summary[name] = {key: split[key] for key in ("sentences", "words", "tokens", "oov")}
        summary[name]["shards"] = len(split["shards"])
    print(json.dumps(summary))


def cmd_ngram(args: argparse.Namespace) -> None:
    from lm.ngram.job import NgramJob, NgramJobError, run_ngram_job

    job = NgramJob(text=tuple(args.text or ()), data=args.data, arpa=args.arpa, words_txt=args.words_txt,
                   min_count=args.min_count, max_vocab=args.max_vocab, order=args.order, prune=args.prune,
                   out=args.out, store=args.store)
    try:
        print(json.dumps(run_ngram_job(job)))
    except NgramJobError as err:
        raise CLIError(str(err)) from None


def cmd_mix(args: argparse.Namespace) -> None:
    from afp.mixtures import check_parts, estimate_weights, open_model, scorer_of, write_mixture

    check_parts(args.models)  # a mixture as a part is refused before any model is loaded or scored
    sentences = _read_text(args.text, keep_empty=False)
    loaded = [open_model(path, device=_device(args.device)) for path in args.models]
    scorers = [scorer_of(m, precision=args.score_precision or "auto") for m in loaded]
    weights, report = estimate_weights(scorers, list(sentences))
    write_mixture(args.out, args.models, weights, {"text": args.text, **report})
    print(json.dumps({"out": args.out, "models": args.models, "weights": weights, **report}))


def cmd_rescore(args: argparse.Namespace) -> None:
    from afp.jobs import Failure, default_shard, iter_lattices, parse_shard, rescore_all
    from afp.outputs import JobOutputs, LatticeOutputError, OutputOptions

    symbols = _read_symbols(args.words) if args.words else None
    shard = parse_shard(args.shard) if args.shard else default_shard()
    loaded = _load(args.model, args.device)
    options = _rescore_options(args, return_lattice=args.out is not None, unk_default=loaded.default_unk_penalty)
    outputs = JobOutputs(OutputOptions(out=args.out, nbest_text=args.nbest_text, text_dir=args.text_dir, ctm=args.ctm,
                                       frame_shift=args.frame_shift, json=args.json,
                                       show_first_pass=args.show_first_pass),
                         input_format=args.format, lm_weights=options.lm_weights, symbols=symbols,
                         rank=None if shard[1] == 1 or args.shard else shard[0])
    scorer = _scorer(loaded, args)
    old_lm = _old_lm(args.old_lm)
    features = _features(args, loaded)
    failed = seen = 0
    from afp.weights import SETS

    untuned = not args.weights and all(getattr(args, name, None) is None for name in SETS)
    if args.posteriors and not args.json and outputs.results_on_stdout:
        _warn("--posteriors: the transcript lines hold words only; the word posteriors are in --json output "
              "(best.word_posteriors) and in the --ctm confidence column")
    lattices = iter_lattices(args.inputs, args.format, symbols, shard)
    with outputs:
        for lattice_results in rescore_all(lattices, scorer, options, device=loaded.device.type, old_lm=old_lm,
                                           features=features,
                                           warn=_warn, workers=args.workers, batch_pairs=args.batch_pairs):
            seen += 1
            if untuned and not isinstance(lattice_results, Failure):
                from lattices.diagnostics import untuned_weights_warning

                first = lattice_results[0]
                _warn(untuned_weights_warning(first.stats, first.old_lm_weight, first.lm_weight)
                      + " (this warning is given once per job)")
                untuned = False
            if not isinstance(lattice_results, Failure):
                try:
                    outputs.write(lattice_results)
                    continue
                except LatticeOutputError as err:  # nothing of it was written
                    lattice_results = Failure(err.key, str(err))
            failed += 1  # this lattice failed; the job goes on
            outputs.failed(lattice_results)
            print(f"afp: error: {lattice_results.message}", file=sys.stderr)
    if seen == 0:
        _warn(f"no lattice was read from {', '.join(args.inputs)}" + (f" (shard {shard[0]}/{shard[1]})"
                                                                        if shard[1] > 1 else ""))
    if failed:
        raise CLIError(f"{failed} of {seen} lattice(s) could not be rescored or written (see above)")


def _warn(text: str) -> None:
    print(f"afp: warning: {text}", file=sys.stderr)


def cmd_tune(args: argparse.Namespace) -> None:
    from afp.jobs import iter_lattices
    from afp.tune import Tuner
    from afp.wer import read_references

    symbols = _read_symbols(args.words) if args.words else None
    grid_flags = ("lm_weights", "old_lm_weights", "word_penalties", "unk_penalties")
    grid_mode = args.grid or args.mbr or any(getattr(args, name) is not None for name in grid_flags)
    grid = _grid(args) if grid_mode else None
    if grid is not None:
        grid.points()  # validate before the long part
    refs = read_references(args.refs)
    loaded = _load(args.model, args.device)
    options = _rescore_options(args, unk_default=loaded.default_unk_penalty)
    tuner = Tuner(_scorer(loaded, args), options, refs, device=loaded.device.type, old_lm=_old_lm(args.old_lm),
                  features=_features(args, loaded),
                  mbr=args.mbr)
    tuner.add(iter_lattices(args.inputs, args.format, symbols), progress=sys.stderr.isatty())
    if grid is not None:
        _tune_grid(args, tuner, grid)
    else:
        _tune_joint(args, tuner)


def _grid(args: argparse.Namespace):
    from afp.tune import Grid

    return Grid(lm_weights=_floats(args.lm_weights or "0:1:0.1", "--lm-weights"),
                old_lm_weights=_floats(args.old_lm_weights or "0,0.5,1", "--old-lm-weights"),
                word_penalties=_floats(args.word_penalties or "0", "--word-penalties"),
                unk_penalties=_floats(args.unk_penalties or "0", "--unk-penalties"))


def _tune_joint(args: argparse.Namespace, tuner: Any) -> None:
    from afp.tune import chosen_weights, joint_tune
    from afp.wer import CASE_NOTE

    scores = tuple(n.strip() for n in (args.tune_score_weights or "").split(",") if n.strip())
    baseline = None
    if args.baseline:
        from afp.wer import read_hypotheses

        baseline = read_hypotheses(args.baseline)
    try:
        report = joint_tune(tuner, scores, restarts=args.restarts, folds=args.folds, seed=args.seed,
                            progress=sys.stderr.isatty(), baseline=baseline)
    except ValueError as err:
        raise CLIError(str(err)) from None
    best = report["best"]
    point = {k: v for k, v in best.items() if k not in ("wer", "errors", "against_first_pass")}
    chosen = report["chosen"]
    if args.save:
        record = {"wer": best["wer"], "first_pass_wer": report["first_pass_wer"],
                  "cross_validated_wer": report.get("cross_validated", {}).get("wer"),
                  "utterances": report["utterances"], "inputs": list(args.inputs), "refs": args.refs,
                  "model": str(args.model or "bundled default"), "command": " ".join(["afp", *args.argv]),
                  "chosen": chosen["reason"]}
        if chosen["point"] is None:
            print(json.dumps(report) if args.json else f"chosen: {chosen['reason']}")
            raise CLIError(f"--save {args.save}: nothing written: {chosen['reason']}")
        chosen_weights(tuner, report, record).write(args.save)
        report["saved"] = args.save
    if args.json:
        print(json.dumps(report))
        return

    def shown(p: dict[str, float]) -> str:
        return " ".join(f"{k.removeprefix('score:')} {v:.4g}" for k, v in p.items())

    oracle = f", oracle {report['oracle_wer']:.2f}%" if report["oracle_wer"] is not None else ""
    if report["ignore_case"]:
        print(f"note: {CASE_NOTE}")
    print(f"{report['utterances']} utterances, {report['ref_words']} reference words; first pass WER "
          f"{report['first_pass_wer']:.2f}%{oracle}")
    start = report["start"]
    agree = start["reproduces_first_pass"]
    print(f"start, the first pass's own weights (reproducing {agree:.1%} of its choices): WER {start['wer']:.2f}%  "
          f"[{shown(start['point'])}]" if agree == agree else f"start: WER {start['wer']:.2f}%  [{shown(start['point'])}]")
    print(f"tuned: WER {best['wer']:.2f}%  [{shown(point)}]")
    print(f"  against the first pass: {_comparison(best['against_first_pass'])}")
    if "cross_validated" in report:
        cv = report["cross_validated"]
        print(f"cross-validated ({cv['folds']} folds, each decoded with weights tuned on the others): WER "
              f"{cv['wer']:.2f}%")
        print(f"  against the first pass: {_comparison(cv['against_first_pass'])}")
    if "baseline" in report:
        b = report["baseline"]
        print(f"baseline ({args.baseline}): WER {b['wer']:.2f}%; the chosen point against it: "
              f"{_comparison(b['chosen_against_baseline'])}")
    shown_point = chosen["point"] is not None and not chosen["is_first_pass"]
    print(f"chosen: {chosen['reason']}" + (f"  [{shown(chosen['point'])}]" if shown_point else ""))
    if report["at_edge"]:
        print(f"warning: {', '.join(report['at_edge'])} ended at the edge of its range: the best value may lie beyond")
    print(f"{report['line_searches']} line searches in {report['seconds']:.1f} s "
          f"({report['evaluations_per_second']:.1f} evaluations/s; {report['method']})")
    if args.save:
        print(f"saved {args.save}: afp rescore --weights {args.save} ... applies them")


def _comparison(c: dict[str, Any]) -> str:
    return (f"{c['wer_a']:.2f}% -> {c['wer_b']:.2f}% ({c['difference']:+.2f}), matched pairs p={c['mapsswe']['p']:.3g}, "
            f"bootstrap 95% [{c['bootstrap']['low']:+.2f}, {c['bootstrap']['high']:+.2f}], P(better)="
            f"{c['bootstrap']['poi']:.3f}" + (" (significant)" if c["significant"] else " (not significant)"))


def _tune_grid(args: argparse.Namespace, tuner: Any, grid: Any) -> None:
    from afp.tune import chosen_weights, plot, tune
    from afp.wer import CASE_NOTE

    report = tune(tuner, grid, mbr=args.mbr, seed=args.seed)
    best = report["best"]
    if args.save:
        chosen_weights(tuner, report, {"wer": best["wer"], "first_pass_wer": report["first_pass_wer"],
                                       "grid": True}).write(args.save)
    if args.plot:
        plot(report, args.plot, title=f"afp tune: {' '.join(args.inputs)}"[:90])
    if args.json:
        print(json.dumps(report))
        return
    if report["ignore_case"]:
        print(f"note: {CASE_NOTE}")
    print(f"{len(tuner.utterances)} utterances, {report['ref_words']} reference words; first pass WER "
          f"{report['first_pass_wer']:.2f}%" + (f", oracle {report['oracle_wer']:.2f}%" if report["oracle_wer"]
                                               is not None else ""))
    print("lm_weight old_lm_weight word_penalty unk_penalty    WER" + ("    MBR" if args.mbr else ""))
    for row in sorted(report["grid"], key=lambda r: r["errors"])[: args.top]:
        line = (f"{row['lm_weight']:9g} {row['old_lm_weight']:13g} {row['word_penalty']:12g} "
                f"{row['unk_penalty']:11g} {row['wer']:6.2f}")
        print(line + (f" {row['mbr_wer']:6.2f}" if args.mbr else ""))
    print("best: " + " ".join(f"--{k.replace('_', '-')} {best[k]:g}" for k in (
        "lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")) + f"  (WER {best['wer']:.2f}%)")
    print(f"  against the first pass: {_comparison(report['best']['against_first_pass'])}")
    if best["wer"] > report["first_pass_wer"]:
        print("warning: no grid point reaches the first pass's WER: keep the first pass (--lm-weight 0 "
              "--old-lm-weight 1), or tune without a grid (the default search starts at the first pass)")
    if args.mbr:
        b = report["best_mbr"]
        print("best MBR: " + " ".join(f"--{k.replace('_', '-')} {b[k]:g}" for k in (
            "lm_weight", "old_lm_weight", "word_penalty", "unk_penalty")) + f" --decode mbr  (WER {b['wer']:.2f}%)")


def cmd_wer(args: argparse.Namespace) -> None:
    from afp.significance import compare
    from afp.wer import CASE_NOTE, read_hypotheses, read_references, score_transcripts

    refs = read_references(args.refs)
    systems = [(path, score_transcripts(refs, read_hypotheses(path, args.lm_weight))) for path in args.hypotheses]
    base_path, base = systems[0]
    rows = []
    for path, scored in systems:
        row: dict[str, Any] = {"hypotheses": path, **scored.total.to_json()}
        if scored is not base:
            if scored.keys != base.keys:
                raise CLIError(f"{path} and {base_path} hold different utterances ({len(scored.keys)} and "
                               f"{len(base.keys)}): a significance test needs the same ones")
            row["against_first"] = compare(base.errors, scored.errors, base.ref_words, seed=args.seed).to_json()
        rows.append(row)
    ignore_case = any(scored.ignore_case for _, scored in systems)
    if args.json:
        print(json.dumps({"refs": args.refs, "ignore_case": ignore_case, "systems": rows}))
        return
    if ignore_case:
        print(f"note: {CASE_NOTE}")
    print(f"{'WER':>7} {'sub':>6} {'del':>6} {'ins':>6} {'ref words':>9} {'utts':>6}  hypotheses")
    for row in rows:
        print(f"{row['wer']:6.2f}% {row['substitutions']:6d} {row['deletions']:6d} {row['insertions']:6d} "
              f"{row['ref_words']:9d} {row['sentences']:6d}  {row['hypotheses']}")
    for (path, scored), row in zip(systems[1:], rows[1:]):
        print(f"{path} against {base_path}: " + compare(base.errors, scored.errors, base.ref_words,
                                                         seed=args.seed).summary())


def _int_list(text: str) -> tuple[int, ...]:
    """``2000,10000`` -> ``(2000, 10000)`` (argparse reports a ValueError as a usage error)."""
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str, flag: str) -> tuple[float, ...]:
    """``0,0.1,0.2`` or a range ``0:1:0.1`` (start:stop:step, stop included)."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            count = int(round((stop - start) / step)) + 1
            return tuple(round(start + i * step, 10) for i in range(count))
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CLIError(f"{flag} {text!r}: expected numbers separated by commas, or start:stop:step") from None


def _features(args: argparse.Namespace, loaded) -> dict[str, Any]:
    """The ``--feature NAME=DIR`` window models of a job, on the main model's device."""
    from afp.features import FeatureSpecError, load_features, parse_features

    try:
        return load_features(parse_features(args.feature or []), str(loaded.device), args.score_precision or "auto")
    except (FeatureSpecError, OSError) as err:
        raise CLIError(str(err)) from None


def _old_lm(path: str | None):
    if not path:
        return None
    from lm.ngram.store import StoreScorer, load_store

    return StoreScorer(load_store(path))


def cmd_rescore_cuts(args: argparse.Namespace) -> None:
    from afp.cuts import rescore_cuts

    symbols = _read_symbols(args.words) if args.words else None
    loaded = _load(args.model, args.device)
    summary = rescore_cuts(args.cuts, args.out, _scorer(loaded, args),
                           _rescore_options(args, unk_default=loaded.default_unk_penalty), symbols,
                           device=loaded.device.type, old_lm=_old_lm(args.old_lm), warn=_warn,
                           features=_features(args, loaded),
                           workers=args.workers, batch_pairs=args.batch_pairs)
    print(json.dumps(summary))
    if summary["failed"]:
        raise CLIError(f"{summary['failed']} of {summary['cuts']} cut(s) could not be rescored (see above; they "
                       f"have custom['rescore']['error'] in {args.out})")


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    overrides = {name: value for name, value in (
        ("model_dir", args.model), ("old_lm", args.old_lm), ("weights", args.weights),
        ("features", ",".join(args.feature) if args.feature else None), ("host", args.host), ("port", args.port),
        ("device", args.device),
        ("score_precision", args.score_precision), ("workers", args.workers), ("batching", args.batching)) if value is not None}
    try:
        settings = Settings(**overrides)
    except Exception as err:  # pydantic's ValidationError: report it as a usage error
        raise CLIError(f"invalid server settings: {err}") from None
    from afp.mixtures import is_mixture_dir
    from lm.ngram.store import is_arpa_path, is_store_dir

    if is_arpa_path(settings.model_dir) or is_store_dir(settings.model_dir):
        if not settings.model_dir.exists():
            raise CLIError(f"{settings.model_dir}: no such ARPA file")
    elif not ((settings.model_dir / "config.json").is_file() or is_mixture_dir(settings.model_dir)):
        raise CLIError(f"{settings.model_dir}: not a model directory (no config.json, no mixture.json)")
    if settings.weights is not None:  # a bad weights file is one line now, not a failed start-up later
        from afp.weights import TunedWeights

        TunedWeights.read(settings.weights)
    if settings.old_lm is not None and not settings.old_lm.is_file():
        raise CLIError(f"{settings.old_lm}: no such file (--old-lm / AFP_OLD_LM)")
    if settings.features:  # a bad feature is one line now, not a failed start-up later
        from pathlib import Path

        from afp.features import FeatureSpecError, parse_features

        try:
            for name, path in parse_features(p.strip() for p in settings.features.split(",") if p.strip()).items():
                if not (Path(path) / "config.json").is_file():
                    raise CLIError(f"feature {name!r}: {path}: not a model directory (--feature / AFP_FEATURES)")
        except FeatureSpecError as err:
            raise CLIError(str(err)) from None
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level,
                timeout_graceful_shutdown=int(settings.request_timeout_s), access_log=args.access_log)


def _rescore_options(args: argparse.Namespace, return_lattice: bool = False, unk_default: float = 0.0):
    """The engine's options of a command, by the one builder of every door
    (:func:`afp.options.build_options`); ``unk_default``: the model's own unknown-word penalty."""
    from afp.options import OptionsError, build_options
    from afp.weights import TunedWeights

    given = {name: getattr(args, name, None) for name in (
        "lm_weight", "acoustic_scale", "old_lm_weight", "word_penalty", "nbest", "max_arcs", "target_arcs", "prune_beam",
        "posteriors", "auto_prune", "score_weights", "old_lm_score", "unk_penalty", "decode", "mbr_nbest",
        "mbr_scale", "determinize", "determinize_beam")}
    given["return_lattice"] = return_lattice
    given["match_case"] = False if getattr(args, "keep_case", False) else None
    weights = TunedWeights.read(args.weights) if getattr(args, "weights", None) else None
    try:
        return build_options(given, weights=weights, unk_default=unk_default)
    except OptionsError as err:
        if weights is not None:
            flags = [f"--{name.replace('_', '-')}" for name in ("lm_weight", "old_lm_weight", "word_penalty",
                                                                "unk_penalty", "score_weights", "decode")
                     if getattr(args, name, None) is not None]
            raise CLIError(f"--weights {args.weights} sets the weights: give it or {', '.join(flags)}, not both") from None
        raise CLIError(str(err)) from None


def _add_score_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--score-precision", choices=["auto", "fp32", "bf16"],
                   help="output layer of LM scoring: fp32, bf16 (a bfloat16 matmul refined to within 1e-3 nats "
                        "of fp32; fast on GPUs), or auto: bf16 on CUDA, fp32 on CPU (default: auto"
                        "; for serve: $AFP_SCORE_PRECISION, else auto)")


def _scorer(loaded, args: argparse.Namespace, windows: bool = False):
    """The context scorer of a CLI job: ``loaded`` with ``--score-precision`` (and, for ``ppl``
    and ``score``, ``--max-elements``). ``windows``: a window model (``--future``) is scored as
    one (``ppl``, ``score``); elsewhere it is refused with a message saying what it is."""
    from afp.mixtures import mixed_scorer, parse_interpolate, scorer_of
    from lm.model import DEFAULT_SCORE_ELEMENTS
    from lm.scorer import WindowScorer

    precision = args.score_precision or "auto"
    max_elements = getattr(args, "max_elements", None) or DEFAULT_SCORE_ELEMENTS
    interpolate = [parse_interpolate(text) for text in getattr(args, "interpolate", None) or []]
    try:
        if windows and loaded.config.is_window and not interpolate:
            return WindowScorer(loaded, precision=precision, max_elements=max_elements)
        if interpolate:
            return mixed_scorer(loaded, precision, interpolate)
        return scorer_of(loaded, precision=precision, max_elements=max_elements)
    except ValueError as err:
        raise CLIError(str(err)) from None


def _add_common_scoring_options(p: argparse.ArgumentParser) -> None:
    """Options of both ``rescore`` and ``tune`` (the score combination is in lattices/scored.py)."""
    from lattices.rescore import DEFAULT_MAX_EXPANDED_ARCS, DEFAULT_TARGET_EXPANDED_ARCS, DENSE_FACTOR, NO_TARGET

    p.add_argument("--words", metavar="words.txt", help="symbol table for integer word ids")
    _add_score_precision(p)
    p.add_argument("--acoustic-scale", type=float, help="weight of a score named acoustic; default: 1/lmscale "
                                                        "from the header, else 0.1")
    p.add_argument("--score-weights", metavar="NAME=W,...",
                   help="weights of named first-pass scores, e.g. decoder=0.6,ctc=0.4 (unset: 1; acoustic: "
                        "--acoustic-scale)")
    p.add_argument("--old-lm-score", metavar="NAME", help="the named score that is the old LM (default lm, else graph)")
    p.add_argument("--old-lm", metavar="ARPA", help="the n-gram that built the decoding graph: its exact score "
                                                    "replaces the old-LM part of the graph score (Kaldi lmrescore)")
    p.add_argument("--feature", action="append", metavar="NAME=DIR",
                   help="an acausal window model (afp train --future K) as the named score NAME: each path's "
                        "pseudo-log-likelihood, its words scored from the words around them; weight it with "
                        "--score-weights NAME=W (unset: 1; afp tune tunes it from 0); repeatable")
    p.add_argument("--keep-case", action="store_true",
                   help="look words up in the model only as written (default: a word the model knows only in "
                        "another case, such as PocketSphinx's lower-case words for an upper-case model, is scored "
                        "as the model spells it; results keep the input's spellings)")
    p.add_argument("--prune-beam", type=float, help="prune the input lattice to this beam first (default: no pruning)")
    p.add_argument("--target-arcs", type=_target_arcs, metavar="N",
                   help=f"the expansion a dense lattice (a decoder's search lattice: expansion bound over "
                        f"{DENSE_FACTOR} times its arcs) is made small to, for speed: determinize, minimize, prune "
                        f"to fit (default {DEFAULT_TARGET_EXPANDED_ARCS}; at most --max-arcs; {NO_TARGET}: no "
                        f"target, dense lattices expanded whole up to --max-arcs)")
    p.add_argument("--max-arcs", type=_positive, metavar="N",
                   help=f"the memory limit of every lattice's expansion (arcs; default {DEFAULT_MAX_EXPANDED_ARCS}): "
                        f"chains, n-best lists and sparse lattices are expanded whole up to it")
    p.add_argument("--auto-prune", action=argparse.BooleanOptionalAction, default=None,
                   help="over the budget, prune to fit and report it (the default); --no-auto-prune fails instead "
                        "(and does not prune a dense lattice to --target-arcs)")
    p.add_argument("--determinize", choices=["auto", "always", "never"],
                   help="make a lattice small before expanding it (determinize on words, minimize: lattices/reduce.py): "
                        "auto (default) when its expansion could pass the budget, always, or never")
    p.add_argument("--determinize-beam", type=float,
                   help="the determinization's pruning beam on the first pass's scores (default 15)")
    p.add_argument("--mbr-nbest", type=int, default=100, help="distinct hypotheses MBR decoding weighs (default 100)")
    p.add_argument("--mbr-scale", type=float, default=1.0, help="MBR posteriors: softmax(scale * total score) (default 1)")


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _target_arcs(text: str) -> int:
    """An argparse type: ``--target-arcs``, a whole number of at least 1 or 0 (no target)."""
    from lattices.rescore import NO_TARGET

    try:
        if int(text) == NO_TARGET:
            return NO_TARGET
    except ValueError:
        pass  # _positive says what is wrong with it
    return _positive(text)


def _add_rescore_options(p: argparse.ArgumentParser) -> None:
    _add_common_scoring_options(p)
    p.add_argument("--nbest", type=int, default=1, help="distinct word sequences to return (default 1)")
    p.add_argument("--lm-weight", type=float, action="append",
                   help="weight of the new LM (repeat to evaluate several in one pass; untuned default: a quarter "
                        "of the old LM's weight)")
    p.add_argument("--weights", metavar="JSON", help="the weights afp tune --save wrote (instead of --lm-weight, "
                                                    "--old-lm-weight, --word-penalty, --unk-penalty, --score-weights, "
                                                    "--decode)")
    p.add_argument("--old-lm-weight", type=float, help="0 replaces the old LM, 1 keeps it (untuned default: the "
                   "recogniser's own weight of its LM, recovered from an n-best list's totals, else 1; named scores "
                   "--score-weights leaves out take the recogniser's weights too)")
    p.add_argument("--word-penalty", type=float, help="per LM word; default: wdpenalty/lmscale, else 0")
    p.add_argument("--unk-penalty", type=float, help="log-probability added to each word the new LM scores as <unk> "
                   "(default: the model's own, -log of the distinct training words it maps to <unk>; afp info)")
    p.add_argument("--decode", choices=["viterbi", "mbr"],
                   help="best path, or minimum Bayes risk (least expected word errors) (default viterbi)")
    p.add_argument("--posteriors", action="store_true",
                   help="word posteriors of the best path, one per word (JSON best.word_posteriors; CTM confidence)")


def _add_workers(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=_positive, default=1, metavar="N",
                   help="rescore N lattices at a time, their LM scoring merged into one model call (worth it on "
                        "a GPU); results stay in input order (default 1)")
    p.add_argument("--batch-pairs", type=_positive, default=262_144, metavar="N",
                   help="with --workers: the most (context, word) pairs of one merged model call (default 262144)")


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """``afp rescore``'s outputs (written by :mod:`afp.outputs`; targets: :mod:`afp.wspec`)."""
    g = p.add_argument_group(
        "outputs", "TARGET: a file (a name ending in .gz is gzipped), '-' (standard output: the transcript lines "
                   "are then left out), or a shell command '| gzip -c > x.gz' (its exit status is checked). "
                   "Failed lattices are left out. Under torchrun each rank adds .RANK to its files.")
    g.add_argument("--out", metavar="TARGET",
                   help="the rescored lattices (of the first --lm-weight): in the input format (PATH; HTK and "
                        "OpenFst: a directory, one file per lattice), or a Kaldi archive: ark,t:TARGET (text), "
                        "ark:TARGET (binary, needs --words). Kaldi archives hold integer word ids when the input did "
                        "or --words is given")
    g.add_argument("--nbest-text", metavar="TARGET",
                   help="n-best transcripts as lattice-to-nbest, nbest-to-linear and int2sym.pl give them: "
                        "'KEY-1 WORD ...', 'KEY-2 ...' (the --nbest best distinct word sequences; one --lm-weight)")
    g.add_argument("--text-dir", metavar="DIR",
                   help="a Kaldi transcript 'KEY WORD ...' per LM weight: DIR/LMWT/text, LMWT as given (DIR/0.5/text)")
    g.add_argument("--ctm", metavar="TARGET",
                   help="'KEY 1 START DURATION WORD [POSTERIOR]' per best-path word (one --lm-weight); times from "
                        "HTK node times or Kaldi transition ids (exact for word-aligned lattices: "
                        "lattice-align-words); the posterior with --posteriors")
    g.add_argument("--frame-shift", type=float, default=0.01, metavar="SECONDS",
                   help="seconds per Kaldi frame, for --ctm (default 0.01; chain models, frame subsampling 3: 0.03)")


def _read_symbols(path: str) -> tuple[str, ...]:
    """``--words``, read once per command (:func:`afp.symbols.read_words_txt`); one tuple that
    every lattice of the job shares (the readers index it once)."""
    from afp.symbols import read_words_txt

    return read_words_txt(path)


def _read_json(path: str) -> dict[str, Any]:
    from lm.config import read_json_file

    data = read_json_file(path, CLIError)
    if not isinstance(data, dict):
        raise CLIError(f"{path}: expected a JSON object")
    return data


# ---------------------------------------------------------------------------- parser
def _add_dataclass_options(parser: argparse.ArgumentParser, cls: type, skip: set[str],
                           defaults: dict[str, Any] | None = None) -> None:
    """One ``--field-name`` option per dataclass field; the dataclass validates the values. The
    help names each default (``defaults`` where the command's differ from the dataclass's)."""
    defaults = defaults or {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        base = [t for t in typing.get_args(kind) if t is not type(None)] or [kind]
        help_text = _HELP.get(f.name, "")
        default = defaults.get(f.name, f.default)
        if "(default" not in help_text and default is not None and default is not dataclasses.MISSING:
            help_text = f"{help_text} (default: {default})".strip()
        if base[0] is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        elif typing.get_origin(base[0]) is tuple:
            parser.add_argument(flag, dest=f.name, type=_int_list, default=None, metavar="N,N,...", help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=base[0], default=None, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    from lm.config import ModelConfig, PrepareConfig, TrainConfig
    from lm.model import DEFAULT_SCORE_ELEMENTS

    parser = argparse.ArgumentParser(prog="afp", description="Exact lattice rescoring with AFP-rho language models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_model(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", metavar="DIR", help="model directory (default: the bundled model)")
        p.add_argument("--interpolate", action="append", metavar="MODEL:W",
                       help="mix another model (a model directory or an ARPA n-gram) in at weight W, token by token "
                            "in probability space; repeatable; the --model one keeps 1 - sum W (still exact)")
        p.add_argument("--device", default="auto",
                       help="auto (cuda when there is a GPU, else cpu), cpu, cuda or cuda:N (default: auto, as for "
                            "serve and train)")
        p.add_argument("--threads", type=_positive, default=1, metavar="N",
                       help="CPU threads of each model call (default 1: the calls are small, and more threads than "
                            "free cores slow them down many times over; use --workers to rescore lattices in "
                            "parallel)")

    p = sub.add_parser("info", help="describe a model (and the device and score precision it would run with)")
    with_model(p)
    _add_score_precision(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_info)

    for name, func, text in (("ppl", cmd_ppl, "perplexity of a text"),
                             ("score", cmd_score, "log-probabilities of each sentence of a text")):
        p = sub.add_parser(name, help=text)
        with_model(p)
        p.add_argument("--text", required=True, metavar="FILE", help="one sentence per line ('-' = stdin)")
        p.add_argument("--json", action="store_true", help="JSON output")
        _add_score_precision(p)
        p.add_argument("--max-elements", type=_positive, default=DEFAULT_SCORE_ELEMENTS,
                       help="output-layer logits held at once: bounds memory for large vocabularies "
                            f"(default: {DEFAULT_SCORE_ELEMENTS})")
        p.set_defaults(func=func)

    from lattices.formats import READ_FORMATS

    formats = ["auto", *READ_FORMATS]
    inputs_help = ("files (gzip or not), '-' for stdin, Kaldi specifiers ark:FILE, ark,t:FILE, ark:- and "
                   "'ark:COMMAND |', an ESPnet n-best directory (holding 1best_recog/ ... Nbest_recog/), or a directory "
                   "of lattice files (*.slf, *.lat...: a decoder's lattices)")
    p = sub.add_parser("rescore", help="rescore lattices or n-best lists exactly with an AFP model",
                       description=f"Rescore lattices exactly. INPUT: {inputs_help}.")
    with_model(p)
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("--format", default="auto", choices=formats, help="input format (default auto: guessed)")
    _add_rescore_options(p)
    p.add_argument("--shard", metavar="I/N", help="process lattice i, i+n, ... (default: torchrun rank/world)")
    _add_workers(p)
    p.add_argument("--json", action="store_true", help="one JSON object per lattice (and LM weight)")
    p.add_argument("--show-first-pass", action="store_true",
                   help="after each result, the first pass's 1-best ('=KEY' unchanged, '*KEY' changed)")
    _add_output_options(p)
    p.set_defaults(func=cmd_rescore)

    p = sub.add_parser("tune", help="choose rescoring weights on a dev set by word error rate",
                       description=f"Score a dev set once, then search the new-LM weight, the old-LM weight, the word "
                                   f"and unknown-word penalties (and --tune-score-weights) jointly: coordinate "
                                   f"descent with exact line searches (MERT) from the first pass's own weights, so "
                                   f"the tuned WER on the dev set is never above the first pass's; reports the "
                                   f"significance of the gain and a cross-validated WER. --grid evaluates a grid "
                                   f"instead. INPUT: {inputs_help}. Grids: comma lists or start:stop:step.")
    with_model(p)
    p.add_argument("inputs", nargs="+", metavar="INPUT")
    p.add_argument("--format", default="auto", choices=formats, help="input format (default auto: guessed)")
    p.add_argument("--refs", required=True, metavar="REFS",
                   help="references: Kaldi text (uttid words), sclite trn (words (spk-uttid)), or a lhotse "
                        "SupervisionSet/CutSet manifest")
    _add_common_scoring_options(p)
    p.add_argument("--tune-score-weights", metavar="NAME,...",
                   help="also tune the weights of these named first-pass scores (e.g. decoder,ctc; default: none)")
    p.add_argument("--restarts", type=int, default=3, help="random restarts of the joint search (default 3)")
    p.add_argument("--folds", type=int, default=5,
                   help="cross-validation folds for the expected WER on new data (default 5; 1: none)")
    p.add_argument("--seed", type=int, default=0, help="seed of the restarts and the bootstrap (default 0)")
    p.add_argument("--baseline", metavar="HYPS",
                   help="the recogniser's own 1-best (trn or Kaldi text, e.g. PocketSphinx's hyp.trn): reported, and "
                        "--save writes nothing when the chosen point is worse than it on this dev set")
    p.add_argument("--save", metavar="JSON", help="write the chosen weights (afp rescore --weights reads them; "
                                                 "default: not written)")
    p.add_argument("--grid", action="store_true",
                   help="evaluate a grid instead of the joint search (also implied by the grid options below)")
    p.add_argument("--lm-weights", help="grid: new-LM weights to try (default 0:1:0.1)")
    p.add_argument("--old-lm-weights", help="grid: old-LM weights to try (default 0,0.5,1)")
    p.add_argument("--word-penalties", help="grid: word penalties to try (default 0)")
    p.add_argument("--unk-penalties", help="grid: unknown-word penalties to try (default 0)")
    p.add_argument("--mbr", action="store_true", help="grid: also evaluate MBR decoding at every grid point")
    p.add_argument("--plot", metavar="PNG", help="write WER against the LM weight")
    p.add_argument("--top", type=int, default=15, help="grid rows to print (best first)")
    p.add_argument("--json", action="store_true",
                   help='one JSON object: {"best", "first_pass_wer", "oracle_wer", "grid": [...]}')
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("wer", help="word error rate of transcripts, and the significance of their differences",
                       description="WER and its breakdown of each HYP file against REFS; with two or more, each "
                                   "against the first: the matched-pairs test (sclite's MAPSSWE, utterances as "
                                   "segments) and a bootstrap 95%% interval of the difference (Bisani & Ney 2004). "
                                   "Files: Kaldi text (uttid words), sclite trn (words (id)), or afp rescore --json "
                                   "output.")
    p.add_argument("hypotheses", nargs="+", metavar="HYP")
    p.add_argument("--refs", required=True, metavar="REFS", help="references: Kaldi text, sclite trn, lhotse manifest")
    p.add_argument("--lm-weight", type=float, help="with afp rescore --json files of several LM weights: which one")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_wer)

    p = sub.add_parser("rescore-cuts", help="rescore the lattices named by a lhotse CutSet; report WER",
                       description="Each cut names its lattice in custom['lattice'] (and optionally "
                                   "custom['lattice_format'], custom['lattice_key']). Writes the CutSet with "
                                   "custom['hypothesis'] and prints a JSON summary with the WER against the "
                                   "supervision texts.")
    with_model(p)
    p.add_argument("--cuts", required=True, metavar="CUTS", help="input CutSet manifest")
    p.add_argument("--out", required=True, metavar="CUTS", help="output CutSet manifest")
    _add_rescore_options(p)
    _add_workers(p)
    p.set_defaults(func=cmd_rescore_cuts)

    p = sub.add_parser("serve", help="run the HTTP server (settings also from AFP_* environment variables)")
    p.add_argument("--model", metavar="DIR", help="model directory (default: $AFP_MODEL_DIR or the bundled model)")
    p.add_argument("--old-lm", metavar="ARPA", help="the n-gram that built the decoding graph, subtracted exactly from "
                                                   "every request's graph scores as afp rescore --old-lm does "
                                                   "(default: $AFP_OLD_LM, else none)")
    p.add_argument("--weights", metavar="JSON", help="afp tune --save's weights for requests that give none "
                                                    "(default: $AFP_WEIGHTS, else none)")
    p.add_argument("--feature", action="append", metavar="NAME=DIR",
                   help="an acausal window model requests may add as the named score NAME (their 'features'; "
                        "default: $AFP_FEATURES, NAME=DIR,...); repeatable")
    p.add_argument("--host", help="listen address (default: $AFP_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: $AFP_PORT or 8000)")
    p.add_argument("--device", help="auto, cpu, cuda, cuda:N (default: $AFP_DEVICE or auto)")
    _add_score_precision(p)
    p.add_argument("--workers", type=int, help="worker threads for request work")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=None,
                   help="merge concurrent requests' scoring (default: $AFP_BATCHING, else on for CUDA, off on CPU)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("prepare", help="tokenize a corpus once into memory-mapped shards (for afp train --data)",
                       description="Stream the texts into int32 token shards with int64 sentence offsets, a "
                                   "words.txt and a meta.json (format: lm/shards.py). The vocabulary is built from "
                                   "the texts as afp train builds it, or read from --words-txt.")
    p.add_argument("--text", nargs="+", required=True, metavar="FILE",
                   help="training texts (one sentence per line) or lhotse cuts/supervisions manifests, in order")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (must hold no prepared data)")
    p.add_argument("--valid", metavar="FILE", help="validation text, prepared with the same vocabulary")
    p.add_argument("--words-txt", metavar="FILE", help="read the vocabulary from a Kaldi words.txt")
    p.add_argument("--min-count", type=int, help=f"drop rarer words to <unk> (default {PrepareConfig.min_count})")
    p.add_argument("--max-vocab", type=int, help="keep at most this many words")
    p.add_argument("--shard-tokens", type=int,
                   help=f"at most this many words per shard file (default {PrepareConfig.shard_tokens})")
    p.set_defaults(func=cmd_prepare)

    p = sub.add_parser("ngram", help="build an interpolated modified Kneser-Ney n-gram (ARPA)",
                       description="Count a corpus and write an interpolated modified Kneser-Ney back-off ARPA model "
                                   "(Chen & Goodman; SRILM -kndiscount -interpolate, KenLM lmplz), the numbers of "
                                   "bench/kneser_ney.py, with numpy: sorted packed n-gram keys, counted in chunks "
                                   "(lm/ngram/kneser_ney.py). The vocabulary as afp prepare builds it. With --arpa, an "
                                   "existing back-off model instead, pruned (--prune) or stored (--store).")
    p.add_argument("--text", nargs="+", metavar="FILE", help="training texts (one sentence per line; .gz read too)")
    p.add_argument("--data", metavar="DIR", help="instead of --text: a directory afp prepare wrote (its train split)")
    p.add_argument("--arpa", metavar="LM.arpa[.gz]", help="instead of a text: an existing back-off ARPA model (any "
                                                           "estimator), to prune (--prune) or to store (--store)")
    p.add_argument("--order", type=int, help="n of the model (required with --text and --data)")
    p.add_argument("--out", metavar="LM.arpa[.gz]", help="the ARPA file to write (gzip for .gz)")
    p.add_argument("--store", metavar="DIR", help="(also) write the model as an n-gram model directory: numpy arrays "
                                                  "that --model DIR maps in a second, written in seconds from the "
                                                  "built arrays (the ARPA text takes minutes to write and to read)")
    p.add_argument("--prune", type=float, metavar="THRESHOLD",
                   help="relative-entropy pruning (Stolcke; SRILM's ngram -prune): drop each n-gram of order >= 2 "
                        "whose removal raises the model's perplexity by less than THRESHOLD relative (e.g. 1e-8 "
                        "keeps most, 1e-6 a fraction); back-off weights renormalised (lm/ngram/prune.py)")
    p.add_argument("--words-txt", metavar="FILE", help="read the vocabulary from a Kaldi words.txt")
    p.add_argument("--min-count", type=int, help=f"words seen fewer times become <unk> (default {PrepareConfig.min_count})")
    p.add_argument("--max-vocab", type=int, help="keep at most this many words")
    p.set_defaults(func=cmd_ngram)

    p = sub.add_parser("mix", help="estimate interpolation weights by EM and write a mixture model directory",
                       description="Score held-out text with every model once, find the linear interpolation "
                                   "weights that maximise its likelihood (EM, as SRILM's compute-best-mix), and write "
                                   "DIR/mixture.json: --model DIR then loads the mixture like any model (exact "
                                   "rescoring, token by token in probability space).")
    p.add_argument("models", nargs="+", metavar="MODEL", help="model directories or ARPA files (.arpa, .arpa.gz)")
    p.add_argument("--text", required=True, metavar="FILE", help="held-out text, one sentence per line")
    p.add_argument("--out", required=True, metavar="DIR", help="the mixture directory to write")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--threads", type=_positive, default=1, metavar="N", help="CPU threads of model calls (default 1)")
    _add_score_precision(p)
    p.set_defaults(func=cmd_mix)

    p = sub.add_parser("train", help="train a language model")
    p.add_argument("--config", metavar="FILE", help='JSON {"model": {...}, "train": {...}}; flags override it')
    p.add_argument("--out", required=True, metavar="DIR", help="run directory (the best checkpoint is written here)")
    p.add_argument("--resume", action="store_true", help="continue from DIR/resume")
    p.add_argument("--verbose", action="store_true", help="print each epoch's metrics to stderr")
    _add_dataclass_options(p.add_argument_group("model"), ModelConfig, skip={"vocab_size"}, defaults=TRAIN_MODEL_DEFAULTS)
    _add_dataclass_options(p.add_argument_group("training"), TrainConfig, skip=set())
    p.set_defaults(func=cmd_train)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        if getattr(args, "threads", None):
            import torch

            torch.set_num_threads(args.threads)
        args.func(args)
        sys.stdout.flush()  # a reader that went away (afp ... | head) is noticed here, not at exit
    except BrokenPipeError:
        _silence_stdout()
        return 141  # what a shell reports for a tool ended by SIGPIPE
    except (CLIError, ValueError, OSError) as err:
        print(f"afp: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at interpreter exit does not raise
    BrokenPipeError again (Python's documented recipe for SIGPIPE, in the ``signal`` module)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
