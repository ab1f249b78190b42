"""Render ``bench/results/README.md`` from the benchmarks' JSON files (never by hand).

  python -m bench.report          # rewrite bench/results/README.md
  python -m bench.report --check  # exit 1 when the README is out of date with the JSON

Every table names the device and the command that measured it; a benchmark whose JSON is
absent is listed as not run, except training throughput, training at scale and long lattices
(run by hand on demand), whose sections appear only once their JSON exists. Incomplete training
runs are marked with their epoch count.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import RESULTS

Section = Callable[[Path], list[str]]


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value).replace("|", "\\|")

    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


def _device_files(results: Path, stem: str) -> list[tuple[str, dict[str, Any]]]:
    """``<stem>_<device>.json`` files, CPU first."""
    found = [(p.stem[len(stem) + 1:], _load(p)) for p in sorted(results.glob(f"{stem}_*.json"))]
    return sorted(((d, data) for d, data in found if data), key=lambda x: (x[0] != "cpu", x[0]))


def _plot(results: Path, name: str) -> str:
    """`` (plot `NAME`)`` when ``results/NAME`` exists (the docs site shows it there), else nothing."""
    return f" (plot `{name}`)" if (results / name).is_file() else ""


def _where(data: dict[str, Any]) -> str:
    env = data.get("environment", {})
    gpu = env.get("gpu")
    return (f"{gpu}" if gpu else f"CPU, {env.get('threads', '?')} threads") + f", torch {env.get('torch', '?')}"


def _family(run_name: str) -> str:
    """``afp-fpi-detach-rho4`` -> ``afp-fpi-detach``; baselines are their own family."""
    return run_name.rsplit("-rho", 1)[0] if "-rho" in run_name else run_name


def reproduction(results: Path) -> list[str]:
    lines = ["## The AFP paper's study (`python -m bench.paper_reproduction --dataset D`)", ""]
    summaries = [(p.parent.name, _load(p)) for p in sorted(results.glob("*/summary.json"))]
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
        lines += _table(["run", "best valid ppl", "at epoch", "epochs", "mean s/epoch", "device", "precision"], rows)
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
                  *_table(header, rows)]
    return lines + _precision_check(dict(summaries))


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
                      "of each is measured side by side by `bench.epoch_timing --precision`).", "",
                      *_table(["run", "fp32 best valid ppl", "bf16 best valid ppl", "difference"], rows)]
    return lines


def bundled(results: Path) -> list[str]:
    lines = ["## Bundled models (`python -m bench.train_bundled PRESET`)", ""]
    for path in sorted((results / "bundled").glob("*.json")):
        data = _load(path) or {}
        rows = [[name, json.dumps(c["fields"]), c["best_valid_ppl"], c["epochs"], c["seconds_per_epoch"]]
                for name, c in sorted(data.get("candidates", {}).items(), key=lambda kv: kv[1]["best_valid_ppl"])]
        lines += [f"### {data.get('preset', path.stem)}", "",
                  *_table(["candidate", "fields", "best valid ppl", "epochs", "s/epoch"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def epoch_timing(results: Path) -> list[str]:
    lines = ["## Training time per epoch, AFP-rho against exact BPTT (`python -m bench.epoch_timing`)", ""]
    for device, data in _device_files(results, "epoch_timing"):
        configs = data["configs"]
        rows = [[name, c["seconds_per_epoch"], c["ratio_to_exact"]] for name, c in configs.items()]
        header = ["configuration", "s/epoch (extrapolated)", "ratio to exact"]
        precisions = data.get("precisions", ["fp32"])
        if len(precisions) > 1:  # "<config> <precision>" rows: also against exact BPTT at the same precision
            header.append("ratio to exact, same precision")
            for row in rows:
                suffix = next((f" {p}" for p in precisions[1:] if row[0].endswith(f" {p}")), "")
                row.append(row[1] / configs[f"exact (BPTT){suffix}"]["seconds_per_epoch"])
        lines += [f"### {device}: {_where(data)}; hidden {data['hidden']}, batch {data['batch_size']}, "
                  f"PTB ({data['epoch_tokens']:,} tokens per epoch)"
                  + (f"; training precisions {', '.join(precisions)}" if len(precisions) > 1 else "")
                  + _plot(results, f"epoch_timing_{device}.png"), "",
                  *_table(header, rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def rescoring(results: Path) -> list[str]:
    lines = ["## Rescoring real AMI lattices (`python -m bench.rescoring_speed`)", ""]
    for device, data in _device_files(results, "rescoring"):
        rows = []
        for rho, afp in data["afp"].items():
            ratios = data["ratios"][rho]
            rows.append([rho, f"{afp['expanded_arcs']:,}", f"{afp['unique_contexts']:,}", afp["total_seconds"],
                         *(ratios[f"nbest_{n}_over_afp"] for n in data["nbest"]), ratios["kaldi_style_over_afp"]])
        nbest = [f"n-best {n} / AFP" for n in data["nbest"]]
        models = data["models"]
        afp_ppl = ", ".join(f"{rho} {ppl:.2f}" for rho, ppl in models["afp_valid_ppl"].items())
        lines += [f"### {device}: {_where(data)}; {len(data['lattices'])} lattices"
                  + _plot(results, f"rescoring_{device}.png"), "",
                  f"Models: {json.dumps(models['architecture'])} on conversational text; validation perplexity "
                  f"of the exact RNN {models['rnn_valid_ppl']:.2f}, of AFP {afp_ppl}. Ratios are times of the "
                  f"baseline over AFP-rho's total (above 1: AFP is faster).", "",
                  *_table(["rho", "expanded arcs", "unique contexts", "AFP total s", *nbest, "Kaldi-style / AFP"],
                          rows)]
        rows = [[name, k["total_seconds"], k["lm_error_vs_true_rnn"]["mean_abs"], k["lm_error_vs_true_rnn"]["max_abs"]]
                for name, k in data["kaldi_style"].items()]
        lines += ["Kaldi-style rescoring (RNN state from the first history to arrive): its LM scores against the "
                  "same RNN's true sentence scores, in nats per hypothesis:", "",
                  *_table(["history", "total s", "mean abs error", "max abs error"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def load(results: Path) -> list[str]:
    lines = ["## HTTP load test (`python -m bench.load_test`)", ""]
    for device, data in _device_files(results, "load"):
        on, off = data["results"]["batching"], data["results"]["no_batching"]

        def quantiles(r: dict[str, Any]) -> str:
            return f"{r['p50']:.3f} / {r['p95']:.3f} / {r['p99']:.3f}"

        rows = [[a["connections"], a["throughput"], b["throughput"], quantiles(a), quantiles(b),
                 sum(a["errors"].values()) + sum(b["errors"].values())] for a, b in zip(on, off, strict=True)]
        lines += [f"### {device}: {_where(data)}; model `{data['model']}`, {data['seconds_per_setting']:.0f} s per "
                  f"setting, {data['lattices']} lattices round-robin" + _plot(results, f"load_{device}.png"), "",
                  *_table(["connections", "req/s batching", "req/s no batching", "p50/p95/p99 s batching",
                           "p50/p95/p99 s no batching", "errors"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def _point(point: dict[str, float] | None) -> str:
    """``0.1, 0.7, 1, -10`` for a tuned grid point (its weights in the grid's order)."""
    if not point:
        return "-"
    keys = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "mbr_scale")
    return ", ".join(f"{point[k]:.3g}" for k in keys if k in point)


