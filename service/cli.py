"""The ``afp`` command line: it parses the flags, calls one library function and prints.

Commands:
  afp info   [--model DIR] [--json]                 what a model is
  afp ppl    [--model DIR] --text FILE [--json]     perplexity of a text (one sentence per line)
  afp score  [--model DIR] --text FILE [--json]     per-sentence and per-token log-probabilities
  afp prepare --text FILE... --out DIR [options]    tokenize a corpus once into memory-mapped shards
  afp carry pack RUN DIR | unpack DIR RUN | pack-corpus DATA DIR | unpack-corpus DIR DATA   a run or a corpus in pieces
  afp ngram  (--text FILE... | --data DIR) --order N [--prune T] --out LM.arpa[.gz] | --store DIR   a modified Kneser-Ney n-gram
  afp mix    --text DEV --out DIR MODEL...          EM interpolation weights; a mixture --model DIR loads
  afp train  [--config FILE] (--train FILE | --data DIR) --out DIR [options]   train a model
  afp rescore [--model DIR] [options] INPUT...       rescore lattices or n-best lists exactly
  afp rescore --out-dir DIR [--job I --num-jobs N | --ray ADDRESS] INPUT...   a corpus, resumable
  afp tune   [--model DIR] --refs REFS INPUT...     choose weights on a dev set by WER (joint search)
  afp wer    --refs REFS HYP [HYP...]               WER, its breakdown and the significance of differences
  afp rescore-cuts --cuts CUTS --out CUTS            rescore the lattices a lhotse CutSet names
  afp serve  [--model DIR] [options]                the HTTP server

Each command's work is one library call a Python caller can make too: :mod:`afp.text_jobs` (info,
ppl, score, mix), :mod:`afp.rescore_job` (rescore, rescore-cuts), :mod:`afp.corpus` (rescore --out-dir), :mod:`afp.tune_job` (tune),
:func:`afp.wer.compare_systems` (wer), :mod:`lm.jobs` (prepare, train), :mod:`lm.carry` (carry), :mod:`lm.ngram.job`
(ngram), :mod:`service.startup` (serve).

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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from afp.rescore_job import RescoreSetup
    from afp.scoring import ModelSpec
    from afp.tune_job import TuneJob

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
    "adaptive_input": "embed input words by the adaptive softmax's clusters (narrower vectors for rarer words)",
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
    "init_range": "uniform init range",
    "init_from": "a model directory whose weights start the run (a warm start: fine-tuning, or the same "
                 "network at another rho); same vocabulary and tensor shapes, fresh optimizer",
    "detach": "FPI|theta: no gradient through earlier iterations",
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


def _warn(text: str) -> None:
    print(f"afp: warning: {text}", file=sys.stderr)


def _model(args: argparse.Namespace) -> ModelSpec:
    """``--model``, ``--interpolate``, ``--device``, ``--score-precision`` (and ``--max-elements``)
    as an :class:`afp.scoring.ModelSpec`."""
    from afp.scoring import ModelSpec

    return ModelSpec(model=args.model, device=args.device, score_precision=args.score_precision,
                     interpolate=tuple(getattr(args, "interpolate", None) or ()),
                     max_elements=getattr(args, "max_elements", None))


def _setup(args: argparse.Namespace) -> RescoreSetup:
    """The options ``rescore``, ``tune`` and ``rescore-cuts`` share, as an :class:`afp.rescore_job.RescoreSetup`."""
    from afp.rescore_job import RescoreSetup
    from service.option_flags import given_options

    return RescoreSetup(model=_model(args), words=args.words, old_lm=args.old_lm, features=tuple(args.feature or ()),
                        options=given_options(args), weights=getattr(args, "weights", None))


def _command(args: argparse.Namespace, inputs: Sequence[str] = ()) -> str:
    """The command as given (recorded in what it writes), its ``inputs`` (a dev set's thousands of
    files) left out as ``<N inputs>``."""
    given = set(inputs)
    words = [word for word in args.argv if word not in given]
    return " ".join(["afp", *words, *([f"<{len(inputs)} inputs>"] if inputs else [])])


# ---------------------------------------------------------------------------- commands
def cmd_info(args: argparse.Namespace) -> None:
    from afp.text_jobs import model_info

    info = model_info(_model(args))
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
    from afp.text_jobs import perplexity

    result = perplexity(_model(args), args.text)
    print(json.dumps(result.to_json()) if args.json else result.summary())


def cmd_score(args: argparse.Namespace) -> None:
    from afp.text_jobs import score_text

    def show(words: Sequence[str], values: list[float]) -> None:
        if args.json:
            print(json.dumps({"words": list(words), "logprob": sum(values), "token_logprobs": values}))
        else:
            print(f"{sum(values):.4f}\t{' '.join(words)}")

    note = None if args.json else (lambda text: print(f"# {text}", file=sys.stderr))
    score_text(_model(args), args.text, show, note=note)


def cmd_train(args: argparse.Namespace) -> None:
    from lm.config import ModelConfig, TrainConfig
    from lm.jobs import TrainJob, run_train_job

    def given(cls: type) -> dict[str, Any]:
        return {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}

    job = TrainJob(out=args.out, model=given(ModelConfig), train=given(TrainConfig), config=args.config,
                   resume=args.resume, record={"command": _command(args)})
    summary = run_train_job(job, on_epoch=lambda m: print(json.dumps(m), file=sys.stderr) if args.verbose else None)
    if summary is not None:
        print(json.dumps(summary))


def cmd_carry(args: argparse.Namespace) -> None:
    from lm import carry, corpus_pieces

    piece = None if args.piece_mib is None else int(args.piece_mib * (1 << 20))
    if args.action in ("pack", "pack-corpus"):
        module = carry if args.action == "pack" else corpus_pieces
        record = module.pack(args.source, args.target, piece or module.PIECE_BYTES)
        print(json.dumps({k: v for k, v in record.items() if k != "meta"}))
    else:
        module = carry if args.action == "unpack" else corpus_pieces
        record = module.unpack(args.source, args.target)
        print(json.dumps({"out": args.target, **{k: v for k, v in record.items() if k in ("step", "epoch", "splits")}})
              if args.action == "unpack" else json.dumps({"out": args.target}))


def cmd_prepare(args: argparse.Namespace) -> None:
    from lm.config import PrepareConfig
    from lm.jobs import run_prepare

    fields = {name: getattr(args, name) for name in ("text", "out", "valid", "words_txt", "min_count", "max_vocab",
                                                     "shard_tokens") if getattr(args, name) is not None}
    print(json.dumps(run_prepare(PrepareConfig.from_dict(fields, where="prepare options"))))


def cmd_ngram(args: argparse.Namespace) -> None:
    from lm.ngram.job import NgramJob, run_ngram_job

    print(json.dumps(run_ngram_job(NgramJob(
        text=tuple(args.text or ()), data=args.data, arpa=args.arpa, words_txt=args.words_txt, min_count=args.min_count,
        max_vocab=args.max_vocab, order=args.order, prune=args.prune, out=args.out, store=args.store))))


def cmd_mix(args: argparse.Namespace) -> None:
    from afp.text_jobs import mix_models

    print(json.dumps(mix_models(args.models, args.text, args.out, device=args.device,
                                score_precision=args.score_precision)))


def cmd_rescore(args: argparse.Namespace) -> None:
    from afp.outputs import OutputOptions
    from afp.rescore_job import RescoreJob, run_rescore_job

    if args.out_dir is not None:
        _rescore_corpus(args)
        return
    corpus_only = [flag for flag, given in (("--ray", args.ray), ("--job", args.job), ("--num-jobs", args.num_jobs),
                                            ("--force", args.force), ("--also", args.also)) if given]
    if corpus_only:
        raise CLIError(f"{', '.join(corpus_only)} need --out-dir DIR (a result file per input)")

    job = RescoreJob(setup=_setup(args), inputs=tuple(args.inputs), format=args.format, shard=args.shard,
                     outputs=OutputOptions(out=args.out, nbest_text=args.nbest_text, text_dir=args.text_dir,
                                           ctm=args.ctm, frame_shift=args.frame_shift, json=args.json,
                                           show_first_pass=args.show_first_pass),
                     workers=args.workers, batch_pairs=args.batch_pairs)
    done = run_rescore_job(job, warn=_warn, on_failure=lambda f: print(f"afp: error: {f.message}", file=sys.stderr))
    if done.failed:
        raise CLIError(f"{done.failed} of {done.seen} lattice(s) could not be rescored or written (see above)")


def _rescore_corpus(args: argparse.Namespace) -> None:
    """``afp rescore --out-dir``: a result file per input, resumable, split by --job, or on Ray (:mod:`afp.corpus`)."""
    from afp.corpus import CorpusJob, run_corpus_job

    clashing = [flag for flag, given in (("--out", args.out), ("--nbest-text", args.nbest_text),
                                         ("--text-dir", args.text_dir), ("--ctm", args.ctm), ("--json", args.json),
                                         ("--show-first-pass", args.show_first_pass), ("--shard", args.shard)) if given]
    if clashing:
        raise CLIError(f"--out-dir writes each input's results (and --also lattices,text,ctm,nbest-text) beside it: "
                       f"{', '.join(clashing)} cannot be given with it (--shard: use --job I --num-jobs N)")
    job_index, num_jobs = args.job, args.num_jobs
    if job_index is None and num_jobs is None and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun
        job_index, num_jobs = int(os.environ.get("RANK", "0")) + 1, int(os.environ["WORLD_SIZE"])
    if (job_index is None) != (num_jobs is None):
        raise CLIError("give --job I and --num-jobs N together (1 <= I <= N)")
    also = tuple(dict.fromkeys(kind.strip() for text in args.also or () for kind in text.split(",") if kind.strip()))
    job = CorpusJob(setup=_setup(args), inputs=tuple(args.inputs), out_dir=args.out_dir, format=args.format,
                    job=job_index or 1, num_jobs=num_jobs or 1, force=args.force, also=also,
                    frame_shift=args.frame_shift, workers=args.workers, batch_pairs=args.batch_pairs)
    if args.ray is not None:
        from afp.corpus_ray import RayOptions, run_on_ray

        ray = RayOptions(address=args.ray, workers=args.ray_workers, cpus=args.ray_cpus_per_worker,
                         gpus=args.ray_gpus_per_worker, threads=args.threads)
        summary, record = run_on_ray(job, ray, show_progress=not args.quiet)
    else:
        summary, record = run_corpus_job(job, show_progress=not args.quiet)
    print(json.dumps({k: v for k, v in record.items() if k not in ("options", "failures")}))
    if not summary.ok:
        raise CLIError(f"{summary.failure_message()} (all of them in {job.summary_path})")


def _tune_job(args: argparse.Namespace) -> TuneJob:
    """``afp tune``'s flags as an :class:`afp.tune_job.TuneJob`."""
    from afp.tune_job import TuneJob

    return TuneJob(setup=_setup(args), inputs=tuple(args.inputs), refs=args.refs, format=args.format,
                   tune_score_weights=args.tune_score_weights, restarts=args.restarts, folds=args.folds,
                   fold_restarts=args.fold_restarts, seed=args.seed, baseline=args.baseline, save=args.save, grid=args.grid, lm_weights=args.lm_weights,
                   old_lm_weights=args.old_lm_weights, word_penalties=args.word_penalties,
                   unk_penalties=args.unk_penalties, mbr=args.mbr, plot=args.plot, command=_command(args, args.inputs),
                   workers=args.workers)


