"""Which rho, and which target size, for PocketSphinx lattices? WER against real-time factor (issue 29).

    bash bench/rho_finetune.sh                 # the rho 2, 3, 4 models (from the shipped AFP-4 weights)
    python -m bench.rho_sweep [--limit 100] [--target 5000 --target 10000 ...]

The plot shows WER against expanded arcs per utterance (the cost; seconds from a loaded machine
are in the table). For each model of ``bench/rho_finetune.sh`` (the shipped AFP-4 weights trained on for the same
steps on books/ at rho 2, 3 and 4, so they differ only in rho): the perplexity on The Portrait of
a Lady (the clean held-out book), and for each target size of a dense lattice's expansion
(``target_expanded_arcs``) ``bench.pocketsphinx_rescore``'s run on the first ``--limit``
utterances of both PocketSphinx dev sets: speed of every step, expanded arcs, the lattice oracle
kept, and the WER tuned on one set and applied to the other. The AFP model alone is rescored
(a mixture with the 4-gram would expand to order 4 whatever the rho).

Each (model, target) run is kept in ``bench/results/rho_sweep/<model>.json`` and skipped when
there (resumable); the summary with a plot goes to ``bench/results/rho_sweep.json`` and ``.png``.
The audio is synthetic (text-to-speech). Speeds are from one loaded CPU: compare them within
this run, as ratios.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.common import BOOKS_PORTRAIT_LINES, REPO_ROOT, RESULTS, SHARED_DATA, afp_ppl, environment, line_range, \
    pyplot, save_figure, write_json

MODELS = {f"rho{r}": REPO_ROOT / "runs" / "rho-finetune" / f"rho{r}" for r in (2, 3, 4)}
TARGETS = (5000, 10000, 20000, 40000)
OUT = RESULTS / "rho_sweep"


def portrait_ppl(model: Path) -> dict[str, Any]:
    """``afp ppl`` on The Portrait of a Lady (books/valid.txt, BOOKS_PORTRAIT_LINES)."""
    with tempfile.TemporaryDirectory() as tmp:
        text = line_range(SHARED_DATA / "books" / "valid.txt", *BOOKS_PORTRAIT_LINES, Path(tmp) / "portrait.txt")
        return afp_ppl(model, text)


def run_model(name: str, model: Path, targets: list[int], limit: int | None) -> dict[str, Any]:
    """``bench.pocketsphinx_rescore`` for the targets not yet in ``OUT/<name>.json``; its contents."""
    from bench.pocketsphinx_rescore import main as rescore_main

    out = OUT / f"{name}.json"
    done = json.loads(out.read_text()).get("targets", {}) if out.is_file() else {}
    for target in targets:
        if str(target) in done and done[str(target)].get("limit") == limit:
            continue
        argv = ["--model", str(model.relative_to(REPO_ROOT)), "--target", str(target), "--out", str(out)]
        rescore_main(argv + (["--limit", str(limit)] if limit else []))
    return json.loads(out.read_text())


def summary_row(entry: dict[str, Any]) -> dict[str, Any]:
    """One (model, target) run in a line: RTF, expanded arcs, oracle and the cross-tuned WERs."""
    speed = entry["speed"]
    audio = sum(s["audio_seconds"] for s in speed.values())
    seconds = sum(s["totals"]["total_seconds"] for s in speed.values())
    words = sum(s["totals"]["ref_words"] for s in speed.values())
    applied = [w for w in entry["wer"].values() if "rescored_wer" in w]
    return {
        "rtf": seconds / audio,
        "expanded_arcs_per_utt": sum(s["totals"]["expanded_arcs"] for s in speed.values())
        / sum(s["utterances"] for s in speed.values()),
        "oracle_wer_kept": 100.0 * sum(s["totals"]["oracle_rescored"] for s in speed.values()) / words,
        "wer": {k: w["rescored_wer"] for k, w in entry["wer"].items() if "rescored_wer" in w},
        "wer_both": (sum(w["rescored_wer"] * w["ref_words"] for w in applied) / sum(w["ref_words"] for w in applied)
                     if len(applied) == 2 else None),
        "decoder_wer_both": (sum(w["decoder_wer"] * w["ref_words"] for w in applied)
                             / sum(w["ref_words"] for w in applied) if len(applied) == 2 else None),
        "peak_memory_mib": entry.get("peak_memory_mib"),
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, model in summary["models"].items():
        points = sorted((r["expanded_arcs_per_utt"], r["wer_both"], t) for t, r in model["targets"].items()
                        if r["wer_both"] is not None)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{name} (ppl {model['ppl']:.0f})")
            for arcs, wer, target in points:
                ax.annotate(f"{int(target) // 1000}k", (arcs, wer), fontsize=7, xytext=(3, 3), textcoords="offset points")
    decoder = next((r["decoder_wer_both"] for m in summary["models"].values() for r in m["targets"].values()
                    if r["decoder_wer_both"] is not None), None)
    if decoder is not None:
        ax.axhline(decoder, color="grey", linestyle=":", label="decoder 1-best")
    # expanded arcs, not seconds: rescoring time follows them, and a loaded machine's seconds are noisy
    ax.set_xlabel("expanded arcs per utterance (rescoring time follows them)")
    ax.set_ylabel("WER %, tuned on one dev set, applied to the other")
    ax.set_title("PocketSphinx lattices (synthetic audio): rho and target size")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--target", type=int, action="append", help=f"target sizes (default {TARGETS})")
    parser.add_argument("--limit", type=int, default=100, help="the first N utterances of each set (default 100)")
    parser.add_argument("--note", action="append", default=[], help="a note on the runs, shown with the table")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {"command": "python -m bench.rho_sweep " + " ".join(argv or []),
                               "environment": environment(), "limit": args.limit,
                               "audio": "synthetic (text-to-speech voices, bench/pocketsphinx_set.py)",
                               "models": {}, "notes": args.note}
    for name in args.models:
        model = MODELS[name]
        if not (model / "config.json").is_file():
            print(f"{name}: {model} not trained yet (bash bench/rho_finetune.sh)", flush=True)
            continue
        config = json.loads((model / "config.json").read_text())
        result = run_model(name, model, args.target or list(TARGETS), args.limit)
        summary["models"][name] = {
            "path": str(model.relative_to(REPO_ROOT)), "rho": config["model"]["rho"],
            "training": {k: config["training"].get(k) for k in ("init_from", "init_steps", "steps", "best_valid_ppl")},
            "ppl": portrait_ppl(model)["ppl"],
            "targets": {t: summary_row(e) for t, e in result["targets"].items()}}
        print(name, json.dumps(summary["models"][name], indent=1), flush=True)
    write_json(RESULTS / "rho_sweep.json", summary)
    plot(summary, RESULTS / "rho_sweep.png")


if __name__ == "__main__":
    main()