def wer(results: Path) -> list[str]:
    lines = ["## Word error rate of n-best rescoring, LibriSpeech dev (`python -m bench.wer`)", ""]
    data = _load(results / "wer_librispeech.json")
    if not data:
        return [*lines, "Not run yet.", ""]
    sets = list(data["sets"])
    lines += [f"{_where(data)}. AFP model `{data['afp_model']}` ({data['afp']['name']}, valid ppl "
              f"{data['afp']['training'].get('best_valid_ppl', float('nan')):.2f}); baseline "
              f"`{data.get('baseline_model')}`. Named weights {data['score_weights']}; each system tuned on one dev "
              "set and applied to the other. Plot `wer_librispeech.png`.", ""]
    rows = [["first pass", *(data["sets"][s]["first_pass_wer"] for s in sets), "the recogniser's (0, 0.6, 0, 0)"],
            ["oracle (30-best)", *(data["sets"][s]["oracle_wer"] for s in sets), "-"]]
    def p_values(t: dict[str, Any]) -> str:
        first = t.get("against_first_pass", {}).get("mapsswe", {}).get("p")
        reweighted = t.get("against_reweighted", {}).get("mapsswe", {}).get("p")
        return " / ".join(f"{p:.2g}" if p is not None else "-" for p in (first, reweighted))

    for label, system in data["systems"].items():
        tuned = [next(v for k, v in system["results"].items() if k.startswith(s) and "tuned on" in k) for s in sets]
        rows.append([label, *(t["wer"] for t in tuned), *(p_values(t) for t in tuned),
                     " / ".join(_point(t.get("point")) for t in tuned)])
    lines += _table(["system (WER %, tuned on the other set)", *sets,
                     *(f"p {s} (vs first pass / vs re-weighting)" for s in sets),
                     "weights applied (new LM, old LM, word penalty, unk penalty)"], rows)
    speed_rows = []
    for s in sets:
        sp = data["speed"][s]
        speed_rows.append([s, sp["tokens"], sp["afp_distinct_contexts"], sp["contexts_per_token"],
                           sp["afp_engine_tokens_per_s"], sp["afp_merged_tokens_per_s"],
                           sp.get("rnn_tokens_per_s", "not run"), sp.get("rnn_over_afp_merged", "not run")])
    lines += _table(["set", "tokens", "AFP distinct contexts", "contexts/token", "AFP engine tokens/s",
                     "AFP merged tokens/s", "full-RNN tokens/s", "full-RNN time / AFP merged time"], speed_rows)
    return lines


def conversational(results: Path) -> list[str]:
    lines = ["## Conversational models on every validation set (`python -m bench.conversational_eval`)", ""]
    data = _load(results / "conversational_eval.json")
    if not data:
        return [*lines, "Not run yet.", ""]
    models = list(data["models"])
    lines += [f"{_where(data)}. Shared-vocabulary perplexity counts only the tokens every model knows "
              f"({data['shared_vocabulary']} words) and `</s>`, the same tokens for every model.", ""]
    rows = []
    for set_name, row in data["sets"].items():
        for m in models:
            r = row[m]
            rows.append([set_name, m, r["shared_vocab_ppl"], r["ppl"], f"{100 * r['oov_rate']:.2f}%"])
    return [*lines, *_table(["set", "model", "shared-vocabulary ppl", "own ppl", "OOV rate"], rows)]


def _ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


#: peak-memory fields of ``bench.train_throughput`` rows and their column names
_THROUGHPUT_MEMORY = {"peak_cuda_mib": "peak CUDA MiB", "peak_rss_mib": "peak RSS MiB"}