def cmd_tune(args: argparse.Namespace) -> None:
    from afp.tune_job import NothingSaved, grid_report_lines, joint_report_lines, run_tune_job

    job = _tune_job(args)
    try:
        report = run_tune_job(job)
    except NothingSaved as err:
        print(json.dumps(err.report) if args.json else f"chosen: {err.report['chosen']['reason']}")
        raise
    if args.json:
        print(json.dumps(report))
        return
    lines = grid_report_lines(report, args.mbr, args.top) if job.grid_mode else joint_report_lines(report, args.baseline)
    for line in lines:
        print(line)


def cmd_wer(args: argparse.Namespace) -> None:
    from afp.wer import compare_systems

    report = compare_systems(args.refs, args.hypotheses, args.lm_weight, seed=args.seed)
    if args.json:
        print(json.dumps(report.to_json()))
        return
    for line in report.lines():
        print(line)


def cmd_rescore_cuts(args: argparse.Namespace) -> None:
    from afp.rescore_job import run_rescore_cuts_job

    summary = run_rescore_cuts_job(_setup(args), args.cuts, args.out, workers=args.workers,
                                   batch_pairs=args.batch_pairs, warn=_warn)
    print(json.dumps(summary))
    if summary["failed"]:
        raise CLIError(f"{summary['failed']} of {summary['cuts']} cut(s) could not be rescored (see above; they "
                       f"have custom['rescore']['error'] in {args.out})")


