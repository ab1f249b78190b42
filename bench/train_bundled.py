"""Train the bundled models: candidates per preset, the best by validation perplexity is installed.

  python -m bench.train_bundled conversational    # the default model, models/conversational/
  python -m bench.train_bundled librispeech       # models/librispeech/ (LM text: Gutenberg books)
  python -m bench.train_bundled ptb               # models/ptb/

Every candidate trains into ``<runs>/<preset>/<candidate>/`` (``--runs``, default
``bench/results/bundled``; resumable: run again to continue), and its ``metrics.jsonl`` is
copied to ``bench/results/bundled/<preset>/<candidate>/`` as it goes. The winner, among the AFP
candidates with ``rho <= max_rho`` (``baseline`` candidates, such as a full-recurrence model for
comparison, are trained but never installed; :func:`choose_winner` compares them at equal epochs
and may prefer a cheaper rho within a margin), is copied to ``models/<preset>/`` (config.json +
model.safetensors, in bfloat16 where the preset says so, its validation perplexity measured again
on the stored weights) with ``TRAINING.md`` saying how it was trained and under which licences;
``bench/results/bundled/<preset>.json`` holds every candidate's numbers.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, ami_lattice_files, cast_weights, environment, read_metrics, \
    trained, write_json, write_text

#: largest relative change of validation perplexity that bfloat16 storage may cause
BF16_TOLERANCE = 1e-3

COMMON_TRAIN = {"batch_size": 20, "lr": 1e-3, "lr_decay": 0.5, "clip": 1.0, "init_range": 0.05, "seed": 1}

CONVERSATIONAL = ("switchboard", "meetings", "conversational-text")

PRESETS: dict[str, dict[str, Any]] = {
    "conversational": {
        # switchboard + meetings + conversational-text (2.7M words), concatenated in this order
        "train": [SHARED_DATA / name / "train.txt" for name in CONVERSATIONAL],
        "valid": [SHARED_DATA / name / "valid.txt" for name in CONVERSATIONAL],
        "epochs": 3,  # ~18 min per epoch for GRU-256 in fp32 on 2 CPU cores
        "max_rho": 5,
        # rho 4 was 1.8% better than rho 3 after the sweep's epoch (83.22 vs 84.75) but expands the AMI
        # lattices to 3.1x the arcs and takes 3.3x the time (models/conversational/TRAINING.md): within 2%,
        # the cheaper model wins (choose_winner)
        "cheaper_within": 0.02,
        "rescoring_cost": True,  # measured on the AMI lattices, the domain of this model
        "store_dtype": "bfloat16",
        "train_options": {"batch_size": 64, "min_count": 2, "precision": "auto", "lr": 2e-3},
        "licence": ("Switchboard (SwDA transcripts): CC BY-NC-SA 3.0, research use, the model inherits the "
                    "non-commercial term; AMI and ICSI meeting transcripts (QMSum release): CC BY 4.0, QMSum MIT; "
                    "conversational-text: Mikolov rnnlm toolkit example data, BSD-style"),
        # the sweep: 1 epoch each (--epochs 1), then the best continues to the preset's epochs
        # (--only NAME). On 2 CPU cores (fp32: no native bf16 there) the sweep that ran was GRU-256 rho 3 and 4;
        # rho 5 expands the AMI lattices to 2.6x the arcs of rho 4 (bench/results/rescoring_cpu.json), GRU-512
        # trains ~3x slower, and the LSTM lost to the GRU at equal size in the conversational-text sweep
        "candidates": {
            **{f"gru-h256-rho{r}": {"cell": "gru", "hidden": 256, "mode": "afp", "rho": r, "dropout": 0.2,
                                    "softmax": "adaptive"} for r in (3, 4, 5)},
            "lstm-h256-rho4": {"cell": "lstm", "hidden": 256, "mode": "afp", "rho": 4, "dropout": 0.2,
                               "softmax": "adaptive"},
            "gru-h512-rho4": {"cell": "gru", "hidden": 512, "mode": "afp", "rho": 4, "dropout": 0.3,
                              "softmax": "adaptive"},
        },
    },
    "librispeech": {
        "train": SHARED_DATA / "books" / "train.txt",
        "valid": SHARED_DATA / "books" / "valid.txt",
        "epochs": 3,
        "max_rho": 6,
        "store_dtype": "bfloat16",
        "train_options": {"batch_size": 64, "min_count": 2, "precision": "auto", "lr": 2e-3},
        "licence": "Project Gutenberg books (public domain), via the GITenberg mirrors; see ../shared/data/books/BOOKS.tsv",
        "candidates": {
            "gru-h256-rho4": {"cell": "gru", "hidden": 256, "mode": "afp", "rho": 4, "dropout": 0.1,
                              "softmax": "adaptive"},
            # icefall-style baseline (the retired bench.wer's): the same network with the full recurrence
            "gru-h256-exact": {"cell": "gru", "hidden": 256, "mode": "exact", "dropout": 0.1,
                               "softmax": "adaptive", "baseline": True},
        },
    },
    "conversational-text": {  # the first default model's sweep (71k words of text)
        "train": SHARED_DATA / "conversational-text" / "train.txt",
        "valid": SHARED_DATA / "conversational-text" / "valid.txt",
        "epochs": 30,
        "max_rho": 4,  # lattice expansion grows with rho: keep the default model cheap to apply
        "licence": "Mikolov rnnlm toolkit example data, BSD-style (COPYRIGHT.txt)",
        "candidates": {
            **{f"elman-h128-rho{r}": {"cell": "elman", "hidden": 128, "mode": "afp", "rho": r, "dropout": 0.3}
               for r in (2, 3, 4)},
            **{f"lstm-h200-rho{r}": {"cell": "lstm", "hidden": 200, "mode": "afp", "rho": r, "dropout": 0.4,
                                     "tie_weights": True} for r in (2, 3, 4)},
            **{f"gru-h200-rho{r}": {"cell": "gru", "hidden": 200, "mode": "afp", "rho": r, "dropout": 0.4,
                                    "tie_weights": True} for r in (3, 4)},
        },
    },
    "ptb": {
        "train": SHARED_DATA / "ptb" / "ptb.train.txt",
        "valid": SHARED_DATA / "ptb" / "ptb.valid.txt",
        "epochs": 15,
        "max_rho": 12,
        "train_options": {"batch_size": 32},
        "licence": "Penn Treebank (Mikolov's simple-examples), research copy of LDC data",
        "candidates": {  # the conversational study's winner (tied GRU), scaled up for PTB's longer sentences
            "gru-h256-rho6": {"cell": "gru", "hidden": 256, "mode": "afp", "rho": 6, "dropout": 0.4,
                              "tie_weights": True},
        },
    },
}


def _sources(preset: str, part: str) -> list[Path]:
    """The preset's ``train``/``valid`` files."""
    value = PRESETS[preset][part]
    return list(value) if isinstance(value, list) else [value]