def train_throughput(results: Path) -> list[str]:
    """``train_throughput_<device>.json``: tokens/s and peak memory per (V, mode, softmax), and
    ``score_contexts`` contexts/s; nothing when absent."""
    lines = ["## Training throughput and peak memory, exact BPTT against AFP-rho, full against adaptive softmax "
             "(`python -m bench.train_throughput`)", ""]
    for device, data in _device_files(results, "train_throughput"):
        cfg, train, score = data["config"], data["train"], data.get("score")
        memory = [key for key in _THROUGHPUT_MEMORY if train and key in train[0]]
        rows = [[f"{r['vocab_size']:,}", "exact (BPTT)" if r["mode"] == "exact" else f"AFP-{cfg['rho']}", r["softmax"],
                 round(r["tokens_per_second"]), _ratio_cell(r["speedup_over_exact_full"]), *(r.get(k, "-") for k in memory)]
                for r in train]
        lines += [f"### {device}: {_where(data)}; GRU {cfg['hidden']}, batch {cfg['batch_size']} x {cfg['bptt']} "
                  f"tokens, {cfg['precision']}, Zipf-distributed ids (exponent {data['zipf_exponent']:g}), median of "
                  f"{cfg['rounds']} rounds" + (f"; each configuration in its own process (holding "
                                               f"{min(r['start_rss_mib'] for r in train):.0f} MiB before it built "
                                               "anything)" if "start_rss_mib" in train[0] else "")
                  + _plot(results, f"train_throughput_{device}.png"), "",
                  *_table(["V", "mode", "softmax", "tokens/s", "x exact full (tokens/s)",
                           *(_THROUGHPUT_MEMORY[k] for k in memory)], rows)]
        if score:
            rows = [[r["softmax"], round(r["contexts_per_second"]), round(r["contexts_per_second"]
                                                                          * score["targets_per_context"]),
                     _ratio_cell(r["speedup_over_full"]), *(r.get(k, "-") for k in memory)] for r in score["rows"]]
            lines += [f"`score_contexts` of an AFP-{score['rho']} GRU at V = {score['vocab_size']:,}: "
                      f"{score['contexts']:,} contexts of {score['rho']} tokens, {score['targets_per_context']} "
                      "targets each, per call (float32):", "",
                      *_table(["softmax", "contexts/s", "targets/s", "x full (contexts/s)",
                               *(_THROUGHPUT_MEMORY[k] for k in memory)], rows)]
    return lines if len(lines) > 2 else []


def train_scale(results: Path) -> list[str]:
    """``train_scale.json``: memory and speed of memory-mapped shards against the text in
    memory, step by step; nothing when absent."""
    data = _load(results / "train_scale.json")
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
    return ["## Training at scale: memory-mapped shards against the text in memory (`python -m bench.train_scale`)", "",
            f"{_where(data)}; device `{args['device']}`, model `{args['model_args']}`, batch size "
            f"{args['batch_size']}, {args['batches']} batches per load and training run; every step in a process "
            f"of its own (peak RSS from `ru_maxrss`, anonymous and file-backed peaks sampled from `/proc`). Shards on "
            f"disk: {prepare.get('bytes_on_disk', 0) / 2**20:.1f} MiB."
            + ("" if same is None else f" Both paths reach the same training perplexity: {'yes' if same else 'no'}."),
            "", *_table(["step", "data", "corpus words", "peak RSS MiB", "anon MiB", "file MiB", "wall s", "tokens/s"],
                        rows)]


def softmax_wikitext(results: Path) -> list[str]:
    """``softmax_wikitext.json``: full against adaptive softmax on WikiText-2, tokens/s and
    perplexity after the same steps; nothing when absent."""
    data = _load(results / "softmax_wikitext.json")
    if not data:
        return []
    full = data["rows"][0]["tokens_per_second"]
    rows = [[r["softmax"], r["steps"], f"{r['train_tokens']:,}", round(r["tokens_per_second"]),
             _ratio_cell(r["tokens_per_second"] / full), r["train_ppl"], r["valid_ppl"]] for r in data["rows"]]
    return ["## Full against adaptive softmax on WikiText-2 (`python -m bench.softmax_wikitext`)", "",
            f"`{data['command']}`: {_where(data)}; model {data['model']}, V = {data['vocab_size']:,}, batch size "
            f"{data['batch_size']}, {data['train_sentences']:,} training lines (the same batches for both), "
            "validation perplexity on the whole validation text.", "",
            *_table(["softmax", "steps", "training tokens", "tokens/s", "x full", "train ppl", "valid ppl"], rows)]


def hard_inputs(results: Path) -> list[str]:
    """``hard_inputs.json``: time of the inputs that took the engine out of its budget, against
    the baseline commit's code; nothing when absent."""
    data = _load(results / "hard_inputs.json")
    if not data:
        return []
    rows = []
    for row in data["rows"]:
        now, base = row["current"], row.get("baseline", {})
        base_cell = (f"stopped after {base['timed_out']:g} s" if "timed_out" in base
                     else base.get("total_s", "-"))
        rows.append([row["case"], now["lattices"], f"{now['symbols']:,}" if now.get("symbols") else "-",
                     now["total_s"], now["per_lattice_s"], now["peak_rss_mb"], base_cell,
                     _ratio_cell(row.get("speedup")), base.get("peak_rss_mb", "-"),
                     {True: "yes", False: "no"}.get(row.get("same_best"), "-")
                     + (f" ({row['ties']} of equal score)" if row.get("ties") else "")])
    env = data.get("environment", {})
    return ["## Inputs that took the engine out of its budget (`python -m bench.hard_inputs`)", "",
            f"`{data['command']}`: CPU, {data['threads']} torch thread per case, torch {env.get('torch', '?')}; "
            f"model `{data['model']}`; every case in a fresh process, parse and rescore; the baseline is the code "
            f"of `{data['baseline_ref']}` (main before this work).", "",
            *_table(["case", "lattices", "symbols", "total s", "s per lattice", "peak RSS MB", "baseline total s",
                     "speed-up", "baseline peak RSS MB", "same best paths"], rows)]


