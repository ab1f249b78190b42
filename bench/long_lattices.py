"""Long lattices: time and peak memory of parsing and rescoring a long chain and a frame-level
Kaldi lattice, against an earlier commit's code, side by side in one run.

  python -m bench.long_lattices                                  # this checkout vs --baseline-ref
  python -m bench.long_lattices --chains 100000 --frames 10000 --baseline-ref none

Cases (the lattices are written as Kaldi text; words from the model's vocabulary):

  * ``chain-N``: a CompactLattice of N arcs in a row, one word each (N levels, N words).
  * ``frames-L``: a Kaldi ``Lattice`` (transducer) with one level per frame, as decoders write
    before ``lattice-copy --write-compact``: each frame two parallel arcs with different
    transition ids, and every 20th frame a word on each of them (two alternatives per word).

Each case runs in a fresh child process (``--threads`` torch threads): parse the text, rescore it
with the model (nbest 2, posteriors: every search runs), and report the seconds of each step and
the child's peak RSS. The baseline runs the very same child code with the ``lattices`` and ``lm``
packages of a git worktree of ``--baseline-ref`` (default: the commit before the level passes
moved to numpy), for the cases of at most ``--baseline-max-levels`` levels (the old code needs
minutes and gigabytes beyond that); the report gives baseline / current ratios. CPU timings on a
shared machine are noisy: compare the ratios, measured in one run.

Writes ``bench/results/long_lattices.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO_ROOT / "models" / "conversational"
#: the last commit before levels, expansion and searches moved to numpy
DEFAULT_BASELINE = "21f2b55"
WORD_EVERY = 20

# The child: runs with the packages of whichever tree is first on PYTHONPATH (this checkout or
# the baseline worktree), so it uses only APIs both have.
CHILD = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[3]))
from lattices.formats import read_lattices
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import load_checkpoint
from lm.scorer import LMScorer
scorer = LMScorer(load_checkpoint(sys.argv[2], device="cpu"))
text = open(sys.argv[1], encoding="utf-8").read()
started = time.perf_counter()
(lattice,) = read_lattices(text, "kaldi")
parsed = time.perf_counter()
(result,) = rescore(lattice, scorer, RescoreOptions(nbest=2, posteriors=True))
done = time.perf_counter()
print(json.dumps({"parse_s": parsed - started, "rescore_s": done - parsed, "total_s": done - started,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "arcs": lattice.num_arcs, "levels": int(lattice.levels.max()) + 1,
                  "stats": result.stats, "timing": result.seconds, "best_words": len(result.best.words)}))
"""


def chain_text(n: int, words: list[str]) -> str:
    """A CompactLattice of ``n`` arcs in a row (transition ids 1 per arc)."""
    lines = ["chain"] + [f"{i} {i + 1} {words[i % len(words)]} 1.5,{2 + i % 7}.25,{1 + i % 50}" for i in range(n)]
    return "\n".join([*lines, f"{n} 0,0,", "", ""])


def frames_text(levels: int, words: list[str]) -> str:
    """A Kaldi ``Lattice`` of ``levels`` frames: two arcs per frame, a word on each every
    :data:`WORD_EVERY` frames (two alternatives)."""
    lines = ["frames"]
    for t in range(levels):
        word = t % WORD_EVERY == 0
        for branch in (0, 1):
            olabel = words[(t // WORD_EVERY * 2 + branch) % len(words)] if word else "<eps>"
            lines.append(f"{t} {t + 1} {2 + 2 * (t % 40) + branch} {olabel} {0.5 * branch},{1.0 + branch + t % 3}")
    return "\n".join([*lines, f"{levels} 0,0", "", ""])


def run_child(tree: Path, code: str, *argv: Any, timeout: float | None = None) -> dict[str, Any]:
    """The last JSON line that ``python -c code argv...`` prints, run with the packages of ``tree``
    (cwd and PYTHONPATH); ``{"timed_out": seconds}`` when it runs past ``timeout``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    try:
        out = subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=env, capture_output=True, text=True,
                             cwd=tree, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timed_out": timeout}
    if out.returncode != 0:
        raise RuntimeError(f"child failed in {tree}:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextmanager
def baseline_tree(ref: str, where: Path) -> Iterator[Path | None]:
    """A detached git worktree of ``ref`` under ``where`` for the block, removed afterwards; None
    when ``ref`` is ``none``."""
    if ref == "none":
        yield None
        return
    path = where / f"baseline-{ref}"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=REPO_ROOT, check=True,
                   capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO_ROOT, capture_output=True)


def write_report(benchmark: str, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """``args.out``: the rows of a baseline-comparing benchmark with its command, model and machine."""
    sys.path.insert(0, str(REPO_ROOT))
    from bench.common import environment, write_json

    write_json(args.out, {"benchmark": benchmark, "command": " ".join([f"python -m bench.{benchmark}", *sys.argv[1:]]),
                          "model": str(args.model.relative_to(REPO_ROOT) if args.model.is_relative_to(REPO_ROOT)
                                       else args.model),
                          "baseline_ref": args.baseline_ref, "threads": args.threads, "environment": environment(),
                          "rows": rows})


def model_words(model: Path) -> list[str]:
    """Ordinary words of the model's vocabulary (``config.json``; no special or bracketed tokens)."""
    words = json.loads((model / "config.json").read_text(encoding="utf-8"))["vocab"]["words"]
    return [w for w in words if w.isalpha()][:500]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, nargs="*", default=[20_000, 50_000, 100_000])
    parser.add_argument("--frames", type=int, nargs="*", default=[2_000, 10_000])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE, help="git ref of the baseline code, or 'none'")
    parser.add_argument("--baseline-max-levels", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "long_lattices.json")
    args = parser.parse_args()

    words = model_words(args.model)
    if not words:
        raise SystemExit(f"{args.model}: no vocabulary found")
    cases = [(f"chain-{n}", n, chain_text(n, words)) for n in args.chains]
    cases += [(f"frames-{n}", n, frames_text(n, words)) for n in args.frames]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, baseline_tree(args.baseline_ref, Path(tmp)) as base:
        for name, levels, text in cases:
            path = Path(tmp) / f"{name}.txt"
            path.write_text(text, encoding="utf-8")
            row: dict[str, Any] = {"case": name, "text_mb": len(text) / 1e6,
                                   "current": run_child(REPO_ROOT, CHILD, path, args.model, args.threads)}
            if base is not None and levels <= args.baseline_max_levels:
                row["baseline"] = run_child(base, CHILD, path, args.model, args.threads)
                row["speedup"] = row["baseline"]["total_s"] / row["current"]["total_s"]
                row["memory_ratio"] = row["baseline"]["peak_rss_mb"] / row["current"]["peak_rss_mb"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    write_report("long_lattices", args, rows)


if __name__ == "__main__":
    main()
