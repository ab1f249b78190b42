"""Sections on the models: the bundled models' candidates, training throughput and the bundled mixtures."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.common import device_files, load_json, plot_link, ratio_cell, table, where


def bundled(results: Path) -> list[str]:
    """``bundled/<preset>.json`` of ``bench.train_bundled``: every candidate of a preset, best
    first; "Not run yet." when absent."""
    lines = ["## Bundled models (`python -m bench.train_bundled PRESET`)", ""]
    for path in sorted((results / "bundled").glob("*.json")):
        data = load_json(path) or {}
        rows = [[name, json.dumps(c["fields"]), c["best_valid_ppl"], c["epochs"], c["seconds_per_epoch"]]
                for name, c in sorted(data.get("candidates", {}).items(), key=lambda kv: kv[1]["best_valid_ppl"])]
        lines += [f"### {data.get('preset', path.stem)}", "",
                  *table(["candidate", "fields", "best valid ppl", "epochs", "s/epoch"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


#: peak-memory fields of ``bench.train_throughput`` rows and their column names
_THROUGHPUT_MEMORY = {"peak_cuda_mib": "peak CUDA MiB", "peak_rss_mib": "peak RSS MiB"}


def train_throughput(results: Path) -> list[str]:
    """``train_throughput_<device>.json``: tokens/s and peak memory per (V, mode, softmax), and
    ``score_contexts`` contexts/s; nothing when absent."""
    lines = ["## Training throughput and peak memory, exact BPTT against AFP-rho, full against adaptive softmax "
             "(`python -m bench.train_throughput`)", ""]
    for device, data in device_files(results, "train_throughput"):
        cfg, train, score = data["config"], data["train"], data.get("score")
        memory = [key for key in _THROUGHPUT_MEMORY if train and key in train[0]]
        rows = [[f"{r['vocab_size']:,}", "exact (BPTT)" if r["mode"] == "exact" else f"AFP-{cfg['rho']}", r["softmax"],
                 round(r["tokens_per_second"]), ratio_cell(r["speedup_over_exact_full"]), *(r.get(k, "-") for k in memory)]
                for r in train]
        lines += [f"### {device}: {where(data)}; GRU {cfg['hidden']}, batch {cfg['batch_size']} x {cfg['bptt']} "
                  f"tokens, {cfg['precision']}, Zipf-distributed ids (exponent {data['zipf_exponent']:g}), median of "
                  f"{cfg['rounds']} rounds" + (f"; each configuration in its own process (holding "
                                               f"{min(r['start_rss_mib'] for r in train):.0f} MiB before it built "
                                               "anything)" if "start_rss_mib" in train[0] else "")
                  + plot_link(results, f"train_throughput_{device}.png"), "",
                  *table(["V", "mode", "softmax", "tokens/s", "x exact full (tokens/s)",
                          *(_THROUGHPUT_MEMORY[k] for k in memory)], rows)]
        if score:
            rows = [[r["softmax"], round(r["contexts_per_second"]), round(r["contexts_per_second"]
                                                                          * score["targets_per_context"]),
                     ratio_cell(r["speedup_over_full"]), *(r.get(k, "-") for k in memory)] for r in score["rows"]]
            lines += [f"`score_contexts` of an AFP-{score['rho']} GRU at V = {score['vocab_size']:,}: "
                      f"{score['contexts']:,} contexts of {score['rho']} tokens, {score['targets_per_context']} "
                      "targets each, per call (float32):", "",
                      *table(["softmax", "contexts/s", "targets/s", "x full (contexts/s)",
                              *(_THROUGHPUT_MEMORY[k] for k in memory)], rows)]
    return lines if len(lines) > 2 else []


def bundled_mixtures(results: Path) -> list[str]:
    """``bundled_mixtures.json``: the shipped mixtures, their weights, sizes and perplexities."""
    lines = []
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