def merged_rescoring(results: Path) -> list[str]:
    """``merged_rescoring_<device>.json``: lattices/s and contexts/s, one model call per lattice
    against merged calls, per set and output-layer precision; nothing when absent."""
    lines = ["## Rescoring every real lattice: one model call per lattice against merged calls "
             "(`python -m bench.merged_rescoring`)", ""]
    for device, data in _device_files(results, "merged_rescoring"):
        rows = []
        for name, entry in data["sets"].items():
            for precision, modes in entry["precisions"].items():
                for mode, run in modes.items():
                    if not isinstance(run, dict) or "lattices_per_s" not in run:
                        continue
                    rows.append([name, entry["lattices"], precision, mode.replace("_", " "), run["model_calls"],
                                 round(run["lattices_per_s"], 1), round(run["contexts_per_s"]),
                                 _ratio_cell(run.get("speed_over_per_lattice")),
                                 {True: "yes", False: "no"}.get(run.get("same_best_words"), "-"),
                                 f"{run['max_abs_lm_logprob_diff']:.1e}" if "max_abs_lm_logprob_diff" in run else "-"])
                for other, cmp in modes.items():
                    if other.startswith("vs_"):
                        rows.append([name, entry["lattices"], precision, f"per lattice {other.replace('_', ' ')}", "-",
                                     "-", "-", _ratio_cell(cmp["speed_ratio_per_lattice"]),
                                     "yes" if cmp["same_best_words"] else "no", f"{cmp['max_abs_lm_logprob_diff']:.1e}"])
        lines += [f"### {device}: {_where(data)}; merged calls of up to {data['args']['batch_pairs']:,} pairs; the "
                  "best path's words and LM log-probability compared lattice by lattice with one call per lattice "
                  "(float32) or, for `vs fp32` rows, with the float32 output layer", "",
                  *_table(["set", "lattices", "output layer", "mode", "model calls", "lattices/s", "contexts/s",
                           "x per lattice", "same best words", "max abs LM diff"], rows)]
    return lines if len(lines) > 2 else []


def long_lattices(results: Path) -> list[str]:
    """``long_lattices.json``: parse and rescore time and peak memory per case, against the
    baseline commit's code where it ran; nothing when absent."""
    data = _load(results / "long_lattices.json")
    if not data:
        return []
    rows = []
    for row in data["rows"]:
        now, base = row["current"], row.get("baseline")
        rows.append([row["case"], f"{now['arcs']:,}", f"{now['levels']:,}", now["parse_s"], now["rescore_s"],
                     now["total_s"], now["peak_rss_mb"], *((base["total_s"], row["speedup"], base["peak_rss_mb"],
                                                            row["memory_ratio"]) if base else ("-",) * 4)])
    env = data.get("environment", {})
    return ["## Long lattices: parse and rescore time and peak memory (`python -m bench.long_lattices`)", "",
            f"`{data['command']}`: CPU, {data['threads']} torch threads per case, torch {env.get('torch', '?')}; "
            f"model `{data['model']}`; every case in a fresh process; the baseline is the code of "
            f"`{data['baseline_ref']}` (ratios baseline / current: above 1, the current code is faster or smaller).",
            "", *_table(["case", "arcs", "levels", "parse s", "rescore s", "total s", "peak RSS MB",
                         "baseline total s", "speed-up", "baseline peak RSS MB", "memory ratio"], rows)]


def sentence_scoring(results: Path) -> list[str]:
    """``sentence_scoring_<device>.json``: the shared-context sentence scoring of afp ppl/score
    against the sentence forward pass; nothing when absent."""
    lines = ["## Sentence scoring: shared contexts against the sentence forward pass "
             "(`python -m bench.sentence_scoring`)", ""]
    for device, data in _device_files(results, "sentence_scoring"):
        rows = [[r["set"], r["model"], f"{r['sentences']:,}", f"{r['tokens']:,}",
                 f"{r['shared']['tokens_per_s']:,.0f}", f"{r['forward']['tokens_per_s']:,.0f}",
                 _ratio_cell(r["speedup"]), f"{r['shared']['ppl']:.3f}", f"{r['forward']['ppl']:.3f}",
                 f"{r['max_sentence_logprob_diff']:.1e}"] for r in data["results"]]
        lines += [f"### {device}: {_where(data)}; `{data['command']}`, {data['results'][0]['threads']} torch "
                  "thread(s), fp32", "",
                  *_table(["set", "model", "sentences", "tokens", "shared tokens/s", "forward tokens/s", "speed-up",
                           "ppl shared", "ppl forward", "max sentence diff"], rows)]
    return lines if len(lines) > 2 else []


