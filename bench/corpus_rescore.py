"""Rescoring a corpus (issue 39): one process against its parallel forms, and a killed-and-resumed run.

The PocketSphinx dev sets' lattices (``bench.pocketsphinx_set``: 400 + 400) are split into
``--inputs`` (16) folders of lattice files (links, dealt round-robin in key order), and each
system rescores all of them with ``afp rescore --out-dir`` in a fresh output folder, one after
another on this machine:

``one``      one process, one thread (``--workers 1``)
``workers2`` one command, ``--workers 2`` (two worker processes; in threads, their LM calls merged,
             before issue 48)
``jobs2``    two processes at once, ``--job 1 --num-jobs 2`` and ``--job 2 --num-jobs 2``
``ray2``     a local Ray cluster (a head with 2 CPUs on 127.0.0.1) and ``--ray ADDRESS --ray-workers 2``
``killed``   one process SIGKILLed once half the inputs are done, then run again to the end

Recorded per system: wall seconds (process start to end, model loading included), lattices/s,
the speed-up over ``one``, the peak resident memory of each worker (its summary's
``peak_rss_mib``), Ray's own overhead per input (the driver's time for an input less the
worker's), and whether the results equal ``one``'s (the same files, words, and scores within
:data:`afp.compare.SCORE_TOLERANCE`; the largest score difference)::

    .venv/bin/python -m bench.corpus_rescore                       # all systems, ~45 min on 2 cores
    .venv/bin/python -m bench.corpus_rescore --systems one,jobs2 --per-input 5

Results: ``bench/results/corpus_rescore.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, environment, python_path, write_json

SYSTEMS = ("one", "workers2", "jobs2", "ray2", "killed")
DEFAULT_SETS = (REPO_ROOT / "runs" / "pocketsphinx" / "dev_clean", REPO_ROOT / "runs" / "pocketsphinx" / "dev_other")
RESULTS_FILE = RESULTS / "corpus_rescore.json"


def split_inputs(sets: Sequence[Path], work: Path, inputs: int, per_input: int | None = None) -> list[Path]:
    """``inputs`` folders under ``work`` holding links to every ``lattices/*.slf`` of ``sets``,
    dealt round-robin in (set, key) order; ``per_input``: at most that many each (a short run)."""
    files = [f for s in sets for f in sorted((s / "lattices").glob("*.slf"))]
    if not files:
        raise SystemExit(f"no lattices in {', '.join(str(s / 'lattices') for s in sets)}: build the sets first "
                         "(python -m bench.pocketsphinx_set --ref ... --name dev_clean; see docs/benchmarks.md)")
    shutil.rmtree(work, ignore_errors=True)
    folders = [work / f"part-{i:02d}" for i in range(1, inputs + 1)]
    for folder in folders:
        folder.mkdir(parents=True)
    for k, f in enumerate(files):
        folder = folders[k % inputs]
        if per_input is None or len(list(folder.iterdir())) < per_input:
            (folder / f.name).symlink_to(f.resolve())
    return folders


def afp_command(model: Path, out: Path, inputs: Sequence[Path], *flags: str) -> list[str]:
    """``afp rescore --out-dir``, one worker unless ``flags`` say otherwise (the last ``--workers`` counts)."""
    return [sys.executable, "-m", "service.cli", "rescore", "--model", str(model), "--out-dir", str(out), "--quiet",
            "--workers", "1", *flags, *map(str, inputs)]


def child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **extra}


def run_all(commands: Sequence[list[str]]) -> tuple[float, list[dict[str, Any]]]:
    """Start ``commands`` at once; wall seconds until the last ends, and each one's summary line."""
    started = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for c in commands]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - started
    for proc, (out, err) in zip(procs, outs):
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}): {err[-2000:]}")
    return wall, [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def killed_run(command: list[str], out: Path, inputs: int) -> dict[str, Any]:
    """SIGKILL ``command`` once half its inputs have results, run it again; both walls."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while len(list(out.glob("*.jsonl"))) < inputs // 2 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = time.perf_counter() - started
    done_before = len(list(out.glob("*.jsonl")))
    wall, (summary,) = run_all([command])
    return {"killed_after_s": round(first, 2), "inputs_done_when_killed": done_before, "resume_s": round(wall, 2),
            "wall_s": round(first + wall, 2), "summary": summary}


def compare_with(reference: Path, out: Path) -> dict[str, Any]:
    """Whether ``out`` holds ``reference``'s results (files, keys, words; scores within the tolerance)."""
    from afp.compare import compare_answers

    def load(folder: Path) -> dict[str, list[dict[str, Any]]]:
        return {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in sorted(folder.glob("*.jsonl"))}

    expected, got = load(reference), load(out)
    if sorted(expected) != sorted(got):
        return {"same": False, "difference": f"files differ: {sorted(set(expected) ^ set(got))[:5]}"}
    largest, difference = 0.0, None
    for name in expected:
        found = compare_answers(expected[name], got[name], ignore={"seconds", "timing"})
        largest = max(largest, found.largest)
        difference = difference or (found.difference and f"{name}: {found.difference}")
    keys = [line["key"] for lines in got.values() for line in lines]
    return {"same": difference is None and len(keys) == len(set(keys)), "difference": difference,
            "largest_score_difference": largest, "lattices": len(set(keys))}


def measure(system: str, model: Path, work: Path, folders: list[Path]) -> dict[str, Any]:
    out = work / f"out-{system}"
    shutil.rmtree(out, ignore_errors=True)
    if system == "one":
        wall, summaries = run_all([afp_command(model, out, folders)])
    elif system == "workers2":
        wall, summaries = run_all([afp_command(model, out, folders, "--workers", "2")])
    elif system == "jobs2":
        wall, summaries = run_all([afp_command(model, out, folders, "--job", str(j), "--num-jobs", "2") for j in (1, 2)])
    elif system == "ray2":
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
        try:
            wall, summaries = run_all([afp_command(model, out, folders, "--ray", cluster.address, "--ray-workers", "2")])
        finally:
            cluster.shutdown()
    elif system == "killed":
        record = killed_run(afp_command(model, out, folders), out, len(folders))
        wall, summaries = record.pop("wall_s"), [record.pop("summary")]
        return {"system": system, "wall_s": wall, **record, "summaries": summaries}
    else:
        raise SystemExit(f"unknown system {system!r}: expected {', '.join(SYSTEMS)}")
    return {"system": system, "wall_s": round(wall, 2), "summaries": summaries}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus_rescore", description=__doc__.split("\n")[0])
    parser.add_argument("--sets", type=Path, nargs="+", default=list(DEFAULT_SETS), help="PocketSphinx set folders")
    parser.add_argument("--model", type=Path, default=REPO_ROOT / "models" / "librispeech")
    parser.add_argument("--inputs", type=int, default=16, help="input folders the lattices are split into (16)")
    parser.add_argument("--per-input", type=int, help="at most this many lattices per input (a short run)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "runs" / "corpus_rescore")
    parser.add_argument("--out", type=Path, default=RESULTS_FILE)
    parser.add_argument("--note", default="", help="what else ran on the machine")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    folders = split_inputs(args.sets, args.work / "inputs", args.inputs, args.per_input)
    lattices = sum(len(list(f.iterdir())) for f in folders)
    rows = []
    for system in systems:
        row = measure(system, args.model, args.work, folders)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "summaries"}), file=sys.stderr, flush=True)
    one = next((r for r in rows if r["system"] == "one"), None)
    for row in rows:
        summaries = row["summaries"]
        row["lattices"] = sum(s["lattices"] for s in summaries)
        row["lattices_per_s"] = round(lattices / row["wall_s"], 3)
        row["speedup_over_one"] = round(one["wall_s"] / row["wall_s"], 3) if one else None
        row["peak_rss_mib_per_worker"] = max(s["peak_rss_mib"] for s in summaries)
        row["ray_overhead_s_per_input"] = summaries[0].get("ray_overhead_seconds_per_input")
        row["failed"] = sum(s["failed"] + s["lattices_failed"] for s in summaries)
        if one and row is not one:
            row["equal_to_one"] = compare_with(args.work / "out-one", args.work / f"out-{row['system']}")
    record = {"command": "python -m bench.corpus_rescore " + " ".join(argv if argv is not None else sys.argv[1:]),
              "sets": [str(s.relative_to(REPO_ROOT)) if s.is_relative_to(REPO_ROOT) else str(s) for s in args.sets],
              "model": str(args.model.relative_to(REPO_ROOT)) if args.model.is_relative_to(REPO_ROOT) else str(args.model),
              "inputs": len(folders), "lattices": lattices, "environment": {**environment(), "machine": _cpu_name()},
              "note": args.note, "systems": rows}
    write_json(args.out, record)
    return record


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
