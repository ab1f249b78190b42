"""Sections on training and the models it makes: the AFP paper's study, the bundled models,
training time and throughput, training at scale, full against adaptive softmax, and the
conversational models' perplexities."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report.common import by, device_files, load_json, plot_link, ratio_cell, table, where


def reproduction(results: Path) -> list[str]:
    """``<dataset>/summary.json`` of ``bench.paper_reproduction``: validation perplexity per run,
    against the paper (calibrated by each side's KN 5-gram when both have one), and float32 against
    bfloat16 training of the same runs; "Not run yet." when absent."""
    lines = ["## The AFP paper's study (`python -m bench.paper_reproduction --dataset D`)", ""]
    summaries = [(p.parent.name, load_json(p)) for p in sorted(results.glob("*/summary.json"))]
    summaries = [(name, s) for name, s in summaries if s and "runs" in s]
    if not summaries:
        return [*lines, "Not run yet.", ""]
    for dataset, summary in summaries:
        runs, paper = summary["runs"], dict(summary.get("paper", {}))
        lines += [f"### {dataset}: validation perplexity, {summary['epochs']} epochs per run "
                  f"(plot `{dataset}/ppl_vs_rho.png`)", ""]
        rows = [[name, run["best_valid_ppl"], run["best_epoch"],
                 f"{run['epochs_done']}" + ("" if run["complete"] else f" of {summary['epochs']} (incomplete)"),
                 run["seconds_per_epoch"], run["device"], run.get("precision", "fp32")] for name, run in runs.items()]
        lines += table(["run", "best valid ppl", "at epoch", "epochs", "mean s/epoch", "device", "precision"], rows)
        note = paper.pop("note", "the paper's figures")
        kn_ours, kn_paper = runs.get("kn-5gram", {}).get("best_valid_ppl"), paper.get("kn-5gram")
        calibrated = kn_ours is not None and kn_paper is not None
        rows = []
        for family, reference in paper.items():
            mine = {n: r for n, r in runs.items() if _family(n) == family}
            best = min(mine, key=lambda n: mine[n]["best_valid_ppl"]) if mine else None
            ours = "not run" if best is None else f"{mine[best]['best_valid_ppl']:.2f} ({best}" + \
                ("" if all(r["complete"] for r in mine.values()) else ", some runs incomplete") + ")"
            row = [family, ours, f"{reference}"]
            if calibrated:
                row += ["" if best is None else f"{mine[best]['best_valid_ppl'] / kn_ours:.3f}",
                        f"{reference / kn_paper:.3f}"]
            rows.append(row)
        header = ["model", "ours (valid)", "paper"] + (["ours / our KN 5-gram", "paper / paper's KN 5-gram"]
                                                       if calibrated else [])
        lines += ["Against the paper (ours: the best validation perplexity of the family; paper: "
                  f"{note}" + ("; the ratios to each side's own KN 5-gram compare the two across the "
                               "validation/test difference" if calibrated else "") + "):", "",
                  *table(header, rows)]
    return lines + _precision_check(dict(summaries))


def _family(run_name: str) -> str:
    """``afp-fpi-detach-rho4`` -> ``afp-fpi-detach``; baselines are their own family."""
    return run_name.rsplit("-rho", 1)[0] if "-rho" in run_name else run_name


def _precision_check(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """The same complete run trained in float32 (``<d>/``) and under bfloat16 autocast (``<d>-bf16/``)."""
    lines = []
    for dataset, summary in summaries.items():
        other = summaries.get(f"{dataset}-bf16")
        if other is None:
            continue
        rows = []
        for name, run in summary["runs"].items():
            twin = other["runs"].get(name)
            if run["complete"] and twin and twin["complete"]:
                rows.append([name, run["best_valid_ppl"], twin["best_valid_ppl"],
                             f"{100 * (twin['best_valid_ppl'] / run['best_valid_ppl'] - 1):+.2f}%"])
        if rows:
            lines += [f"### {dataset}: float32 against bfloat16-autocast training of the same runs", "",
                      "Same seed and set-up; only the precision of the training forward pass differs (the speed "
                      "of each was measured side by side by `bench.epoch_timing --precision`, retired since).", "",
                      *table(["run", "fp32 best valid ppl", "bf16 best valid ppl", "difference"], rows)]
    return lines


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


def epoch_timing(results: Path) -> list[str]:
    """``epoch_timing_<device>.json``: seconds per epoch of each configuration and its ratio to
    exact BPTT (at the same precision too, when several were timed); "Not run yet." when absent."""
    lines = ["## Training time per epoch, AFP-rho against exact BPTT" + by("epoch_timing"), ""]
    for device, data in device_files(results, "epoch_timing"):
        configs = data["configs"]
        rows = [[name, c["seconds_per_epoch"], c["ratio_to_exact"]] for name, c in configs.items()]
        header = ["configuration", "s/epoch (extrapolated)", "ratio to exact"]
        precisions = data.get("precisions", ["fp32"])
        if len(precisions) > 1:  # "<config> <precision>" rows: also against exact BPTT at the same precision
            header.append("ratio to exact, same precision")
            for row in rows:
                suffix = next((f" {p}" for p in precisions[1:] if row[0].endswith(f" {p}")), "")
                row.append(row[1] / configs[f"exact (BPTT){suffix}"]["seconds_per_epoch"])
        lines += [f"### {device}: {where(data)}; hidden {data['hidden']}, batch {data['batch_size']}, "
                  f"PTB ({data['epoch_tokens']:,} tokens per epoch)"
                  + (f"; training precisions {', '.join(precisions)}" if len(precisions) > 1 else "")
                  + plot_link(results, f"epoch_timing_{device}.png"), "",
                  *table(header, rows)]
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


def train_scale(results: Path) -> list[str]:
    """``train_scale.json``: memory and speed of memory-mapped shards against the text in
    memory, step by step; nothing when absent."""
    data = load_json(results / "train_scale.json")
    if not data:
        return []
    args, prepare = data["args"], data["prepare"]
    words = {"legacy": data["legacy_corpus"]["words"]}
    rows = [["prepare", "text -> shards", f"{data['corpus']['words']:,}", prepare["peak_rss_mib"],
             prepare["peak_rss_anon_mib"], prepare["peak_rss_file_mib"], prepare["wall_seconds"], "-"]]
    for step in ("load", "train"):
        for name, run in data[step].items():
            rows.append([step, "text in memory" if name == "legacy" else name.replace("data", "shards", 1),
                         f"{words.get(name, data['corpus']['words']):,}", run["peak_rss_mib"], run["peak_rss_anon_mib"],
                         run["peak_rss_file_mib"], run["wall_seconds"],
                         round(run["tokens_per_second"]) if "tokens_per_second" in run else "-"])
    same = data.get("same_train_ppl")
    return ["## Training at scale: memory-mapped shards against the text in memory" + by("train_scale"), "",
            f"{where(data)}; device `{args['device']}`, model `{args['model_args']}`, batch size "
            f"{args['batch_size']}, {args['batches']} batches per load and training run; every step in a process "
            f"of its own (peak RSS from `ru_maxrss`, anonymous and file-backed peaks sampled from `/proc`). Shards on "
            f"disk: {prepare.get('bytes_on_disk', 0) / 2**20:.1f} MiB."
            + ("" if same is None else f" Both paths reach the same training perplexity: {'yes' if same else 'no'}."),
            "", *table(["step", "data", "corpus words", "peak RSS MiB", "anon MiB", "file MiB", "wall s", "tokens/s"],
                       rows)]


def softmax_wikitext(results: Path) -> list[str]:
    """``softmax_wikitext.json``: full against adaptive softmax on WikiText-2, tokens/s and
    perplexity after the same steps; nothing when absent."""
    data = load_json(results / "softmax_wikitext.json")
    if not data:
        return []
    full = data["rows"][0]["tokens_per_second"]
    rows = [[r["softmax"], r["steps"], f"{r['train_tokens']:,}", round(r["tokens_per_second"]),
             ratio_cell(r["tokens_per_second"] / full), r["train_ppl"], r["valid_ppl"]] for r in data["rows"]]
    return ["## Full against adaptive softmax on WikiText-2" + by("softmax_wikitext"), "",
            f"`{data['command']}`: {where(data)}; model {data['model']}, V = {data['vocab_size']:,}, batch size "
            f"{data['batch_size']}, {data['train_sentences']:,} training lines (the same batches for both), "
            "validation perplexity on the whole validation text.", "",
            *table(["softmax", "steps", "training tokens", "tokens/s", "x full", "train ppl", "valid ppl"], rows)]


def conversational(results: Path) -> list[str]:
    """``conversational_eval.json``: each conversational model's perplexity on every validation
    set, on the shared vocabulary and on its own; "Not run yet." when absent."""
    lines = ["## Conversational models on every validation set" + by("conversational_eval"), ""]
    data = load_json(results / "conversational_eval.json")
    if not data:
        return [*lines, "Not run yet.", ""]
    models = list(data["models"])
    lines += [f"{where(data)}. Shared-vocabulary perplexity counts only the tokens every model knows "
              f"({data['shared_vocabulary']} words) and `</s>`, the same tokens for every model.", ""]
    rows = []
    for set_name, row in data["sets"].items():
        for m in models:
            r = row[m]
            rows.append([set_name, m, r["shared_vocab_ppl"], r["ppl"], f"{100 * r['oov_rate']:.2f}%"])
    return [*lines, *table(["set", "model", "shared-vocabulary ppl", "own ppl", "OOV rate"], rows)]