def tune_transfer(results: Path) -> list[str]:
    """``tune_transfer.json``: tuned on one LibriSpeech dev set, applied to the other; nothing
    when absent."""
    data = _load(results / "tune_transfer.json")
    if not data:
        return []
    rows = []
    for r in data["rows"]:
        c = r["against_first_pass"]
        rows.append([f"{r['tuned_on']} -> {r['applied_to']}", r["system"], f"{r['tuned_wer']:.2f}",
                     f"{r['cross_validated_wer']:.2f}" if r.get("cross_validated_wer") is not None else "-",
                     f"{c['wer_a']:.2f}", f"{c['wer_b']:.2f}", f"{c['difference']:+.2f}",
                     f"{c['mapsswe']['p']:.2g}", f"[{c['bootstrap']['low']:+.2f}, {c['bootstrap']['high']:+.2f}]",
                     "yes" if c["significant"] else "no", _point(r["point"])])
    return ["## Tuning that cannot lose: tuned on one dev set, applied to the other (`python -m bench.tune_transfer`)",
            "", f"`{data['command']}`: model `{data['model']}`, ESPnet 30-best lists; WER in percent; p: matched "
            "pairs (MAPSSWE, utterances); interval: bootstrap 95% of the applied WER minus the first pass's. "
            "`joint` writes the first pass's own weights when its cross-validated WER is not below the first pass's.",
            "", *_table(["direction", "system", "tuned WER", "CV WER", "first pass", "applied WER", "difference", "p",
                         "bootstrap 95%", "significant", "weights"], rows)]


def untuned_defaults(results: Path) -> list[str]:
    """``untuned_defaults.json``: afp rescore with untuned weights on the ESPnet lists."""
    data = _load(results / "untuned_defaults.json")
    if not data:
        return []
    rows = [[r["set"], r["system"], " ".join(r["flags"]) or "(none)", f"{r['first_pass_wer']:.2f}", f"{r['wer']:.2f}",
             f"{r['p']:.2g}", f"{r['weights']['old_lm_weight']:g} / {r['weights']['lm_weight']:g}"] for r in data["rows"]]
    return ["## Untuned defaults on the ESPnet lists (`python -m bench.untuned_defaults`)", "",
            f"`{data['command']}`: `afp rescore --model {data['model']}` with the flags shown; p: matched pairs against "
            "the first pass.", "", *_table(["set", "system", "flags", "first pass", "WER", "p", "old LM / new LM weight"],
                                           rows)]


def acausal(results: Path) -> list[str]:
    """``acausal.json``: window models' pseudo-perplexities, expansion cost and WER."""
    data = _load(results / "acausal.json")
    if not data:
        return []
    lines = ["## Acausal window models (`python -m bench.acausal`)", ""]
    if "ppl" in data:
        rows = [[name, r["describe"], "pseudo-ppl" if r["pseudo"] else "ppl", f"{r['ppl']:.2f}", r["tokens"]]
                for name, r in data["ppl"]["models"].items()]
        lines += [f"`{data['commands']['ppl']}`: `{data['ppl']['valid']}`; GRU-256, one epoch of Switchboard each, the "
                  "same options. A pseudo-perplexity scores each word from the words around it: it says how much the "
                  "right context tells, not which is the better language model.", "",
                  *_table(["model", "kind", "measure", "value", "tokens"], rows)]
    if "expansion" in data:
        rows = [[name, v["causal"]["expanded_arcs"], v["two_sided"]["expanded_arcs"], f"{v['ratio']['expanded_arcs']:.2f}",
                 f"{v['causal']['total_s']:.2f}", f"{v['two_sided']['total_s']:.2f}", f"{v['ratio']['total_s']:.1f}",
                 f"{v['two_sided']['score_s']:.2f}"] for name, v in data["expansion"].items()]
        lines += [f"`{data['commands']['expansion']}`: causal expansion against the two-sided one (the causal model "
                  "plus the window model as a feature), in one run.", "",
                  *_table(["inputs", "causal arcs", "two-sided arcs", "arc ratio", "causal s", "two-sided s",
                           "time ratio", "two-sided scoring s"], rows)]
    if "wer" in data:
        sets = list(data["wer"]["first_pass"])
        rows = [["first pass", *(f"{data['wer']['first_pass'][s]:.2f}" for s in sets), "-", "-"]]
        for system, results_ in data["wer"]["systems"].items():
            tuned = [next(v for k, v in results_.items() if k.startswith(s) and "tuned on" in k) for s in sets]
            rows.append([system, *(f"{t['wer']:.2f}" for t in tuned),
                         " / ".join(f"{t['against_first_pass']['mapsswe']['p']:.2g}" for t in tuned),
                         " / ".join(f"{t['against_reweighted']['mapsswe']['p']:.2g}" if "against_reweighted" in t
                                    else "-" for t in tuned)])
        lines += [f"`{data['commands']['wer']}`: ESPnet 30-best lists, each system tuned on one dev set by the joint "
                  f"search and applied to the other; window model `{data['wer']['window_model']}` "
                  f"({data['wer']['window']}).", "",
                  *_table(["system", *sets, "p vs first pass", "p vs re-weighting"], rows)]
    return lines


def wer_models(results: Path) -> list[str]:
    """``wer_models.json`` (the bundled books-large models) and ``wer_models_books.json`` (the
    earlier 7.6M-word books/ models): an AFP model, a KN 4-gram and their mixture on the ESPnet lists."""
    lines = []
    for name, what in (("wer_models.json", "the bundled `models/librispeech` mixture and its parts (books/ + "
                                            "books-large/, 67.6M words)"),
                       ("wer_models_books.json", "the earlier models of books/ alone (7.6M words)")):
        data = _load(results / name)
        if not data or "first_pass" not in data:
            continue
        sets = list(data["first_pass"])
        rows = [["first pass", "-", *(f"{data['first_pass'][s]:.2f}" for s in sets), "-", "-"]]
        for system, found in data["systems"].items():
            tuned = [next(v for k, v in found.items() if k.startswith(s) and "tuned on" in k) for s in sets]
            rows.append([system, data["models"].get(system, {}).get("name", "-"),
                         *(f"{t['wer']:.2f}" for t in tuned),
                         " / ".join(f"{t['against_first_pass']['mapsswe']['p']:.2g}" for t in tuned),
                         " / ".join(f"{t['against_reweighted']['mapsswe']['p']:.2g}" if "against_reweighted" in t
                                    else "-" for t in tuned)])
        lines += [f"## Which LM helps the ESPnet first pass? {what[0].upper() + what[1:]} "
                  "(`python -m bench.wer_models`)", "",
                  f"`{data['command']}`: each system added to the recogniser's own LM and tuned by the joint search "
                  "on one dev set, applied to the other (WER %).", "",
                  *_table(["system", "model", *(f"{s} (tuned on the other)" for s in sets), "p vs first pass",
                           "p vs re-weighting"], rows)]
    return lines


