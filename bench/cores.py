"""Speed where users run it (issue 48): what a link costs on one thread, every core from one
command, and the server on every core, on real PocketSphinx lattices with tuned weights.

    python -m bench.cores [--sets DIR ...] [--dense 64] [--workers N] [--rounds 2] [--server-seconds 20]

For each set (``bench.pocketsphinx_set``), weights tuned on its first 100 lattices (``afp tune
--workers N``, timed), then:

* **one thread**: every lattice rescored by ``afp rescore --weights W --workers 1`` (one torch
  thread, model load included): wall, real-time factor, the set's links per second of audio and
  the cost per link (wall over the links of its lattices), peak memory.

On the ``--dense`` densest lattices of all the sets (links per second of audio), alternately
``--rounds`` times (the least wall of each kept, every wall listed):

* ``afp rescore --workers 1``, ``afp rescore --workers N`` (processes) and N independent
  processes at once (``--out-dir D --job i --num-jobs N``, what a user does by hand): walls, the
  speedups over one worker, the two results compared (words and scores), and the peak resident
  memory of every process of each run (sampled from /proc: the parent and each worker);
* ``afp tune`` on the first set's tuning lattices with one worker and with N (its scoring pass in
  worker processes): walls, the speedup and whether both chose the same point;
* the server: ``afp serve --processes 1``, ``--processes N`` and N one-process servers side by
  side (the client spreads over them), each driven for ``--server-seconds`` by ``2 N`` clients
  posting those lattices: requests and links per second, latency p50 and p95.

Writes ``bench/results/cores_<device>.json`` (the device named; ``--skip PART...`` keeps those
parts from the file as it was). Run it on a quiet machine: the ratios are what count, measured
side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, environment, python_path, write_json

LINKS = re.compile(rb"^N=\s*\d+\s+L=\s*(\d+)", re.M)


def links_of(path: Path) -> int:
    """The links of a PocketSphinx SLF file (its header's ``L=``)."""
    found = LINKS.search(path.read_bytes()[:4096])
    if found is None:
        raise SystemExit(f"{path}: no N=... L=... header line")
    return int(found.group(1))


class TreeMemory:
    """Samples the resident memory of a process and its descendants every 50 ms (from /proc):
    each process's peak (``VmHWM``) and the peak of their sum."""

    def __init__(self, root: int) -> None:
        self.root, self.peaks, self.total = root, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
        tree, frontier = [self.root], [self.root]
        while frontier:
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
            tree += frontier
        return tree

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            total = 0
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if "VmHWM" not in fields:
                    continue
                name = f"{pid}:{fields['Name'].strip()}"
                self.peaks[name] = max(self.peaks.get(name, 0), int(fields["VmHWM"].split()[0]) // 1024)
                total += int(fields["VmRSS"].split()[0]) // 1024
            self.total = max(self.total, total)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        return {"peak_total_mib": self.total, "peak_per_process_mib": sorted(self.peaks.values(), reverse=True)}


def run_afp(*argv: str, parallel: int = 1) -> dict[str, Any]:
    """``afp ARGV`` (one torch thread each); with ``parallel`` > 1, that many at once, the i-th
    given ``--job i``. Wall seconds, standard output (the first's) and memory (:class:`TreeMemory`)."""
    env = {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1"}
    started = time.perf_counter()
    procs, memory = [], []
    for job in range(1, parallel + 1):
        extra = ("--job", str(job), "--num-jobs", str(parallel)) if parallel > 1 else ()
        process = subprocess.Popen([sys.executable, "-m", "service.cli", *argv, *extra], cwd=REPO_ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(process)
        memory.append(TreeMemory(process.pid))
    outs = [process.communicate() for process in procs]
    wall = time.perf_counter() - started
    for process, (_, err) in zip(procs, outs):
        if process.returncode != 0:
            raise SystemExit(f"afp {' '.join(argv[:4])} ... failed ({process.returncode}): {err.decode()[-2000:]}")
    used = [m.stop() for m in memory]
    return {"wall_s": round(wall, 2), "out": outs[0][0].decode(),
            "peak_total_mib": sum(u["peak_total_mib"] for u in used),
            "peak_per_process_mib": sorted((p for u in used for p in u["peak_per_process_mib"]), reverse=True)}


def lattices_of(set_dir: Path, limit: int | None) -> list[Path]:
    """The first ``limit`` (all: None) lattices of a set of ``bench.pocketsphinx_set``, in key order."""
    files = sorted((set_dir / "lattices").glob("*.slf"))
    if not files:
        raise SystemExit(f"no lattices in {set_dir / 'lattices'}: build the set first (python -m bench.pocketsphinx_set)")
    return files[:limit] if limit else files


def audio_seconds(set_dir: Path, lattices: list[Path]) -> float:
    """The audio behind ``lattices`` (the set's ``set.json``), for the real-time factor."""
    seconds = {u["key"]: u["audio_seconds"] for u in json.loads((set_dir / "set.json").read_text())["utterances"]}
    return sum(seconds[p.name.removesuffix(".slf")] for p in lattices)


def tune(model: Path, refs: Path, lattices: list[Path], save: Path, workers: int) -> dict[str, Any]:
    """``afp tune --save SAVE --workers N`` timed: wall and search seconds, peak memory, the tuned
    WER and the chosen point."""
    done = run_afp("tune", "--model", str(model), "--refs", str(refs), "--save", str(save), "--json",
                   "--workers", str(workers), *map(str, lattices))
    report = json.loads(done["out"])
    return {"wall_s": done["wall_s"], "search_s": round(report["seconds"], 2), "peak_rss_mib": done["peak_total_mib"],
            "tuned_wer": report["best"]["wer"], "chosen": report["chosen"]["point"]}


def one_thread(model: Path, weights: Path, lattices: list[Path], audio: float) -> dict[str, Any]:
    links = sum(map(links_of, lattices))
    done = run_afp("rescore", "--model", str(model), "--weights", str(weights), "--workers", "1", "--threads", "1",
                   "--json", *map(str, lattices))
    return {"lattices": len(lattices), "links": links, "audio_s": round(audio, 2),
            "links_per_audio_s": round(links / audio), "wall_s": done["wall_s"], "rtf": round(done["wall_s"] / audio, 4),
            "us_per_link": round(1e6 * done["wall_s"] / links, 2), "peak_rss_mib": done["peak_per_process_mib"][0]}


def same_results(a: str, b: str) -> dict[str, Any]:
    from afp.compare import compare_answers

    found = compare_answers([json.loads(x) for x in a.splitlines()], [json.loads(x) for x in b.splitlines()],
                            ignore={"seconds", "timing"})
    return {"same": found.same, "largest_score_difference": found.largest, "difference": found.difference}


def one_command(model: Path, weights: Path, lattices: list[Path], workers: int, rounds: int, work: Path) -> dict[str, Any]:
    """One worker, N workers and N independent processes on the same lattices, alternately."""
    common = ("--model", str(model), "--weights", str(weights), "--threads", "1")
    runs: dict[str, list[dict[str, Any]]] = {"workers_1": [], f"workers_{workers}": [], f"processes_{workers}": []}
    for round_ in range(rounds):
        runs["workers_1"].append(run_afp("rescore", *common, "--workers", "1", "--json", *map(str, lattices)))
        runs[f"workers_{workers}"].append(run_afp("rescore", *common, "--workers", str(workers), "--json",
                                                  *map(str, lattices)))
        out = work / f"jobs-{round_}"
        runs[f"processes_{workers}"].append(run_afp("rescore", *common, "--workers", "1", "--out-dir", str(out),
                                                    "--quiet", *map(str, lattices), parallel=workers))
    report: dict[str, Any] = {"lattices": len(lattices), "links": sum(map(links_of, lattices)), "rounds": rounds}
    for name, done in runs.items():
        best = min(done, key=lambda run: run["wall_s"])
        report[name] = {k: v for k, v in best.items() if k != "out"} | {"walls_s": [run["wall_s"] for run in done]}
    one = report["workers_1"]["wall_s"]
    report["speedup_workers"] = round(one / report[f"workers_{workers}"]["wall_s"], 3)
    report["speedup_processes"] = round(one / report[f"processes_{workers}"]["wall_s"], 3)
    report["workers_over_processes"] = round(report["speedup_workers"] / report["speedup_processes"], 3)
    report["results_of_n_workers"] = same_results(runs["workers_1"][0]["out"], runs[f"workers_{workers}"][0]["out"])
    return report


def tune_side_by_side(model: Path, refs: Path, lattices: list[Path], workers: int, rounds: int,
                      work: Path) -> dict[str, Any]:
    """``afp tune`` scoring its dev set with one worker and with N, alternately: walls (the least
    of each), the speedup, and whether both chose the same point."""
    runs: dict[str, list[dict[str, Any]]] = {"workers_1": [], f"workers_{workers}": []}
    for _ in range(rounds):
        for name, count in (("workers_1", 1), (f"workers_{workers}", workers)):
            runs[name].append(tune(model, refs, lattices, work / f"tune-{name}.json", count))
    report: dict[str, Any] = {"lattices": len(lattices), "rounds": rounds}
    for name, done in runs.items():
        report[name] = {"wall_s": min(run["wall_s"] for run in done), "walls_s": [run["wall_s"] for run in done],
                        "search_s": min(run["search_s"] for run in done), "chosen": done[0]["chosen"]}
    report["speedup"] = round(report["workers_1"]["wall_s"] / report[f"workers_{workers}"]["wall_s"], 3)
    report["same_point"] = report["workers_1"]["chosen"] == report[f"workers_{workers}"]["chosen"]
    return report


# ---------------------------------------------------------------------------------------- server
def start_servers(count: int, processes: int, model: Path, weights: Path, base_port: int) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1", "AFP_REQUEST_TIMEOUT_S": "300"}
    return [subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--model", str(model), "--weights",
                              str(weights), "--port", str(base_port + i), "--processes", str(processes),
                              "--no-access-log", "--log-level", "warning"], cwd=REPO_ROOT, env=env)
            for i in range(count)]


async def drive(urls: list[str], bodies: list[tuple[bytes, int]], clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` connections posting ``bodies`` (round robin, spread over ``urls``) for ``seconds``."""
    import httpx

    latencies: list[float] = []
    links = errors = 0
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        nonlocal links, errors
        async with httpx.AsyncClient(timeout=300) as http:
            i = index
            while time.perf_counter() < deadline:
                body, count = bodies[i % len(bodies)]
                started = time.perf_counter()
                reply = await http.post(f"{urls[i % len(urls)]}/v1/rescore", content=body,
                                        headers={"Content-Type": "text/plain"})
                latencies.append(time.perf_counter() - started)
                links += count if reply.status_code == 200 else 0
                errors += reply.status_code != 200
                i += clients

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else latencies * 19
    return {"requests": len(latencies), "errors": errors, "requests_per_s": round(len(latencies) / wall, 3),
            "links_per_s": round(links / wall), "p50_s": round(statistics.median(latencies), 3),
            "p95_s": round(cuts[18], 3)}


def server_load(model: Path, weights: Path, lattices: list[Path], workers: int, seconds: float) -> dict[str, Any]:
    import httpx

    bodies = [(path.read_bytes(), links_of(path)) for path in lattices]
    setups = {"processes_1": (1, 1), f"processes_{workers}": (1, workers), f"servers_{workers}": (workers, 1)}
    report: dict[str, Any] = {"clients": 2 * workers, "seconds": seconds}
    for name, (count, processes) in setups.items():
        servers = start_servers(count, processes, model, weights, 8700)
        urls = [f"http://127.0.0.1:{8700 + i}" for i in range(count)]
        try:
            for url in urls:
                deadline = time.monotonic() + 180
                while True:
                    try:
                        if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{url}: the server did not become ready")
                    time.sleep(0.2)
            asyncio.run(drive(urls, bodies[:2], 2 * workers, 2.0))  # every process warm
            memory = [TreeMemory(server.pid) for server in servers]
            report[name] = asyncio.run(drive(urls, bodies, 2 * workers, seconds))
            report[name]["peak_total_mib"] = sum(m.stop()["peak_total_mib"] for m in memory)
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                server.wait(60)
    base = report["processes_1"]["links_per_s"]
    report["speedup_processes"] = round(report[f"processes_{workers}"]["links_per_s"] / base, 3)
    report["speedup_servers"] = round(report[f"servers_{workers}"]["links_per_s"] / base, 3)
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from afp.workers import available_cores

    parser = argparse.ArgumentParser(prog="python -m bench.cores", description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=Path, nargs="+",
                        default=[REPO_ROOT / "runs" / "pocketsphinx" / s for s in ("dev_clean", "dev_other")])
    parser.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "librispeech")
    parser.add_argument("--tune-limit", type=int, default=100, help="lattices of each set the weights are tuned on")
    parser.add_argument("--limit", type=int, help="the first N lattices of each set for the one-thread runs")
    parser.add_argument("--dense", type=int, default=64, help="the densest N lattices for the parallel runs")
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server-seconds", type=float, default=20.0, help="each server setting's load (0: none)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["one-thread", "one-command", "tune", "server"],
                        help="parts not to run: their results are kept from the output file when it has them")
    parser.add_argument("--out", type=Path, help="default: bench/results/cores_<device>.json")
    args = parser.parse_args(argv)
    out = args.out or RESULTS / f"cores_{'gpu' if environment().get('cuda') else 'cpu'}.json"
    report: dict[str, Any] = {"command": "python -m bench.cores " + " ".join(argv if argv is not None else sys.argv[1:]),
                              "environment": environment(), "workers": args.workers, "sets": {}}
    earlier = json.loads(out.read_text()) if args.skip and out.is_file() else {}
    if earlier:
        report["kept_from_earlier_run"] = {"command": earlier.get("command"), "parts": args.skip}
    dense: list[tuple[float, Path]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for set_dir in args.sets:
            name = set_dir.name
            refs, files = set_dir / "ref.trn", lattices_of(set_dir, args.limit)
            weights = work / f"{name}.weights.json"
            entry: dict[str, Any] = {"tune": tune(args.model, refs, lattices_of(set_dir, args.tune_limit), weights,
                                                  args.workers)}
            if "one-thread" not in args.skip:
                entry["one_thread"] = one_thread(args.model, weights, files, audio_seconds(set_dir, files))
            elif "one_thread" in earlier.get("sets", {}).get(name, {}):
                entry["one_thread"] = earlier["sets"][name]["one_thread"]
            report["sets"][name] = entry
            dense += [(links_of(p) / audio_seconds(set_dir, [p]), p) for p in files]
            print(json.dumps({name: entry}), file=sys.stderr)
        weights = work / f"{args.sets[0].name}.weights.json"
        chosen = [p for _, p in sorted(dense, key=lambda x: -x[0])[:args.dense]]
        first = args.sets[0]
        parts = {"one_command": ("one-command", lambda: one_command(args.model, weights, chosen, args.workers,
                                                                     args.rounds, work)),
                 "tune_workers": ("tune", lambda: tune_side_by_side(args.model, first / "ref.trn",
                                                                    lattices_of(first, args.tune_limit), args.workers,
                                                                    args.rounds, work)),
                 "server": ("server", lambda: server_load(args.model, weights, chosen, args.workers,
                                                          args.server_seconds))}
        for key, (flag, run) in parts.items():
            if flag not in args.skip and not (key == "server" and args.server_seconds <= 0):
                report[key] = run()
                print(json.dumps({key: report[key]}), file=sys.stderr)
            elif key in earlier:
                report[key] = earlier[key]
    write_json(out, report)
    return report


if __name__ == "__main__":
    main()
