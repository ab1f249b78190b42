"""The section on speed where users run it: the cost per link, every core from one command, the server."""

from __future__ import annotations

from pathlib import Path

from bench.report.common import device_files, table, where


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