def bundled_mixtures(results: Path) -> list[str]:
    """``ngram_prune.json`` and ``bundled_mixtures.json``: pruning sizes and the shipped mixtures."""
    lines = []
    prune = _load(results / "ngram_prune.json")
    if prune:
        texts = list(prune["rows"][0]["ppl"]) if prune["rows"] else []
        rows = [[f"{r['threshold']:g}", f"{r['total_ngrams']:,}", f"{r['store_mib']:.1f}",
                 f"{r['prune_seconds']:.0f}", *(f"{v:.2f}" for v in r["ppl"].values()),
                 *((f"{r['mixture']['ppl'][t]:.2f}" for t in texts) if "mixture" in r else ("-",) * len(texts))]
                for r in prune["rows"]]
        lines += ["## Entropy pruning of the 67.6M-word 4-gram (`python -m bench.ngram_prune`)", "",
                  f"`{prune['command']}`: built once ({prune['build_seconds']:.0f} s, peak "
                  f"{prune['peak_rss_mib']:.0f} MiB for the whole run), pruned at each threshold; perplexity of "
                  + "; ".join(f"{k}: {v}" for k, v in prune["texts"].items()) + ".", "",
                  *([f"Mixture columns: each kept 4-gram mixed with `{prune['mixtures']['command'].split()[-1]}` "
                     f"(EM on {prune['mixtures']['em_text']}; that model alone: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in prune["mixtures"]["model_alone"].items()) + ").", ""]
                    if "mixtures" in prune else []),
                  *_table(["threshold", "n-grams", "store MiB", "prune s", *(f"4-gram ppl {t}" for t in texts),
                           *(f"mixture ppl {t}" for t in texts)], rows)]
    mixes = _load(results / "bundled_mixtures.json")
    for preset, record in (mixes or {}).items():
        rows = [[label, f"{v['afp']:.2f}", f"{v['4-gram']:.2f}", f"{v['mixture']:.2f}"]
                for label, v in record["ppl"].items()]
        lines += [f"## Bundled mixture `models/{preset}` (`{record['command']}`)", "",
                  f"Weights {', '.join(f'{w:.4f}' for w in record['weights'])} (AFP, 4-gram) by EM on "
                  f"{record['em_text']}; 4-gram {sum(v for k, v in record['ngram'].items() if k.endswith('-grams')):,} "
                  f"n-grams after pruning at {record['ngram']['prune']:g}; sizes MiB: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in record["sizes_mib"].items()) + ".", "",
                  *_table(["text", "AFP part", "4-gram part", "mixture"], rows)]
    return lines


def ngrams(results: Path) -> list[str]:
    """``ngram_build.json`` and ``ngram_store.json``."""
    lines = []
    build = _load(results / "ngram_build.json")
    if build:
        rows = [[r["words"], sum(r["ngrams"].values()), f"{r['seconds']['build']:.0f}", f"{r['seconds']['write']:.0f}",
                 f"{r['peak_rss_mib']:.0f}", r["command"]] for r in build["runs"]]
        lines += ["## Kneser-Ney n-grams: `afp ngram`", "", build["note"] + ".", "",
                  *_table(["words", "n-grams", "build s", "write s", "peak MiB", "command"], rows)]
    speed = _load(results / "ngram_speed.json")
    if speed:
        rows = [[r["case"], r["afp_model"], f"{r['afp']['total']:.2f}", f"{r['afp']['expand']:.2f}",
                 f"{r['afp']['score']:.2f}", f"{r['afp']['search']:.2f}", f"{r['ngram_4gram']['total']:.2f}",
                 f"{r['total_ratio_afp_over_ngram']:.2f}", f"{r['shared_scoring_ratio_afp_over_ngram']:.2f}",
                 f"{r['mixture_run']['total']:.2f} (x{r['total_ratio_mixture_over_afp']:.2f})" if "mixture_run" in r
                 else "-"]
                for r in speed["rows"]]
        lines += ["## AFP model against a 4-gram of the same vocabulary (`python -m bench.ngram_speed`)", "",
                  f"`{speed['command']}`, one thread, side by side in one run; seconds summed over the inputs. The "
                  "last column: scoring alone on one shared expansion.", "",
                  *_table(["inputs", "AFP model", "AFP total s", "expand", "score", "search", "4-gram total s",
                           "AFP / 4-gram", "scoring only, same expansion", "mixture total s (/ AFP)"], rows)]
    store = _load(results / "ngram_store.json")
    if store:
        rows = [[r["reader"], f"{r['load_s']:.1f}", f"{r['peak_rss_mib']:.0f}", f"{r['lookups_per_s']:,.0f}",
                 f"{r['logprob']:.2f}"] for r in store["rows"] if "error" not in r]
        lines += ["## ARPA readers side by side (`python -m bench.ngram_store`)", "",
                  f"`{store['command']}`: {sum(store['ngrams'] or [])} n-grams; each reader in its own process, one "
                  "thread. kenlm is a benchmark reference only (built from source), never a dependency.", "",
                  *_table(["reader", "load s", "peak MiB", "lookups/s", "log-probability"], rows)]
    return lines