def cmd_serve(args: argparse.Namespace) -> None:
    from service.startup import serve, server_settings

    settings = server_settings({
        "model_dir": args.model, "old_lm": args.old_lm, "weights": args.weights,
        "features": ",".join(args.feature) if args.feature else None, "host": args.host, "port": args.port,
        "device": args.device, "score_precision": args.score_precision, "workers": args.workers,
        "processes": args.processes, "batching": args.batching})
    serve(settings, log_level=args.log_level, access_log=args.access_log)


# ---------------------------------------------------------------------------- parser
def _add_score_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument("--score-precision", choices=["auto", "fp32", "bf16"],
                   help="output layer of LM scoring: fp32, bf16 (a bfloat16 matmul refined to within 1e-3 nats "
                        "of fp32; fast on GPUs), or auto: bf16 on CUDA, fp32 on CPU (default: auto"
                        "; for serve: $AFP_SCORE_PRECISION, else auto)")


def _add_common_scoring_options(p: argparse.ArgumentParser, tune: bool = False) -> None:
    """Options of ``rescore``, ``rescore-cuts`` and (``tune``) ``tune``: what the rescoring reads
    besides its model, and the rescoring options' flags (:func:`service.option_flags.add_option_flags`)."""
    from service.option_flags import add_option_flags

    p.add_argument("--words", metavar="words.txt", help="symbol table for integer word ids")
    _add_score_precision(p)
    p.add_argument("--old-lm", metavar="ARPA", help="the n-gram that built the decoding graph: its exact score "
                                                    "replaces the old-LM part of the graph score (Kaldi lmrescore)")
    p.add_argument("--feature", action="append", metavar="NAME=DIR",
                   help="an acausal window model (afp train --future K) as the named score NAME: each path's "
                        "pseudo-log-likelihood, its words scored from the words around them; weight it with "
                        "--score-weights NAME=W (unset: 1; afp tune tunes it from 0); repeatable")
    add_option_flags(p, tune)


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_rescore_options(p: argparse.ArgumentParser) -> None:
    _add_common_scoring_options(p)
    p.add_argument("--weights", metavar="JSON", help="the weights afp tune --save wrote (instead of --lm-weight, "
                                                    "--old-lm-weight, --word-penalty, --unk-penalty, --score-weights, "
                                                    "--decode)")


