"""Inputs that took the engine outside its time budget (issue 11), against the code of the commit
before that work, side by side in one run.

  python -m bench.hard_inputs                       # this checkout vs --baseline-ref
  python -m bench.hard_inputs --baseline-ref none   # this checkout only

Cases, each in a fresh child process (``--threads`` torch threads), with the bundled
``models/conversational``:

  * ``kbest-same-words``: a lattice of 401 states whose 2^400 paths all carry the same words
    (two parallel arcs with one word, different scores, between consecutive states), ``nbest=2``:
    there is one distinct word sequence, and the old search widened its k-best to 4096 paths per
    state trying to find a second.
  * ``symbols-47k``: the 10 real AMI lattices of ``ami-kaldi/1.lat`` written with the integer ids
    of its 46,949-entry ``words.txt`` (words it lacks appended; the shipped ``1.lat.int`` uses a
    larger table), read with that table, parsed and rescored (the old code walked the whole
    table in Python for every lattice).
  * ``symbols-200k``: the same with the table padded to 200,000 entries (a LibriSpeech-size
    ``words.txt``).

Both must find best paths of the same score (where two paths tie, e.g. on two words the model maps
to ``<unk>`` alike, either may be returned: ``ties`` counts those). The baseline runs the same child code with the ``lattices``, ``lm`` and ``service`` packages of a
git worktree of ``--baseline-ref`` (default ``e5a0aad``: main before the first commit of issue
11), stopped after ``--baseline-timeout`` seconds. Writes ``bench/results/hard_inputs.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.long_lattices import REPO_ROOT, baseline_tree, model_words, run_child, write_report

DEFAULT_MODEL = REPO_ROOT / "models" / "conversational"
DEFAULT_BASELINE = "e5a0aad"
AMI_KALDI = REPO_ROOT.parent / "shared" / "data" / "lattices" / "ami-kaldi"

# The child: the packages of whichever tree is first on PYTHONPATH; only APIs both trees have.
CHILD = r"""
import json, resource, sys, time
import torch
case = json.loads(sys.argv[1])
torch.set_num_threads(case["threads"])
from lattices.formats import read_lattices
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import load_checkpoint
from lm.scorer import LMScorer
from lm.vocab import parse_symbol_table
scorer = LMScorer(load_checkpoint(case["model"], device="cpu"))
symbols = None
if case.get("words"):
    symbols = parse_symbol_table(open(case["words"], encoding="utf-8").read())
    symbols += [f"pad{i}" for i in range(case.get("pad_to", 0) - len(symbols))]
text = open(case["lattices"], encoding="utf-8").read()
started = time.perf_counter()
lattices = read_lattices(text, "kaldi", symbols=symbols)
parsed = time.perf_counter()
best = [rescore(lat, scorer, RescoreOptions(nbest=case["nbest"]))[0] for lat in lattices]
done = time.perf_counter()
print(json.dumps({"lattices": len(lattices), "symbols": len(symbols) if symbols else None,
                  "parse_s": parsed - started, "rescore_s": done - parsed, "total_s": done - started,
                  "per_lattice_s": (done - started) / len(lattices),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "hypotheses": [len(r.nbest) for r in best], "best": [" ".join(r.best.words) for r in best],
                  "lm_logprob": [r.best.lm_logprob for r in best], "score": [r.best.score for r in best]}))
"""


def same_words_text(states: int, word: str) -> str:
    """A CompactLattice of ``states`` states, two arcs carrying ``word`` between consecutive ones."""
    lines = ["samewords"]
    for i in range(states - 1):
        lines += [f"{i} {i + 1} {word} 1.0,{2 + i % 5}.5,", f"{i} {i + 1} {word} 1.5,{3 + i % 3}.25,"]
    return "\n".join([*lines, f"{states - 1} 0,0,", "", ""])


def integer_archive(archive: Path, words_txt: Path, work: Path) -> dict[str, str]:
    """``archive`` (Kaldi text, word symbols) with integer ids of ``words_txt`` (words it lacks
    appended), written under ``work``: ``{"lattices": path, "words": path}``."""
    ids: dict[str, int] = {}
    for line in words_txt.read_text(encoding="utf-8").splitlines():
        if line.strip():
            word, number = line.split()
            ids[word] = int(number)
    out = []
    for line in archive.read_text(encoding="utf-8").split("\n"):
        fields = line.split()
        if len(fields) == 4:  # an arc: source dest word weight
            fields[2] = str(ids.setdefault(fields[2], max(ids.values()) + 1))
            line = " ".join(fields)
        out.append(line)
    (work / "ami.lat.int").write_text("\n".join(out), encoding="utf-8")
    (work / "words.txt").write_text("".join(f"{w} {i}\n" for w, i in ids.items()), encoding="utf-8")
    return {"lattices": str(work / "ami.lat.int"), "words": str(work / "words.txt")}


def cases(work: Path, model: Path, threads: int) -> list[tuple[str, dict[str, Any]]]:
    same = work / "same-words.txt"
    same.write_text(same_words_text(401, model_words(model)[0]), encoding="utf-8")
    found = [("kbest-same-words", {"lattices": str(same), "nbest": 2})]
    if (AMI_KALDI / "1.lat").is_file() and (AMI_KALDI / "words.txt").is_file():
        ami = {**integer_archive(AMI_KALDI / "1.lat", AMI_KALDI / "words.txt", work), "nbest": 1}
        found += [("symbols-47k", ami), ("symbols-200k", {**ami, "pad_to": 200_000})]
    else:
        print(f"{AMI_KALDI} is absent: the symbol-table cases are skipped", file=sys.stderr)
    return [(name, {**case, "model": str(model), "threads": threads}) for name, case in found]


def compare(baseline: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """Speed-up, and whether both found best paths of the same score (where two paths tie, e.g. on
    two words the model maps to ``<unk>`` alike, either may be returned: ``ties`` counts those)."""
    pairs = list(zip(baseline["best"], current["best"], baseline["score"], current["score"]))
    return {"speedup": baseline["total_s"] / current["total_s"],
            "same_best": all(a == b or abs(x - y) < 1e-4 for a, b, x, y in pairs),
            "ties": sum(a != b for a, b, _, _ in pairs),
            "max_abs_lm_logprob_diff": max(abs(a - b) for a, b in zip(baseline["lm_logprob"], current["lm_logprob"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE, help="git ref of the baseline code, or 'none'")
    parser.add_argument("--baseline-timeout", type=float, default=600.0, help="seconds before a baseline case stops")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "hard_inputs.json")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp, baseline_tree(args.baseline_ref, Path(tmp)) as base:
        for name, case in cases(Path(tmp), args.model, args.threads):
            row: dict[str, Any] = {"case": name, "current": run_child(REPO_ROOT, CHILD, json.dumps(case))}
            if base is not None:
                row["baseline"] = run_child(base, CHILD, json.dumps(case), timeout=args.baseline_timeout)
                if "total_s" in row["baseline"]:
                    row.update(compare(row["baseline"], row["current"]))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("current", "baseline")}
                             | {"current_s": row["current"]["total_s"],
                                "baseline_s": row.get("baseline", {}).get("total_s")}), flush=True)
    write_report("hard_inputs", args, rows)


if __name__ == "__main__":
    main()
