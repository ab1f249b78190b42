"""Load test of the HTTP server: throughput and latency with dynamic batching on and off.

Starts two ``afp serve`` processes on loopback with the bundled model, one with batching and one
without, and drives them in turn with 1, 8, 32 and 64 concurrent connections for a fixed time
each. Every request rescores one real lattice (the AMI lattices of ``../shared/data/lattices``,
HTK SLF and Kaldi text, round robin) sent as a raw text body. Reports requests per second,
p50/p95/p99 latency and errors per setting; the two servers alternate at every level so that
machine noise hits both alike. The client runs on the same machine (it uses CPU too).

  python -m bench.load_test [--seconds 20] [--device cpu|cuda]

Writes ``bench/results/load_<device>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, environment, python_path, pyplot, save_figure, write_json

LEVELS = (1, 8, 32, 64)


def payloads() -> list[str]:
    """One text body per real lattice: each SLF file, and each lattice of the Kaldi archive."""
    lattices = SHARED_DATA / "lattices"
    bodies = [gzip.decompress(p.read_bytes()).decode() for p in sorted((lattices / "ami-htk").glob("*.lat.gz"))]
    archive = (lattices / "ami-kaldi" / "1.lat").read_text()
    bodies += [block.strip() + "\n" for block in archive.split("\n\n") if block.strip()]
    return bodies


def start(port: int, batching: bool, device: str, workers: int) -> subprocess.Popen:
    flag = "--batching" if batching else "--no-batching"
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port), flag, "--device", device,
         "--workers", str(workers), "--no-access-log", "--log-level", "warning"],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": python_path(), "AFP_REQUEST_TIMEOUT_S": "300"})


async def wait_ready(url: str, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{url} did not become ready")


async def drive(url: str, bodies: list[str], connections: int, seconds: float) -> dict[str, Any]:
    """``connections`` clients, each sending one request after another, for ``seconds``."""
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = 0
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(limits=limits, timeout=600) as client:
        async def worker() -> None:
            nonlocal counter
            while time.monotonic() < stop:
                body = bodies[counter % len(bodies)]
                counter += 1
                started = time.perf_counter()
                try:
                    reply = await client.post(f"{url}/v1/rescore", content=body,
                                              headers={"Content-Type": "text/plain"})
                    if reply.status_code == 200:
                        latencies.append(time.perf_counter() - started)
                    else:
                        errors[str(reply.status_code)] = errors.get(str(reply.status_code), 0) + 1
                except httpx.HTTPError as err:
                    errors[type(err).__name__] = errors.get(type(err).__name__, 0) + 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - began
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None

    return {"connections": connections, "requests": len(latencies), "seconds": elapsed,
            "throughput": len(latencies) / elapsed, "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
            "mean": statistics.fmean(latencies) if latencies else None, "errors": errors}


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("batching", "o-"), ("no_batching", "s--")):
        rows = report["results"][mode]
        levels = [r["connections"] for r in rows]
        left.plot(levels, [r["throughput"] for r in rows], style, label=mode.replace("_", " "))
        right.plot(levels, [r["p50"] for r in rows], style, label=f"{mode.replace('_', ' ')} p50")
        right.plot(levels, [r["p99"] for r in rows], style, alpha=0.5, label=f"{mode.replace('_', ' ')} p99")
    left.set(xscale="log", xlabel="concurrent connections", ylabel="lattices per second", title="throughput")
    right.set(xscale="log", yscale="log", xlabel="concurrent connections", ylabel="seconds", title="latency")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"afp-rescore load test, {report['device']}, {report['lattices']} real lattices round robin")
    save_figure(fig, path)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from tests.service.test_server_process import free_port

    bodies = payloads()
    ports = {"batching": free_port(), "no_batching": free_port()}
    servers = {mode: start(port, mode == "batching", args.device, args.workers) for mode, port in ports.items()}
    try:
        for port in ports.values():
            await wait_ready(f"http://127.0.0.1:{port}")
        for port in ports.values():  # warm-up: every lattice once
            await drive(f"http://127.0.0.1:{port}", bodies, 1, 0.1)
        results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in ports}
        for level in args.levels:
            for mode, port in ports.items():
                row = await drive(f"http://127.0.0.1:{port}", bodies, level, args.seconds)
                results[mode].append(row)
                print(f"{mode:>11} c={level:<3} {row['throughput']:6.2f} req/s  p50 {row['p50']:.3f}s  "
                      f"p95 {row['p95']:.3f}s  p99 {row['p99']:.3f}s  errors {row['errors']}", flush=True)
    finally:
        for server in servers.values():
            server.send_signal(signal.SIGTERM)
        for server in servers.values():
            server.wait(60)
    return {"benchmark": "bench.load_test", "device": args.device, "seconds_per_setting": args.seconds,
            "workers": args.workers, "lattices": len(bodies), "model": "models/conversational", "results": results,
            "environment": environment()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--levels", nargs="*", type=int, default=list(LEVELS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not (SHARED_DATA / "lattices" / "ami-htk").is_dir():
        raise SystemExit("the AMI lattices of ../shared/data/lattices are missing")
    report = asyncio.run(main_async(args))
    out = args.out or RESULTS / f"load_{args.device.split(':')[0]}.json"
    write_json(out, report)
    plot(report, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
