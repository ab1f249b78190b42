"""Training at scale: peak memory and tokens/s of ``afp train --data`` (memory-mapped shards)
against ``afp train --train FILE`` (the whole corpus in Python lists and one tensor per sentence).

  python -m bench.train_scale --legacy-words 100   # bench/results/train_scale.json: both at 100M words
                                                   # (the legacy load peaks at ~13 GB; ~10 min on 2 cores)
  python -m bench.train_scale                      # 100M words, legacy at 10M (machines with less memory)
  python -m bench.train_scale --words 0.2 --legacy-words 0.1 --batches 5   # a check that it runs

Steps, each in a child process whose peak RSS is taken from ``os.wait4`` (``ru_maxrss``) and
whose anonymous and file-backed resident memory is sampled from ``/proc/PID/status``:

  1. corpus: the training texts of switchboard, meetings and books (``../shared/data``) repeated
     until ``--words`` million words, written under ``--work`` (default outside the repository;
     reused when present; never committed); the legacy corpus is its first ``--legacy-words``
     million words.
  2. ``afp prepare`` on the large corpus (its memory should not grow with the corpus).
  3. load: what a training process holds for a whole epoch: ``lm.train.load_data`` plus one
     epoch's batch plan and its first ``--batches`` batches, for the shards and for the legacy
     text (the legacy path holds about 115 bytes per word here).
  4. train: ``afp train`` for one epoch of ``--batches`` batches, tokens/s from its metrics.
     The number of batches is fixed with ``--max-train-sentences = batches * batch_size`` and
     ``--epochs 1``; ``--max-steps`` comes from the other branch of issue 12 and is not used here.
     Both use the vocabulary that ``afp prepare`` built (the legacy run reads its words.txt), so
     they train the same model; the legacy run still reads and splits its whole file, but encodes
     only those sentences. With ``--batch-tokens`` the shards are also trained
     with a token budget on the same sentences (so a different number of batches).

Writes ``bench/results/train_scale.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, environment, read_metrics, write_json

SOURCES = ("switchboard", "meetings", "books")
MODEL_ARGS = "--cell gru --hidden 256 --rho 3 --softmax adaptive"


def build_corpus(path: Path, words: int) -> dict[str, Any]:
    """Write the training texts of :data:`SOURCES`, again and again, until ``words`` words (the
    sentence that reaches it included); streams, so memory does not grow. Reuses a complete file."""
    done = path.with_suffix(".json")
    if path.is_file() and done.is_file():
        info = json.loads(done.read_text(encoding="utf-8"))
        if info.get("target_words") == words:
            return info
    sources = [SHARED_DATA / name / "train.txt" for name in SOURCES]
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise SystemExit(f"{', '.join(missing)} missing: this benchmark needs ../shared/data")
    path.parent.mkdir(parents=True, exist_ok=True)
    written = lines = passes = 0
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        while written < words:
            passes += 1
            for source in sources:
                with source.open(encoding="utf-8") as f:
                    for line in f:
                        count = len(line.split())
                        if not count:
                            continue
                        out.write(line if line.endswith("\n") else line + "\n")
                        written += count
                        lines += 1
                        if written >= words:
                            break
                if written >= words:
                    break
    tmp.replace(path)
    info = {"target_words": words, "words": written, "lines": lines, "passes": passes,
            "sources": [str(s) for s in sources]}
    done.write_text(json.dumps(info) + "\n", encoding="utf-8")
    return info


def measure(command: list[str], log: Path) -> dict[str, Any]:
    """Run ``command`` (cwd: the repository) and report its exit status, wall seconds, peak RSS
    (``ru_maxrss``) and the peaks of ``RssAnon``/``RssFile`` sampled every 0.1 s, in MiB."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        peaks = {"RssAnon": 0, "RssFile": 0}
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peaks = {key: max(value, _proc_status_kb(proc.pid, key)) for key, value in peaks.items()}
            time.sleep(0.1)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    result = {"command": " ".join(command), "returncode": proc.returncode,
              "wall_seconds": round(time.perf_counter() - started, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
              "peak_rss_anon_mib": round(peaks["RssAnon"] / 1024, 1),
              "peak_rss_file_mib": round(peaks["RssFile"] / 1024, 1), "log": str(log)}
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"failed ({proc.returncode}): {result['command']}\n{tail}")
    return result


def _proc_status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def load_child(cfg_json: str, batches_to_read: int) -> None:
    """(Runs in a child.) Load the data as training does, plan one epoch, read some batches;
    print what was loaded as JSON."""
    import torch

    from lm.config import TrainConfig
    from lm.corpus import batches
    from lm.train import load_data

    torch.set_num_threads(1)
    cfg = TrainConfig.from_dict(json.loads(cfg_json))
    started = time.perf_counter()
    data = load_data(cfg)
    loaded = time.perf_counter() - started
    stream = batches(data.train, cfg.batch_size, shuffle=True, seed=1, max_tokens=cfg.batch_tokens)
    planned = time.perf_counter() - started - loaded
    read = 0
    for read, _ in enumerate(stream, 1):
        if read >= batches_to_read:
            break
    print(json.dumps({"sentences": data.train.sentences, "tokens": data.train.tokens, "vocab_size": data.vocab.size,
                      "batches_in_epoch": len(stream), "batches_read": read, "load_seconds": round(loaded, 2),
                      "plan_seconds": round(planned, 2)}))


