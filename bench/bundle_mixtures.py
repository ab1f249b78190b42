"""Build the bundled mixtures: an AFP model and a pruned Kneser-Ney 4-gram of the same vocabulary,
mixed by EM weights, installed as a mixture directory ``models/<preset>/`` (``mixture.json``;
parts ``afp/`` and ``ngram/``) that ``--model`` loads like any model.

  python -m bench.bundle_mixtures conversational [--prune 1e-7]
  python -m bench.bundle_mixtures librispeech [--afp runs/books-large/gru-h256-rho4/resume] [--prune 1e-7]
  python -m bench.bundle_mixtures librispeech --afp bench/results/books-large/best --reuse-ngram

* ``conversational``: the AFP part is the trained ``models/conversational`` model (moved to
  ``models/conversational/afp/`` the first time); the 4-gram is built on its training text
  (Switchboard + meetings + conversational-text) with its vocabulary. EM weights on the first half
  of ``switchboard/valid.txt``; perplexities on the second half and on the whole validation files.
* ``librispeech``: the AFP part is the books/ + books-large/ run of ``bench/books_large.sh``
  (67.6M words), stored as bfloat16 in ``models/librispeech/afp/``; the 4-gram is built on the
  same prepared shards. EM weights on Little Men (lines 1-4406 of ``books/valid.txt``);
  perplexities on The Portrait of a Lady (lines 10572-17246, the clean held-out book) and on the
  whole ``books/valid.txt`` (its Sherlock Holmes part is partly inside books-large:
  ``bench/results/books_large_mixture.json``).

Each step is a command of the tool (``afp ngram``, ``afp mix``, ``afp ppl``); the script writes
``models/<preset>/TRAINING.md``, records the numbers in ``mixture.json`` and in
``bench/results/bundled_mixtures.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.common import (BOOKS_EM_LINES, BOOKS_PORTRAIT_LINES, REPO_ROOT, RESULTS, SHARED_DATA, afp, afp_ppl, environment,
                          line_range, cast_weights, read_metrics, write_json, write_text)

MODELS = REPO_ROOT / "models"
RUNS = REPO_ROOT / "runs" / "bundle_mixtures"
DATA_NAME = "data"  # how TRAINING.md names ../shared/data

PRESETS: dict[str, dict[str, Any]] = {
    "conversational": {
        "ngram_input": ["--text", *(str(SHARED_DATA / c / "train.txt")
                                    for c in ("switchboard", "meetings", "conversational-text"))],
        "prune": 1e-7,
        "em": ("switchboard/valid.txt", 1, 5547),
        "evaluate": {"switchboard/valid.txt, second half (lines 5548-)": ("switchboard/valid.txt", 5548, None),
                     "switchboard/valid.txt": ("switchboard/valid.txt", 1, None),
                     "meetings/valid.txt": ("meetings/valid.txt", 1, None),
                     "conversational-text/valid.txt": ("conversational-text/valid.txt", 1, None)},
        "licence": "Switchboard (SwDA transcripts): CC BY-NC-SA 3.0, research use, the model inherits the "
                   "non-commercial term; AMI and ICSI meeting transcripts (QMSum release): CC BY 4.0, QMSum MIT; "
                   "conversational-text: Mikolov rnnlm toolkit example data, BSD-style",
        "ngram_text": "switchboard/train.txt + meetings/train.txt + conversational-text/train.txt (2.7M words)",
    },
    "librispeech": {
        "ngram_input": ["--data", str(REPO_ROOT / "runs" / "books-large" / "data")],
        "prune": 1e-7,
        "em": ("books/valid.txt", *BOOKS_EM_LINES),
        "evaluate": {"The Portrait of a Lady (books/valid.txt lines 10572-17246, clean)":
                     ("books/valid.txt", *BOOKS_PORTRAIT_LINES),
                     "books/valid.txt": ("books/valid.txt", 1, None)},
        "licence": "Project Gutenberg public-domain books (books/, books-large/: see ../shared/data/SOURCES.md); "
                   "the model carries no licence restriction from its data",
        "ngram_text": "books/train.txt + books-large/train-0{1..6}.txt.gz (67.6M words), the shards of "
                      "bench/books_large.sh",
    },
}


def text_part(name: str, first: int, last: int | None) -> Path:
    """Lines ``first..last`` (1-based, inclusive; ``None``: to the end) of a shared file."""
    return line_range(SHARED_DATA / name, first, last, RUNS / f"{name.replace('/', '-')}-{first}-{last or 'end'}.txt")


def words_txt(model: Path) -> Path:
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    out = RUNS / "words.txt"
    write_text(out, "".join(f"{w} {i}\n" for i, w in enumerate(config["vocab"]["words"])))
    return out


def conversational_part(target: Path) -> Path:
    """``models/conversational``'s trained model as the mixture's ``afp/`` part (moved once)."""
    part = target / "afp"
    if (target / "config.json").is_file():
        part.mkdir(exist_ok=True)
        for name in ("config.json", "model.safetensors", "metrics.jsonl", "TRAINING.md"):
            shutil.move(str(target / name), str(part / name))
    return part


def books_large_part(target: Path, run: Path) -> Path:
    """The books-large run's weights as bfloat16 in ``models/librispeech/afp/``, with its training
    record (sources, licence, the stored weights' validation perplexity) and a TRAINING.md."""
    part = target / "afp"
    if target.is_dir() and (target / "config.json").is_file():  # the 7.6M-word model this replaces
        for name in ("config.json", "model.safetensors", "metrics.jsonl", "TRAINING.md"):
            (target / name).unlink(missing_ok=True)
    part.mkdir(parents=True, exist_ok=True)
    weights = run / "model.safetensors"
    if not weights.is_file():  # a kept bf16 copy (bench/results/books-large/best)
        weights = run / "model.bf16.safetensors"
    cast_weights(weights, part / "model.safetensors")
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    state = json.loads((run / "state.json").read_text(encoding="utf-8")) if (run / "state.json").is_file() else {}
    if not state and "steps" in config.get("training", {}):  # a checkpoint's config records its step and epochs
        state = {"step": config["training"]["steps"], "epoch": config["training"]["epochs"] - 1}
    (part / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    stored = afp_ppl(part, SHARED_DATA / "books" / "valid.txt")
    trained = stored if weights.name == "model.bf16.safetensors" else afp_ppl(run, SHARED_DATA / "books" / "valid.txt")
    metrics = next((read_metrics(d) for d in (run.parent, run) if (d / "metrics.jsonl").is_file()), [])
    metrics = [m for m in metrics if "valid_ppl" in m] + [{"epoch": state.get("epoch"), "step": state.get("step"),
                                                           "valid_ppl": trained["ppl"], "note": "the shipped weights"}]
    (part / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics), encoding="utf-8")
    change = abs(stored["ppl"] / trained["ppl"] - 1.0)
    config["training"].update({
        "command": "bash bench/books_large.sh", "trained_valid_ppl": min(m["valid_ppl"] for m in metrics),
        "best_valid_ppl": stored["ppl"], "stored_dtype": "bfloat16", "stored_relative_ppl_change": change,
        "step": state.get("step"), "data_licence": PRESETS["librispeech"]["licence"],
        "train_sources": ["data/books/train.txt", *(f"data/books-large/train-0{i}.txt.gz" for i in range(1, 7))],
        "valid_sources": ["data/books/valid.txt"]})
    (part / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    model = config["model"]
    (part / "TRAINING.md").write_text("\n".join([
        "# The AFP part of `models/librispeech`", "",
        f"GRU-{model['hidden']} AFP-{model['rho']} with an adaptive softmax, {model['vocab_size']:,} words (the "
        "vocabulary of the earlier 7.6M-word model, so perplexities compare).", "",
        f"- Data: {PRESETS['librispeech']['ngram_text']}; validation `data/books/valid.txt` (from `../shared/`).",
        f"- Data licence: {PRESETS['librispeech']['licence']}.",
        f"- Training: `bash bench/books_large.sh` (resumable across sessions, one CPU thread, bfloat16 autocast); "
        f"these weights are step {state.get('step', '?'):,} (epoch {int(state.get('epoch', 0)) + 1} of 3).",
        (f"- Weights stored as bfloat16 (loaded as float32): validation perplexity {trained['ppl']:.2f} with the "
         f"trained weights, {stored['ppl']:.2f} as stored (relative change {change:.1e})."
         if weights.name == "model.safetensors" else
         f"- Weights stored as bfloat16 (loaded as float32), as kept since training in `{run.name}/` "
         f"(bench.common.cast_weights): validation perplexity {stored['ppl']:.2f} as stored."),
        f"- Best validation perplexity {stored['ppl']:.2f} (this checkpoint, as stored; {stored['tokens']} tokens, "
        f"{stored['oov']} OOV words).",
        "- Command: `bash bench/books_large.sh`, then `python -m bench.bundle_mixtures librispeech`.", ""]),
        encoding="utf-8")
    return part


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", choices=sorted(PRESETS))
    parser.add_argument("--prune", type=float, help="the 4-gram's pruning threshold (default: the preset's)")
    parser.add_argument("--afp", type=Path, default=REPO_ROOT / "runs" / "books-large" / "gru-h256-rho4" / "resume",
                        help="librispeech: the trained AFP model directory to install")
    parser.add_argument("--reuse-ngram", action="store_true",
                        help="keep the installed 4-gram when it was pruned at the same threshold (a new AFP part only)")
    args = parser.parse_args(argv)
    spec = PRESETS[args.preset]
    prune = spec["prune"] if args.prune is None else args.prune
    target = MODELS / args.preset
    part = conversational_part(target) if args.preset == "conversational" else books_large_part(target, args.afp)
    ngram = target / "ngram"
    previous = json.loads((target / "mixture.json").read_text()).get("estimated", {}).get("ngram", {}) \
        if (target / "mixture.json").is_file() else {}
    if args.reuse_ngram and (ngram / "ngram.json").is_file() and previous.get("prune") == prune:
        built = previous  # the 4-gram depends on the text and vocabulary only, not on the AFP part
        print(f"reusing {ngram} (pruned at {prune:g})", flush=True)
    else:
        if args.preset == "librispeech" and not (REPO_ROOT / "runs" / "books-large" / "data" / "meta.json").is_file():
            subprocess.run(["bash", "bench/books_large.sh", "--prepare-only"], cwd=REPO_ROOT, check=True)
        shutil.rmtree(ngram, ignore_errors=True)
        vocabulary = ["--words-txt", str(words_txt(part))] if spec["ngram_input"][0] == "--text" else []  # --data: its own
        built = json.loads(afp("ngram", *spec["ngram_input"], *vocabulary, "--order", "4", "--prune", f"{prune:g}",
                               "--store", str(ngram)).strip().splitlines()[-1])
    em_text = text_part(*spec["em"])
    mixed = json.loads(afp("mix", "--text", str(em_text), "--out", str(target), str(part), str(ngram)))
    table = {}
    for label, where in spec["evaluate"].items():
        text = text_part(*where)
        mixture = afp_ppl(target, text)
        table[label] = {"afp": afp_ppl(part, text)["ppl"], "4-gram": afp_ppl(ngram, text)["ppl"],
                        "mixture": mixture["ppl"], "tokens": mixture["tokens"], "oov": mixture["oov"],
                        "text": {"file": where[0], "lines": [where[1], where[2]]}}
        print(label, json.dumps(table[label]), flush=True)
    store_mib = sum(f.stat().st_size for f in ngram.iterdir()) / 2**20
    afp_mib = sum(f.stat().st_size for f in part.iterdir()) / 2**20
    record = {"weights": mixed["weights"], "em_text": f"{spec['em'][0]} lines {spec['em'][1]}-{spec['em'][2]}",
              "em": mixed, "ngram": {k: v for k, v in built.items() if k.endswith("-grams") or k in (
                  "prune", "before_pruning", "words", "seconds", "peak_rss_mib")},
              "ppl": table, "sizes_mib": {"afp": afp_mib, "ngram": store_mib}, "data_licence": spec["licence"]}
    mixture_file = target / "mixture.json"
    data = json.loads(mixture_file.read_text(encoding="utf-8"))
    data["estimated"] = {**data.get("estimated", {}), **record}
    mixture_file.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    counts = ", ".join(f"{built[f'{n}-grams']:,} {n}-grams" for n in range(1, 5))
    before = sum(built["before_pruning"].values())
    rows = [f"| {label} | {v['afp']:.2f} | {v['4-gram']:.2f} | **{v['mixture']:.2f}** |" for label, v in table.items()]
    (target / "TRAINING.md").write_text("\n".join([
        f"# Bundled model `{args.preset}`: a mixture", "",
        "A linear mixture, token by token in probability space, of two models of one vocabulary (`--model "
        f"models/{args.preset}` loads it; rescoring with it stays exact: both parts are scored on the same "
        "expansion, of the AFP part's order):", "",
        f"- `afp/`: the AFP model, weight {mixed['weights'][0]:.4f} (its own TRAINING.md).",
        f"- `ngram/`: an interpolated modified Kneser-Ney 4-gram of {spec['ngram_text']}, relative-entropy "
        f"pruned at {prune:g} (`afp ngram --prune`): {counts} ({sum(built[f'{n}-grams'] for n in range(1, 5)):,} "
        f"of {before:,} before pruning), an n-gram model directory of {store_mib:.1f} MiB; weight "
        f"{mixed['weights'][1]:.4f}.",
        f"- Weights by EM (`afp mix`) on {record['em_text']}.",
        f"- Data licence: {spec['licence']}.",
        f"- Command: `python -m bench.bundle_mixtures {args.preset}`.", "",
        "Perplexities (`afp ppl --model M --text T`):", "",
        "| text | AFP part | 4-gram part | mixture |", "|---|---|---|---|", *rows, ""]), encoding="utf-8")
    results = RESULTS / "bundled_mixtures.json"
    everything = json.loads(results.read_text()) if results.is_file() else {}
    everything[args.preset] = {"command": f"python -m bench.bundle_mixtures {args.preset}"
                               + (f" --prune {args.prune:g}" if args.prune is not None else ""),
                               "environment": environment(), **record}
    write_json(results, everything)


if __name__ == "__main__":
    main()
