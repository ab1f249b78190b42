"""Sections on n-grams and mixtures: building Kneser-Ney n-grams, the AFP model against a 4-gram,
ARPA readers, entropy pruning and the bundled mixtures."""

from __future__ import annotations

from pathlib import Path

from bench.report.common import by, load_json, table


def ngrams(results: Path) -> list[str]:
    """``ngram_build.json``."""
    lines = []
    build = load_json(results / "ngram_build.json")
    if build:
        rows = [[r["words"], sum(r["ngrams"].values()), f"{r['seconds']['build']:.0f}", f"{r['seconds']['write']:.0f}",
                 f"{r['peak_rss_mib']:.0f}", r["command"]] for r in build["runs"]]
        lines += ["## Kneser-Ney n-grams: `afp ngram`", "", build["note"] + ".", "",
                  *table(["words", "n-grams", "build s", "write s", "peak MiB", "command"], rows)]
    speed = load_json(results / "ngram_speed.json")
    if speed:
        rows = [[r["case"], r["afp_model"], f"{r['afp']['total']:.2f}", f"{r['afp']['expand']:.2f}",
                 f"{r['afp']['score']:.2f}", f"{r['afp']['search']:.2f}", f"{r['ngram_4gram']['total']:.2f}",
                 f"{r['total_ratio_afp_over_ngram']:.2f}", f"{r['shared_scoring_ratio_afp_over_ngram']:.2f}",
                 f"{r['mixture_run']['total']:.2f} (x{r['total_ratio_mixture_over_afp']:.2f})" if "mixture_run" in r
                 else "-"]
                for r in speed["rows"]]
        lines += ["## AFP model against a 4-gram of the same vocabulary" + by("ngram_speed"), "",
                  f"`{speed['command']}`, one thread, side by side in one run; seconds summed over the inputs. The "
                  "last column: scoring alone on one shared expansion.", "",
                  *table(["inputs", "AFP model", "AFP total s", "expand", "score", "search", "4-gram total s",
                          "AFP / 4-gram", "scoring only, same expansion", "mixture total s (/ AFP)"], rows)]
    return lines


def bundled_mixtures(results: Path) -> list[str]:
    """``ngram_prune.json`` and ``bundled_mixtures.json``: pruning sizes and the shipped mixtures."""
    lines = []
    prune = load_json(results / "ngram_prune.json")
    if prune:
        texts = list(prune["rows"][0]["ppl"]) if prune["rows"] else []
        rows = [[f"{r['threshold']:g}", f"{r['total_ngrams']:,}", f"{r['store_mib']:.1f}",
                 f"{r['prune_seconds']:.0f}", *(f"{v:.2f}" for v in r["ppl"].values()),
                 *((f"{r['mixture']['ppl'][t]:.2f}" for t in texts) if "mixture" in r else ("-",) * len(texts))]
                for r in prune["rows"]]
        lines += ["## Entropy pruning of the 67.6M-word 4-gram" + by("ngram_prune"), "",
                  f"`{prune['command']}`: built once ({prune['build_seconds']:.0f} s, peak "
                  f"{prune['peak_rss_mib']:.0f} MiB for the whole run), pruned at each threshold; perplexity of "
                  + "; ".join(f"{k}: {v}" for k, v in prune["texts"].items()) + ".", "",
                  *([f"Mixture columns: each kept 4-gram mixed with `{prune['mixtures']['command'].split()[-1]}` "
                     f"(EM on {prune['mixtures']['em_text']}; that model alone: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in prune["mixtures"]["model_alone"].items()) + ").", ""]
                    if "mixtures" in prune else []),
                  *table(["threshold", "n-grams", "store MiB", "prune s", *(f"4-gram ppl {t}" for t in texts),
                          *(f"mixture ppl {t}" for t in texts)], rows)]
    mixes = load_json(results / "bundled_mixtures.json")
    for preset, record in (mixes or {}).items():
        rows = [[label, f"{v['afp']:.2f}", f"{v['4-gram']:.2f}", f"{v['mixture']:.2f}"]
                for label, v in record["ppl"].items()]
        lines += [f"## Bundled mixture `models/{preset}` (`{record['command']}`)", "",
                  f"Weights {', '.join(f'{w:.4f}' for w in record['weights'])} (AFP, 4-gram) by EM on "
                  f"{record['em_text']}; 4-gram {sum(v for k, v in record['ngram'].items() if k.endswith('-grams')):,} "
                  f"n-grams after pruning at {record['ngram']['prune']:g}; sizes MiB: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in record["sizes_mib"].items()) + ".", "",
                  *table(["text", "AFP part", "4-gram part", "mixture"], rows)]
    return lines