def _against(c: dict[str, Any] | None) -> str:
    """``-4.44 (p 0.00094, [-7.07, -1.71], significant)``: an :func:`afp.significance.compare`
    record (WER B minus A, matched-pairs p, bootstrap 95% interval), or ``-``."""
    if c is None:
        return "-"
    return (f"{c['difference']:+.2f} (p {c['mapsswe']['p']:.2g}, [{c['bootstrap']['low']:+.2f}, "
            f"{c['bootstrap']['high']:+.2f}]{', significant' if c['significant'] else ''})")


def _weights(point: dict[str, float] | None) -> str:
    """``lm 1.25, old lm 0, penalty 0.833, unk -11.2, decoder 1``: a tuned point, short names."""
    if not point:
        return "-"
    short = {"lm_weight": "lm", "old_lm_weight": "old lm", "word_penalty": "penalty", "unk_penalty": "unk"}
    return ", ".join(f"{short.get(k, k.removeprefix('score:'))} {0.0 if abs(v) < 1e-9 else v:.3g}"
                     for k, v in point.items())  # a search's 1e-15 is a 0


def pocketsphinx_wer_table(results: Path) -> list[str]:
    """``pocketsphinx_wer_table.json``: each system tuned on one PocketSphinx dev set and applied
    to the other, against the decoder's 1-best and 50-best rescoring; nothing when absent."""
    data = _load(results / "pocketsphinx_wer_table.json")
    if not data:
        return []
    systems, rows = data["systems"], data["rows"]

    def against(row: dict[str, Any], name: str) -> str:
        return _against(row.get("against", {}).get(name))

    table = []
    for name, system in systems.items():
        for row in sorted((r for r in rows.values() if r["system"] == name), key=lambda r: r["applied_to"]):
            timed = "rescore_seconds_per_utterance" in row
            table.append([system["label"], row["applied_to"], f"{row['wer']:.2f}", against(row, "decoder"),
                          against(row, data["reference"]),
                          f"{row['rescore_seconds_per_utterance']:.3f}" if timed else "-",
                          f"{row['tune_seconds']:.0f}" if timed else "-",
                          _weights(row["point"]) if timed else "-"])
    sets = ", ".join(f"{n} ({s['utterances']} utterances, {s['ref_words']:,} words, {s['audio_seconds'] / 60:.1f} "
                     "min)" for n, s in data["sets"].items())
    reference = systems.get(data["reference"], {}).get("label", data["reference"])
    lines = ["## Does exact lattice rescoring pay? PocketSphinx lattices (`python -m bench.pocketsphinx_wer_table`)",
             "", f"`{data['command']}`: the audio is {data['audio']}. Sets: {sets}. Each system tuned by afp tune's "
             f"joint search (random restarts: {data['tuning']['restarts']}, cross-validation folds: "
             f"{data['tuning']['folds']}, the decoder's 1-best as baseline) on one set and applied to the other; "
             "WER in percent on the set it was applied to. Differences: WER minus that of the decoder's 1-best / of "
             f"{reference}, matched-pairs p and bootstrap 95% interval. Seconds per utterance: rescoring the applied "
             f"set after reading it, {_where(data)}; tuning seconds apart (scoring the tuning set and the search). "
             f"Kaldi-style: histories merged at {data['kaldi_history']} words"
             + _plot(results, "pocketsphinx_wer_table.png") + ".", "",
             *_table(["system", "applied to", "WER", "vs decoder 1-best", f"vs {reference}", "s/utt", "tuning s",
                      "weights"], table)]
    if data.get("unavailable"):
        lines += ["Not in the table: " + "; ".join(f"{n} ({systems.get(n, {}).get('label', n)}): {why}"
                                                   for n, why in data["unavailable"].items()) + ".", ""]
    return lines


def _nbest_oracle(wer: dict[str, Any]) -> tuple[int, float] | None:
    """``(N, WER)`` of a set's ``nbestN_oracle`` column (bench.pocketsphinx_set.summarize), or None."""
    return next(((int(k[5:-7]), v["wer"]) for k, v in wer.items() if k.startswith("nbest") and k.endswith("_oracle")),
                None)


def pocketsphinx_sets(results: Path) -> list[str]:
    """``pocketsphinx_sets.json`` (bench.pocketsphinx_set's ``summarize`` per set): size, the
    decoder's 1-best and n-best oracle WER, decoding speed and lattice sizes; nothing when absent."""
    data = _load(results / "pocketsphinx_sets.json")
    if not data:
        return []
    rows, audio, sizes = [], {}, set()
    for name, s in data.items():
        oracle, links = _nbest_oracle(s["wer"]), s["lattice_links"]
        sizes |= {oracle[0]} if oracle else set()
        audio.setdefault(s["audio"], []).append(name)
        rows.append([name, "synthetic (TTS)" if s["synthetic"] else "real speech", s["utterances"],
                     f"{s['ref_words']:,}", f"{s['audio_seconds'] / 60:.1f}", f"{s['wer']['first_pass']['wer']:.2f}",
                     f"{oracle[1]:.2f}" if oracle else "-", f"{s['rtf']['decode']:.3f}",
                     f"{links['median']:,.0f} / {links['max']:,}"])
    first = next(iter(data.values()))
    return ["## PocketSphinx sets: the decoder's lattices, 1-best and n-best (`python -m bench.pocketsphinx_set`)", "",
            f"Decoder `{first['decoder']}`, PocketSphinx {first['pocketsphinx']}. Audio: "
            + "; ".join(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} {what}" for what, names in audio.items())
            + ". WER in percent; n-best oracle: per utterance the hypothesis of the list with the fewest errors; "
            "decoding RTF: the decoder's seconds per audio second. Commands: "
            + "; ".join(f"`{s['command']}`" for s in data.values()) + ".", "",
            *_table(["set", "audio", "utterances", "ref words", "audio min", "first pass (decoder 1-best)",
                     f"{'/'.join(map(str, sorted(sizes))) or 'n'}-best oracle", "decoding RTF",
                     "lattice links median / max"], rows)]


