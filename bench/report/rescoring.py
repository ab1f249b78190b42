"""Sections on rescoring speed: real AMI lattices against n-best and Kaldi-style rescoring, merged
model calls, the HTTP load test and a corpus job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.report.common import by, device_files, load_json, plot_link, ratio_cell, table, where


def rescoring(results: Path) -> list[str]:
    """``rescoring_<device>.json``: AFP-rho's expansion and time on the AMI lattices against
    n-best and Kaldi-style rescoring, and the Kaldi-style LM error; "Not run yet." when absent."""
    lines = ["## Rescoring real AMI lattices (`python -m bench.rescoring_speed`)", ""]
    for device, data in device_files(results, "rescoring"):
        rows = []
        for rho, afp in data["afp"].items():
            ratios = data["ratios"][rho]
            rows.append([rho, f"{afp['expanded_arcs']:,}", f"{afp['unique_contexts']:,}", afp["total_seconds"],
                         *(ratios[f"nbest_{n}_over_afp"] for n in data["nbest"]), ratios["kaldi_style_over_afp"]])
        nbest = [f"n-best {n} / AFP" for n in data["nbest"]]
        models = data["models"]
        afp_ppl = ", ".join(f"{rho} {ppl:.2f}" for rho, ppl in models["afp_valid_ppl"].items())
        lines += [f"### {device}: {where(data)}; {len(data['lattices'])} lattices"
                  + plot_link(results, f"rescoring_{device}.png"), "",
                  f"Models: {json.dumps(models['architecture'])} on conversational text; validation perplexity "
                  f"of the exact RNN {models['rnn_valid_ppl']:.2f}, of AFP {afp_ppl}. Ratios are times of the "
                  f"baseline over AFP-rho's total (above 1: AFP is faster).", "",
                  *table(["rho", "expanded arcs", "unique contexts", "AFP total s", *nbest, "Kaldi-style / AFP"],
                         rows)]
        rows = [[name, k["total_seconds"], k["lm_error_vs_true_rnn"]["mean_abs"], k["lm_error_vs_true_rnn"]["max_abs"]]
                for name, k in data["kaldi_style"].items()]
        lines += ["Kaldi-style rescoring (RNN state from the first history to arrive): its LM scores against the "
                  "same RNN's true sentence scores, in nats per hypothesis:", "",
                  *table(["history", "total s", "mean abs error", "max abs error"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def merged_rescoring(results: Path) -> list[str]:
    """``merged_rescoring_<device>.json``: lattices/s and contexts/s, one model call per lattice
    against merged calls, per set and output-layer precision; nothing when absent."""
    lines = ["## Rescoring every real lattice: one model call per lattice against merged calls"
             + by("merged_rescoring"), ""]
    for device, data in device_files(results, "merged_rescoring"):
        rows = []
        for name, entry in data["sets"].items():
            for precision, modes in entry["precisions"].items():
                for mode, run in modes.items():
                    if not isinstance(run, dict) or "lattices_per_s" not in run:
                        continue
                    rows.append([name, entry["lattices"], precision, mode.replace("_", " "), run["model_calls"],
                                 round(run["lattices_per_s"], 1), round(run["contexts_per_s"]),
                                 ratio_cell(run.get("speed_over_per_lattice")),
                                 {True: "yes", False: "no"}.get(run.get("same_best_words"), "-"),
                                 f"{run['max_abs_lm_logprob_diff']:.1e}" if "max_abs_lm_logprob_diff" in run else "-"])
                for other, cmp in modes.items():
                    if other.startswith("vs_"):
                        rows.append([name, entry["lattices"], precision, f"per lattice {other.replace('_', ' ')}", "-",
                                     "-", "-", ratio_cell(cmp["speed_ratio_per_lattice"]),
                                     "yes" if cmp["same_best_words"] else "no", f"{cmp['max_abs_lm_logprob_diff']:.1e}"])
        lines += [f"### {device}: {where(data)}; merged calls of up to {data['args']['batch_pairs']:,} pairs; the "
                  "best path's words and LM log-probability compared lattice by lattice with one call per lattice "
                  "(float32) or, for `vs fp32` rows, with the float32 output layer", "",
                  *table(["set", "lattices", "output layer", "mode", "model calls", "lattices/s", "contexts/s",
                          "x per lattice", "same best words", "max abs LM diff"], rows)]
    return lines if len(lines) > 2 else []


def load_test(results: Path) -> list[str]:
    """``load_<device>.json``: requests per second and latency quantiles of the HTTP service,
    with and without the request batcher, per number of connections; "Not run yet." when absent."""
    lines = ["## HTTP load test (`python -m bench.load_test`)", ""]
    for device, data in device_files(results, "load"):
        on, off = data["results"]["batching"], data["results"]["no_batching"]

        def quantiles(r: dict[str, Any]) -> str:
            return f"{r['p50']:.3f} / {r['p95']:.3f} / {r['p99']:.3f}"

        rows = [[a["connections"], a["throughput"], b["throughput"], quantiles(a), quantiles(b),
                 sum(a["errors"].values()) + sum(b["errors"].values())] for a, b in zip(on, off, strict=True)]
        lines += [f"### {device}: {where(data)}; model `{data['model']}`, {data['seconds_per_setting']:.0f} s per "
                  f"setting, {data['lattices']} lattices round-robin" + plot_link(results, f"load_{device}.png"), "",
                  *table(["connections", "req/s batching", "req/s no batching", "p50/p95/p99 s batching",
                          "p50/p95/p99 s no batching", "errors"], rows)]
    return lines if len(lines) > 2 else [*lines, "Not run yet.", ""]


def corpus_rescore(results: Path) -> list[str]:
    """``corpus_rescore.json``: a corpus job in each form (one process, threads, ``--job`` x2,
    Ray, killed and resumed): wall time, lattices/s, speed-up over one process, peak memory per
    worker, Ray's overhead per input, and whether the results equal one process's; nothing when absent."""
    data = load_json(results / "corpus_rescore.json")
    lines = ["## Rescoring a corpus (`python -m bench.corpus_rescore`)", ""]
    if not data:
        return []
    rows = []
    for row in data["systems"]:
        equal = row.get("equal_to_one")
        same = "-" if equal is None else ("yes" if equal["same"] else f"NO: {equal['difference']}")
        overhead = row.get("ray_overhead_s_per_input")
        killed = (f"killed after {row['killed_after_s']} s ({row['inputs_done_when_killed']} inputs done), "
                  f"resumed in {row['resume_s']} s" if "killed_after_s" in row else "")
        rows.append([row["system"], row["wall_s"], row["lattices_per_s"], row["speedup_over_one"],
                     row["peak_rss_mib_per_worker"], "-" if overhead is None else overhead, row["failed"], same,
                     killed])
    env = data["environment"]
    lines += [f"`{data['command']}` on {env.get('machine', env.get('cpu'))} ({env.get('cpu_count')} cores), torch "
              f"{env.get('torch')}: {data['lattices']} lattices of {', '.join(data['sets'])} as {data['inputs']} "
              f"inputs, model `{data['model']}`, one torch thread per process; wall seconds from process start to "
              f"end (model loading included). {data.get('note', '')}".rstrip(), "",
              *table(["system", "wall s", "lattices/s", "speed-up over one", "peak MiB per worker",
                      "Ray overhead s/input", "failed", "equal to one", "kill and resume"], rows)]
    return lines


def cores(results: Path) -> list[str]:
    """``cores_<device>.json`` (issue 48): the cost per link on one thread per set (with its links
    per second of audio), one command's N workers against N independent processes on the densest
    lattices, and the server's N processes against N servers; nothing when absent."""
    found = device_files(results, "cores")
    if not found:
        return []
    lines = ["## Every core: cost per link, one command, the server (`python -m bench.cores`)", ""]
    for device, data in found:
        n = data["workers"]
        env = data["environment"]
        lines += [f"`{data['command']}` on {env.get('cpu_model') or 'a CPU'}, {where(data)} ({env.get('cpu_count')} cores), "
                  f"{device}; weights tuned on each set's first lattices (the first set's for the parallel runs); "
                  f"walls include loading the model.", ""]
        rows = [[name, s["one_thread"]["lattices"], s["one_thread"]["links_per_audio_s"], f'{s["one_thread"]["rtf"]:.4f}',
                 s["one_thread"]["us_per_link"], s["one_thread"]["peak_rss_mib"], s["tune"]["wall_s"]]
                for name, s in data["sets"].items() if "one_thread" in s]
        lines += table(["set", "lattices", "links per s of audio", "RTF, one thread", "µs per link",
                        "peak MiB", f"afp tune --workers {n} s"], rows)
        one = data.get("one_command")
        if one:
            rows = [[name.replace("_", " "), one[name]["wall_s"], ", ".join(map(str, one[name]["walls_s"])),
                     one[name]["peak_total_mib"], ", ".join(map(str, one[name]["peak_per_process_mib"]))]
                    for name in ("workers_1", f"workers_{n}", f"processes_{n}")]
            same = one["results_of_n_workers"]
            lines += [f"The {one['lattices']} densest lattices ({one['links']} links), alternately {one['rounds']} "
                      f"times: `--workers {n}` {one['speedup_workers']:.2f}x one worker, {n} independent processes "
                      f"(`--job i --num-jobs {n}`) {one['speedup_processes']:.2f}x; workers over processes "
                      f"{one['workers_over_processes']:.2f}; `--workers {n}` results equal one worker's: "
                      f"{'yes, bit for bit' if same['same'] and same['largest_score_difference'] == 0 else same}.", "",
                      *table(["run", "least wall s", "walls s", "peak MiB in all", "peak MiB per process"], rows)]
        tune = data.get("tune_workers")
        if tune:
            lines += [f"`afp tune` on {tune['lattices']} lattices of the first set: `--workers {n}` (its scoring pass "
                      f"in worker processes) {tune['workers_' + str(n)]['wall_s']} s against one worker's "
                      f"{tune['workers_1']['wall_s']} s ({tune['speedup']:.2f}x; the search itself, "
                      f"{tune['workers_1']['search_s']} s, runs in one process), the same chosen point: "
                      f"{'yes' if tune['same_point'] else 'NO'}.", ""]
        server = data.get("server")
        if server:
            rows = [[name.replace("_", " "), s["requests_per_s"], s["links_per_s"], s["p50_s"], s["p95_s"],
                     s["errors"], s["peak_total_mib"]]
                    for name, s in server.items() if isinstance(s, dict)]
            lines += [f"The server, {server['clients']} clients posting those lattices for {server['seconds']:g} s "
                      f"each: `--processes {n}` {server['speedup_processes']:.2f}x one process in links/s, "
                      f"{n} one-process servers {server['speedup_servers']:.2f}x.", "",
                      *table(["server", "requests/s", "links/s", "p50 s", "p95 s", "errors", "peak MiB in all"], rows)]
    return lines