def _shared_names(preset: str, part: str) -> list[str]:
    """The preset's ``train``/``valid`` files as ``data/books/train.txt`` (under ``../shared``)."""
    return [str(Path(path).relative_to(SHARED_DATA.parent)) for path in _sources(preset, part)]


def corpus_file(preset: str, part: str, runs: Path) -> Path:
    """The preset's ``train``/``valid`` text as one file: the shared file itself, or the
    concatenation of several (written once under ``runs``)."""
    sources = _sources(preset, part)
    for source in sources:
        if not Path(source).is_file():
            raise SystemExit(f"{source} is missing: this needs ../shared/data")
    if len(sources) == 1:
        return sources[0]
    target = runs / preset / "data" / f"{part}.txt"
    if not target.is_file():
        texts = [Path(source).read_text(encoding="utf-8") for source in sources]
        write_text(target, "".join(text if text.endswith("\n") else text + "\n" for text in texts))
    return target


def training_note(preset: str, name: str, fields: dict[str, Any], options: dict[str, Any], metrics: list[dict],
                  table: dict[str, Any], stored: dict[str, Any]) -> str:
    spec = PRESETS[preset]
    best = min(metrics, key=lambda m: m["valid_ppl"])
    data, valid = (", ".join(f"`{name}`" for name in _shared_names(preset, part)) for part in ("train", "valid"))
    lines = [
        f"# Bundled model `{preset}`", "",
        f"Chosen candidate: `{name}` ({json.dumps(fields)}).", "",
        f"- Data: {data}; validation {valid} (from `../shared/`).",
        f"- Data licence: {spec.get('licence', 'see ../shared/data/SOURCES.md')}.",
        f"- Training options: {json.dumps(options)}, {len(metrics)} epochs on `{metrics[-1]['device']}`.",
    ]
    if stored.get("dtype") == "bfloat16":
        lines.append(f"- Weights stored as bfloat16 (loaded as float32); validation perplexity "
                     f"{best['valid_ppl']:.2f} with the trained float32 weights at epoch {best['epoch']} "
                     f"(relative change {stored['relative_ppl_change']:.1e}, within the {BF16_TOLERANCE:g} allowed).")
    lines += [
        f"- Best validation perplexity {stored['valid_ppl']:.2f} at epoch {best['epoch']} (this checkpoint, "
        f"as stored; {stored['tokens']} tokens, {stored['oov']} OOV words).",
        f"- Command: `python -m bench.train_bundled {preset}` (trains every candidate below, keeps the best "
        f"AFP model with rho <= {spec['max_rho']}, compared at equal epochs"
        + (f"; within {100 * spec['cheaper_within']:g}% of the best perplexity the smallest rho, the cheapest to "
           "rescore with, wins" if spec.get("cheaper_within") else "") + ").", "",
        "| candidate | best valid ppl | epochs | s/epoch | rescoring: expanded arcs | distinct contexts | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for cand, row in sorted(table.items(), key=lambda kv: kv[1]["best_valid_ppl"]):
        note = " (baseline, not installed)" if row["fields"].get("baseline") else ""
        cost = row.get("rescoring_cost") or {}
        lines.append(f"| {cand}{note} | {row['best_valid_ppl']:.2f} | {row['epochs']} | "
                     f"{row['seconds_per_epoch']:.0f} | {cost.get('expanded_arcs', '-')} | "
                     f"{cost.get('unique_contexts', '-')} | "
                     f"{format(cost['seconds'], '.2f') if cost else '-'} |")
    first = next((row["rescoring_cost"] for row in table.values() if row.get("rescoring_cost")), None)
    if first:
        lines += ["", f"Rescoring cost: exact rescoring of the {first['lattices']} real AMI lattices of "
                      "`../shared/data/lattices` (HTK and Kaldi), summed; seconds on the training machine (CPU), "
                      "comparable within this table only."]
    return "\n".join(lines) + "\n"


def install(preset: str, winner: str, run_dir: Path, options: dict[str, Any], table: dict[str, Any],
            valid_file: Path) -> Path:
    """Copy the winner to ``models/<preset>/`` (its ``afp/`` part when that is a bundled mixture;
    bfloat16 weights where the preset says so), measure its validation perplexity as stored, and
    write ``TRAINING.md``."""
    from lm.checkpoint import load_checkpoint
    from lm.corpus import encode, load_corpus
    from lm.evaluate import score_corpus

    spec = PRESETS[preset]
    target = REPO_ROOT / "models" / preset
    if (target / "mixture.json").is_file():  # a bundled mixture (bench.bundle_mixtures): this is its AFP part
        target = target / "afp"
        print(f"models/{preset} is a mixture: installing its AFP part {target}; run python -m bench.bundle_mixtures "
              f"{preset} to re-estimate the weights")
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    write_json(target / "config.json", config)

    def store(dtype: str) -> tuple[Any, float]:  # the weights as dtype; their validation score, relative change
        if dtype == "bfloat16":
            cast_weights(run_dir / "model.safetensors", target / "model.safetensors")
        else:
            shutil.copy2(run_dir / "model.safetensors", target / "model.safetensors")
        loaded = load_checkpoint(target)
        score = score_corpus(loaded.model, encode(load_corpus(valid_file), loaded.vocab))
        return score, abs(score.ppl / config["training"]["best_valid_ppl"] - 1.0)

    dtype = spec.get("store_dtype", "float32")
    score, change = store(dtype)
    if dtype == "bfloat16" and change > BF16_TOLERANCE:  # the bound: keep float32 weights instead
        print(f"bfloat16 weights change the validation perplexity by {change:.2e}: storing float32")
        dtype, (score, change) = "float32", store("float32")
    stored = {"dtype": dtype, "valid_ppl": score.ppl, "tokens": score.tokens, "oov": score.oov,
              "relative_ppl_change": change}
    training = config["training"]
    training.update({"trained_valid_ppl": training["best_valid_ppl"], "best_valid_ppl": score.ppl,
                     "stored_dtype": dtype, "stored_relative_ppl_change": change,
                     "data_licence": spec.get("licence"),
                     "train_sources": _shared_names(preset, "train"), "valid_sources": _shared_names(preset, "valid")})
    write_json(target / "config.json", config)
    metrics = read_metrics(run_dir)
    (target / "TRAINING.md").write_text(training_note(preset, winner, spec["candidates"][winner], options,
                                                      metrics, table, stored), encoding="utf-8")
    shutil.copy2(run_dir / "metrics.jsonl", target / "metrics.jsonl")
    return target


def rescoring_cost(run_dir: Path, repeats: int = 3) -> dict[str, Any] | None:
    """What a candidate costs to rescore with: on the real AMI lattices (``ami-htk/*.lat.gz`` and
    ``ami-kaldi/1.lat``), the expanded arcs, the distinct (context, word) pairs scored and the
    seconds (median of ``repeats``, after a warm-up) of exact rescoring, summed over the lattices.
    None when the lattices are absent."""
    import statistics
    import time

    from afp.options import build_options
    from lattices.formats import read_lattice_file
    from lattices.rescore import rescore
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer

    files = ami_lattice_files()
    if not files:
        return None
    lattices = [lat for f in files for lat in read_lattice_file(f)]
    loaded = load_checkpoint(run_dir)
    scorer, options = LMScorer(loaded), build_options({}, unk_default=loaded.default_unk_penalty)

    def seconds() -> float:
        started = time.perf_counter()
        for lat in lattices:
            rescore(lat, scorer, options)
        return time.perf_counter() - started

    stats = [rescore(lat, scorer, options)[0].stats for lat in lattices]  # the warm-up; the counts
    return {"lattices": len(lattices), "seconds": statistics.median(seconds() for _ in range(repeats)),
            "expanded_arcs": sum(s["expanded_arcs"] for s in stats),
            "unique_contexts": sum(s["unique_contexts"] for s in stats)}


def choose_winner(table: dict[str, Any], metrics: dict[str, list[dict[str, Any]]], cheaper_within: float) -> str:
    """The candidate to install. Candidates are compared at the same training: each one's best
    validation perplexity over the first ``e`` epochs, ``e`` the fewest any of them has (a sweep's
    short runs). With ``cheaper_within`` > 0, the one with the smallest ``rho`` (the cheapest to
    rescore with: lattice expansion grows with rho) among those within that relative margin of the
    best perplexity wins; else the best perplexity wins. Ties go to the lower perplexity."""
    epochs = min(len(metrics[n]) for n in table)
    ppl = {n: min(m["valid_ppl"] for m in metrics[n][:epochs]) for n in table}
    best = min(ppl.values())
    close = [n for n in table if ppl[n] <= best * (1.0 + cheaper_within)]
    return min(close, key=lambda n: (table[n]["fields"]["rho"], ppl[n]))


def preset_options(preset_name: str) -> dict[str, Any]:
    """The training options every candidate of a preset shares."""
    preset = PRESETS[preset_name]
    return {**COMMON_TRAIN, **preset.get("train_options", {}), "epochs": preset["epochs"]}


def train_candidates(preset_name: str, names: list[str] | None = None, runs: Path = RESULTS / "bundled",
                     device: str = "auto", threads: int | None = None, epochs: int | None = None) -> Path:
    """Train (or resume) a preset's candidates, ``names`` or all, to ``epochs`` (default: the
    preset's); returns ``runs/<preset>``, which holds a run directory per candidate."""
    from lm.config import ModelConfig, TrainConfig
    from lm.train import train

    preset = PRESETS[preset_name]
    train_file, valid_file = corpus_file(preset_name, "train", runs), corpus_file(preset_name, "valid", runs)
    options = preset_options(preset_name)
    epochs_now = min(epochs or preset["epochs"], preset["epochs"])
    out = runs / preset_name
    record_dir = RESULTS / "bundled" / preset_name
    for name in names or list(preset["candidates"]):
        fields = {k: v for k, v in preset["candidates"][name].items() if k != "baseline"}
        if trained(out / name, epochs_now):
            continue  # done (a committed metrics record without the weights is retrained)
        cfg = TrainConfig(train=str(train_file), valid=str(valid_file), device=device,
                          num_threads=threads, **{**options, "epochs": epochs_now})
        print(f"{name}: training {fields}", flush=True)

        def keep(metrics: dict[str, Any], name: str = name) -> None:  # commit-able progress record
            print(f"{name}: {json.dumps(metrics)}", flush=True)
            if out != record_dir:
                (record_dir / name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(out / name / "metrics.jsonl", record_dir / name / "metrics.jsonl")

        result = train(ModelConfig(**fields), cfg, out / name, resume=True, progress=False, on_epoch=keep,
                       record={"command": f"python -m bench.train_bundled {preset_name}", "candidate": name})
        print(f"{name}: best valid ppl {result.best_valid_ppl:.2f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--only", nargs="*", help="candidates to train (default: all)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--runs", type=Path, default=RESULTS / "bundled",
                        help="where the run directories live (weights, resume state)")
    parser.add_argument("--no-install", action="store_true", help="train and report, do not copy to models/")
    parser.add_argument("--epochs", type=int, help="train each candidate to at most this many epochs now (a sweep's "
                                                   "short runs; run again without it to go on)")
    args = parser.parse_args()

    preset, options = PRESETS[args.preset], preset_options(args.preset)
    out = train_candidates(args.preset, args.only, args.runs, args.device, args.threads, args.epochs)
    valid_file = corpus_file(args.preset, "valid", args.runs)

    table = {}
    for name, fields in preset["candidates"].items():
        metrics = read_metrics(out / name)
        if metrics:
            table[name] = {"fields": fields, "best_valid_ppl": min(m["valid_ppl"] for m in metrics),
                           "epochs": len(metrics), "seconds_per_epoch": sum(m["seconds"] for m in metrics) / len(metrics)}
            if preset.get("rescoring_cost") and (out / name / "model.safetensors").is_file():
                table[name]["rescoring_cost"] = rescoring_cost(out / name)
    write_json(RESULTS / "bundled" / f"{args.preset}.json",
               {"preset": args.preset, "train_options": options, "candidates": table, "environment": environment()})
    eligible = {n: r for n, r in table.items()
                if not r["fields"].get("baseline") and r["fields"].get("mode") == "afp"
                and r["fields"]["rho"] <= preset["max_rho"]}
    if not eligible:
        raise SystemExit("no trained candidate yet")
    winner = choose_winner(eligible, {n: read_metrics(out / n) for n in eligible}, preset.get("cheaper_within", 0.0))
    print(json.dumps({n: round(r["best_valid_ppl"], 2) for n, r in table.items()}, indent=1))
    print(f"chosen: {winner} ({eligible[winner]['best_valid_ppl']:.2f})")
    if args.no_install:
        return
    if table[winner]["epochs"] < preset["epochs"]:
        raise SystemExit(f"{winner} has {table[winner]['epochs']} of {preset['epochs']} epochs: not installed")
    print(f"installed {install(args.preset, winner, out / winner, options, table, valid_file)}")


if __name__ == "__main__":
    main()