#: the steps of ``bench.pocketsphinx_rescore``'s speed table, in order (``totals`` keys ``STEP_seconds``; ``read``)
_RESCORE_STEPS = ("read", "determinize", "minimize", "fit", "expand", "score", "search")


def pocketsphinx_rescore(results: Path) -> list[str]:
    """``pocketsphinx_rescore.json``: per target_expanded_arcs value, the time of every step of
    rescoring each PocketSphinx set and the WER tuned on one set, applied to the other; nothing
    when absent or in the older format (``budgets`` in place of ``targets``)."""
    data = _load(results / "pocketsphinx_rescore.json")
    if not data or not isinstance(data.get("targets"), dict):
        return []
    known = _load(results / "pocketsphinx_sets.json") or {}
    speed, wer, real = [], [], set()
    for target, entry in sorted(data["targets"].items(), key=lambda kv: int(kv[0])):
        for name, run in entry["speed"].items():
            totals, audio, n = run["totals"], run["audio_seconds"], run["utterances"]
            if not known.get(name, {}).get("synthetic", True):
                real.add(name)
            steps = (totals.get(f"{k}_seconds", totals.get(k, 0.0)) / audio for k in _RESCORE_STEPS)
            speed.append([f"{int(target):,}", name, n, *(f"{v:.3f}" for v in steps),
                          f"{run['rtf_rescoring']:.3f}", f"{run['rtf_decoding']:.3f}",
                          f"{totals['expanded_arcs'] / n:,.0f}", f"{totals['contexts'] / n:,.0f}",
                          f"{run['oracle_wer_rescored']:.2f} ({run['oracle_wer_input']:.2f})",
                          f"{entry['peak_memory_mib']:.0f}" if "peak_memory_mib" in entry else "-"])
        for direction, r in entry.get("wer", {}).items():
            if "rescored_wer" not in r:  # the joint search kept the decoder's 1-best on the tuning set
                wer.append([f"{int(target):,}", direction, "-", "-", "no weights better than the decoder's 1-best",
                            "-"])
                continue
            wer.append([f"{int(target):,}", direction, f"{r['decoder_wer']:.2f}", f"{r['rescored_wer']:.2f}",
                        _against(r.get("against_decoder")), _weights(r.get("tune", {}).get("chosen", {}).get("point"))])
    lines = ["## Exact rescoring of PocketSphinx lattices: time per step and WER "
             "(`python -m bench.pocketsphinx_rescore`)", "",
             f"`{data['command'].strip()}`: model `{data['model']}` (loaded in {data['model_load_seconds']:.1f} s), "
             f"{_where(data)}; the audio is {data['audio']}"
             + (f", except {', '.join(sorted(real))} (real speech)" if real else "")
             + ". Each step in seconds per audio second, summed over the set (read: the SLF file; determinize, "
             "minimize, fit: the reduction before expansion); RTF: rescoring's and the decoder's; arcs and contexts: "
             "of the expansion, per utterance; oracle: the lattice oracle WER of the lattice rescored (of the input); "
             "peak: the process's resident memory after rescoring, before tuning"
             + _plot(results, "pocketsphinx_rescore.png") + ".", "",
             *_table(["target arcs", "set", "utterances", *_RESCORE_STEPS, "RTF rescoring", "RTF decoding",
                      "expanded arcs/utt", "contexts/utt", "oracle WER kept (input)", "peak MiB"], speed)]
    if wer:
        lines += ["Weights tuned by afp tune's joint search on one set and applied to the other, WER in percent; "
                  "difference: rescored minus the decoder's 1-best, matched-pairs p and bootstrap 95% interval.", "",
                  *_table(["target arcs", "tuned / applied", "decoder 1-best", "rescored", "vs decoder 1-best",
                           "weights"], wer)]
    return lines


SECTIONS: tuple[Section, ...] = (reproduction, bundled, epoch_timing, train_throughput, train_scale,
                                 softmax_wikitext, rescoring,
                                 long_lattices, hard_inputs, merged_rescoring, sentence_scoring, load, wer,
                                 tune_transfer, untuned_defaults, acausal, wer_models, ngrams, bundled_mixtures,
                                 conversational, pocketsphinx_sets, pocketsphinx_rescore,
                                 pocketsphinx_wer_table)


def render(results: Path = RESULTS) -> str:
    lines = ["# Benchmark results", "",
             "Generated by `python -m bench.report` from the JSON files in this directory; every number was "
             "measured by the command named in its section heading. CPU timings come from a shared machine: "
             "compare them only as ratios within one run.", ""]
    for section in SECTIONS:
        lines += section(results)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="fail when README.md differs from the JSON")
    args = parser.parse_args()
    text, path = render(args.results), args.results / "README.md"
    if args.check:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            sys.exit(f"{path} is out of date: run python -m bench.report")
        return
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