def _workers(text: str) -> int:
    from afp.workers import parse_workers

    try:
        return parse_workers(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("--workers ")) from None


def _add_workers(p: argparse.ArgumentParser, batching: bool = True) -> None:
    p.add_argument("--workers", type=_workers, default="auto", metavar="N",
                   help="lattices at a time: N worker processes on a CPU, each with the model loaded once, started "
                        "once a job has brought more than 4N lattices (auto, the default: the cores this process may use); "
                        "on a GPU, N threads whose LM scoring is merged into one model call; results stay in input "
                        "order and equal one worker's")
    if not batching:
        return
    from afp.batching import DEFAULT_BATCH_PAIRS

    p.add_argument("--batch-pairs", type=_positive, default=DEFAULT_BATCH_PAIRS, metavar="N",
                   help="with --workers: the most (context, word) pairs of one merged model call "
                        f"(default {DEFAULT_BATCH_PAIRS})")


def _add_corpus_options(p: argparse.ArgumentParser) -> None:
    """``afp rescore --out-dir``: rescoring a corpus (:mod:`afp.corpus`, :mod:`afp.corpus_ray`)."""
    from afp.corpus import OUTPUT_KINDS

    g = p.add_argument_group(
        "a corpus", "--out-dir DIR writes DIR/NAME.jsonl per input (NAME: its file name without .gz), what --json "
                    "prints, failed lattices with their reason; each input's files appear whole (written aside, "
                    "then renamed), and an input whose results exist is skipped, so a killed job is finished by "
                    "running it again. DIR/summary.json says what was done, skipped and failed.")
    g.add_argument("--out-dir", metavar="DIR", help="a result file per input in DIR (resumable)")
    g.add_argument("--also", action="append", metavar="KINDS",
                   help=f"beside each input's results: {', '.join(OUTPUT_KINDS)} (comma-separated or repeated): "
                        "lattices under the input's own name (DIR/lat.3.gz), DIR/NAME.text, DIR/NAME.ctm, "
                        "DIR/NAME.nbest.text")
    g.add_argument("--force", action="store_true", help="redo inputs whose results exist")
    g.add_argument("--job", type=_positive, metavar="I", help="with --num-jobs N: this job takes inputs I, I+N, "
                   "... (1-based, Kaldi's JOB; default under torchrun: rank + 1)")
    g.add_argument("--num-jobs", type=_positive, metavar="N", help="how many jobs share the inputs")
    g.add_argument("--ray", metavar="ADDRESS", help="run on a Ray cluster: auto (the one this machine joined), "
                   "HOST:PORT or ray://HOST:PORT; DIR, the inputs and the model must be on a file system every node "
                   "sees (needs Ray: from a clone, .venv/bin/pip install -e '.[ray]'; make install has it)")
    from afp.corpus_ray import RayOptions

    ray = RayOptions()  # its defaults, the one definition
    g.add_argument("--ray-workers", type=_positive, default=ray.workers, metavar="N",
                   help=f"Ray workers, each with the model loaded once (default {ray.workers})")
    g.add_argument("--ray-cpus-per-worker", type=float, default=ray.cpus, metavar="C", help="CPUs each worker asks for "
                   f"(default {ray.cpus:g})")
    g.add_argument("--ray-gpus-per-worker", type=float, default=ray.gpus, metavar="G",
                   help=f"GPUs each worker asks for; fractions share a GPU, e.g. 0.25 (default {ray.gpus:g})")
    g.add_argument("--quiet", action="store_true", help="no progress line per input on standard error")


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """``afp rescore``'s outputs (written by :mod:`afp.outputs`; targets: :mod:`afp.wspec`)."""
    from lattices.times import DEFAULT_FRAME_SHIFT

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
    g.add_argument("--frame-shift", type=float, default=DEFAULT_FRAME_SHIFT, metavar="SECONDS",
                   help=f"seconds per Kaldi frame, for --ctm (default {DEFAULT_FRAME_SHIFT:g}; chain models, frame "
                        "subsampling 3: 0.03)")