def _last_json(log: Path) -> dict[str, Any]:
    lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=float, default=100.0, help="corpus size for the shards, million words")
    parser.add_argument("--legacy-words", type=float, default=10.0,
                        help="corpus size for afp train --train (the largest today's code loads), million words")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "afp-train-scale",
                        help="where corpora, shards, runs and logs go (not the repository)")
    parser.add_argument("--batches", type=int, default=200, help="training batches per timed run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, help="also train the shards with this token budget")
    parser.add_argument("--max-vocab", type=int, default=50_000)
    parser.add_argument("--shard-tokens", type=int, help="afp prepare --shard-tokens (default: its own)")
    parser.add_argument("--model-args", default=MODEL_ARGS, help=f"model options of afp train (default: {MODEL_ARGS})")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="--num-threads of the training runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "train_scale.json")
    parser.add_argument("--child-load", nargs=2, metavar=("CFG_JSON", "BATCHES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_load:
        load_child(args.child_load[0], int(args.child_load[1]))
        return
    work = args.work.resolve()
    if work == REPO_ROOT or REPO_ROOT in work.parents:
        raise SystemExit(f"--work {work} is inside the repository; the corpora must not be committed")
    words, legacy_words = int(args.words * 1e6), int(args.legacy_words * 1e6)
    tag = f"{args.words:g}M"
    corpus = work / f"corpus-{tag}.txt"
    legacy = work / f"corpus-{args.legacy_words:g}M.txt"
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"benchmark": "bench.train_scale", "environment": environment(), "args": {
        k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "child_load"}}

    print(f"corpus: {words:,} words -> {corpus}", flush=True)
    result["corpus"] = build_corpus(corpus, words)
    result["legacy_corpus"] = build_corpus(legacy, legacy_words)

    prepared, measured_prepare = work / f"prepared-{tag}", work / f"prepared-{tag}.json"
    if not (prepared / "meta.json").is_file() or not measured_prepare.is_file():
        if prepared.exists():  # an unfinished preparation
            for path in prepared.iterdir():
                path.unlink()
        command = [sys.executable, "-m", "service.cli", "prepare", "--text", str(corpus), "--out", str(prepared),
                   "--max-vocab", str(args.max_vocab)]
        if args.shard_tokens:
            command += ["--shard-tokens", str(args.shard_tokens)]
        print("prepare ...", flush=True)
        log = logs / f"prepare-{tag}.log"
        measured = {**measure(command, log), **_last_json(log),
                    "bytes_on_disk": sum(p.stat().st_size for p in prepared.iterdir())}
        measured_prepare.write_text(json.dumps(measured) + "\n", encoding="utf-8")
    result["prepare"] = json.loads(measured_prepare.read_text(encoding="utf-8"))  # measured once, reused after

    # the legacy runs read the shards' vocabulary, so that both train the same model
    vocab = str(prepared / "words.txt")
    train_sets = {"data": {"data": str(prepared)}, "legacy": {"train": str(legacy), "words_txt": vocab}}
    result["load"] = {}
    for name, fields in train_sets.items():
        cfg = json.dumps({**fields, "batch_size": args.batch_size})
        print(f"load {name} ...", flush=True)
        log = logs / f"load-{name}.log"
        command = [sys.executable, "-m", "bench.train_scale", "--child-load", cfg, str(args.batches)]
        result["load"][name] = {**measure(command, log), **_last_json(log)}

    runs = {"data": ["--data", str(prepared)],
            "legacy": ["--train", str(legacy), "--words-txt", vocab]}
    if args.batch_tokens:
        runs["data-batch-tokens"] = ["--data", str(prepared), "--batch-tokens", str(args.batch_tokens)]
    result["train"] = {}
    for name, data_args in runs.items():
        out = work / "runs" / name
        for stale in (out / "metrics.jsonl", out / "resume" / "state.json"):
            stale.unlink(missing_ok=True)
        command = [sys.executable, "-m", "service.cli", "train", *data_args, "--out", str(out), "--epochs", "1",
                   "--batch-size", str(args.batch_size), "--max-train-sentences", str(args.batches * args.batch_size),
                   "--device", args.device, *args.model_args.split()]
        if args.threads:
            command += ["--num-threads", str(args.threads)]
        print(f"train {name} ...", flush=True)
        measured = measure(command, logs / f"train-{name}.log")
        metrics = read_metrics(out)[-1]
        result["train"][name] = {**measured, **{k: metrics[k] for k in (
            "train_tokens", "seconds", "tokens_per_second", "device", "precision", "train_ppl")}}
        print(f"  {metrics['tokens_per_second']:.0f} tokens/s, peak RSS {measured['peak_rss_mib']} MiB", flush=True)
    # the same sentences, batches, vocabulary and seed: on a CPU both paths train the same model
    result["same_train_ppl"] = result["train"]["data"]["train_ppl"] == result["train"]["legacy"]["train_ppl"]
    write_json(args.out, result)
    summary = {f"{section}-{name}": {key: run[key] for key in ("peak_rss_mib", "peak_rss_anon_mib", "tokens_per_second")
                                     if key in run}
               for section in ("load", "train") for name, run in result[section].items()}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