def _int_list(text: str) -> tuple[int, ...]:
    """``2000,10000`` -> ``(2000, 10000)`` (argparse reports a ValueError as a usage error)."""
    return tuple(int(x) for x in text.split(",") if x.strip())


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
    from afp.tune_job import DEFAULT_FOLD_RESTARTS, DEFAULT_FOLDS, DEFAULT_RESTARTS, DEFAULT_SEED, GRID_DEFAULTS, GRID_TOP
    from lm.config import ModelConfig, PrepareConfig, TrainConfig
    from lm.device import DEFAULT_DEVICE
    from lm.jobs import TRAIN_MODEL_DEFAULTS
    from lm.model import DEFAULT_SCORE_ELEMENTS

    parser = argparse.ArgumentParser(prog="afp", description="Exact lattice rescoring with AFP-rho language models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_model(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", metavar="DIR", help="model directory (default: the bundled model)")
        p.add_argument("--interpolate", action="append", metavar="MODEL:W",
                       help="mix another model (a model directory or an ARPA n-gram) in at weight W, token by token "
                            "in probability space; repeatable; the --model one keeps 1 - sum W (still exact)")
        p.add_argument("--device", default=DEFAULT_DEVICE,
                       help=f"auto (cuda when there is a GPU, else cpu), cpu, cuda or cuda:N (default: {DEFAULT_DEVICE}, "
                            f"as for serve and train)")
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

    from lattices.formats import AUTO as AUTO_FORMAT, READ_FORMATS

    formats = [AUTO_FORMAT, *READ_FORMATS]
    inputs_help = ("files (gzip or not), '-' for stdin, Kaldi specifiers ark:FILE, ark,t:FILE, ark:- and "
                   "'ark:COMMAND |', an ESPnet n-best directory (holding 1best_recog/ ... Nbest_recog/), or a directory "
                   "of lattice files (*.slf, *.lat...: a decoder's lattices)")

    def with_inputs(p: argparse.ArgumentParser) -> None:
        with_model(p)
        p.add_argument("inputs", nargs="+", metavar="INPUT")
        p.add_argument("--format", default=AUTO_FORMAT, choices=formats, help=f"input format (default {AUTO_FORMAT}: guessed)")

    p = sub.add_parser("rescore", help="rescore lattices or n-best lists exactly with an AFP model",
                       description=f"Rescore lattices exactly. INPUT: {inputs_help}.")
    with_inputs(p)
    _add_rescore_options(p)
    p.add_argument("--shard", metavar="I/N", help="process lattice i, i+n, ... (default: torchrun rank/world)")
    _add_workers(p)
    _add_corpus_options(p)
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
    with_inputs(p)
    p.add_argument("--refs", required=True, metavar="REFS",
                   help="references: Kaldi text (uttid words), sclite trn (words (spk-uttid)), or a lhotse "
                        "SupervisionSet/CutSet manifest")
    _add_common_scoring_options(p, tune=True)
    _add_workers(p, batching=False)
    p.add_argument("--tune-score-weights", metavar="NAME,...",
                   help="also tune the weights of these named first-pass scores (e.g. decoder,ctc; default: none)")
    p.add_argument("--restarts", type=int, default=DEFAULT_RESTARTS,
                   help=f"random restarts of the joint search (default {DEFAULT_RESTARTS})")
    p.add_argument("--folds", type=int, default=DEFAULT_FOLDS,
                   help=f"cross-validation folds for the expected WER on new data (default {DEFAULT_FOLDS}; 1: none)")
    p.add_argument("--fold-restarts", type=int, default=DEFAULT_FOLD_RESTARTS,
                   help=f"random restarts of each fold's search (default {DEFAULT_FOLD_RESTARTS}: the folds search from "
                        f"the first pass's point only)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"seed of the restarts and the bootstrap (default {DEFAULT_SEED})")
    p.add_argument("--baseline", metavar="HYPS",
                   help="the recogniser's own 1-best (trn or Kaldi text, e.g. PocketSphinx's hyp.trn): reported, and "
                        "--save writes nothing when the chosen point is worse than it on this dev set")
    p.add_argument("--save", metavar="JSON", help="write the chosen weights (afp rescore --weights reads them; "
                                                 "default: not written)")
    p.add_argument("--grid", action="store_true",
                   help="evaluate a grid instead of the joint search (also implied by the grid options below)")
    for name, what in (("lm_weights", "new-LM weights"), ("old_lm_weights", "old-LM weights"),
                       ("word_penalties", "word penalties"), ("unk_penalties", "unknown-word penalties")):
        p.add_argument("--" + name.replace("_", "-"), help=f"grid: {what} to try (default {GRID_DEFAULTS[name]})")
    p.add_argument("--mbr", action="store_true", help="grid: also evaluate MBR decoding at every grid point")
    p.add_argument("--plot", metavar="PNG", help="write WER against the LM weight")
    p.add_argument("--top", type=int, default=GRID_TOP, help=f"grid rows to print (best first; default {GRID_TOP})")
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
    p.add_argument("--old-lm", metavar="ARPA|DIR", help="the n-gram that built the decoding graph (an ARPA file or an "
                                                       "n-gram model directory), subtracted exactly from every "
                                                       "request's graph scores as afp rescore --old-lm does "
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
    p.add_argument("--processes", type=lambda text: "auto" if text.strip().lower() == "auto" else _workers(text),
                   metavar="N",
                   help="worker processes doing request work, each with the model loaded once, each request to a "
                        "free one (auto: the cores the server may use on a CPU, 1 on a GPU, where 1 works in the "
                        "server's threads; default: $AFP_PROCESSES, else auto)")
    p.add_argument("--workers", type=int, help="worker threads per server process for request work")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=None,
                   help="merge concurrent requests' scoring (default: $AFP_BATCHING, else on for CUDA, off on CPU)")
    from service.startup import DEFAULT_LOG_LEVEL, LOG_LEVELS

    p.add_argument("--log-level", default=DEFAULT_LOG_LEVEL, choices=LOG_LEVELS)
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("carry", help="pack a training run's resume state, or a prepared corpus, small and in pieces",
                       description="pack RUN DIR: RUN/resume as bfloat16 weights in pieces, the generators and "
                                   "the data position, with a digest of every piece (lm/carry.py); unpack DIR RUN: "
                                   "the pieces checked and joined into RUN/resume, which afp train --resume "
                                   "continues (Adam's moments restart). pack-corpus DATA DIR / unpack-corpus DIR "
                                   "DATA: a directory of afp prepare as compressed pieces and back (lm/corpus_pieces.py)")
    p.add_argument("action", choices=["pack", "unpack", "pack-corpus", "unpack-corpus"])
    p.add_argument("source", metavar="FROM", help="pack: the run directory (afp train --out); pack-corpus: the "
                                                  "prepared directory; unpack, unpack-corpus: the packed folder")
    p.add_argument("target", metavar="TO", help="pack, pack-corpus: the packed folder (replaced); unpack: the run "
                                                "directory; unpack-corpus: the prepared directory to write")
    p.add_argument("--piece-mib", type=float, help="largest piece (default 15 for a run, 60 for a corpus)")
    p.set_defaults(func=cmd_carry)

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
                                   "(Chen & Goodman; SRILM -kndiscount -interpolate, KenLM lmplz) with numpy: sorted packed "
                                   "n-gram keys, counted in chunks "
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
    p.add_argument("--device", default=DEFAULT_DEVICE, help=f"auto, cpu, cuda or cuda:N (default: {DEFAULT_DEVICE})")
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
