"""Rescoring speed of an AFP model against an ARPA 4-gram of the same vocabulary, side by side.

  python -m bench.ngram_speed [--lists 300]

Cases (the 4-grams are built by ``afp ngram`` on the models' own training text and vocabulary when
missing, into ``runs/ngram_speed/``):

* the real AMI lattices: ``models/conversational`` (AFP-3) against a 4-gram of its training text
  (Switchboard + meetings + conversational-text, its 18k-word vocabulary);
* LibriSpeech dev_clean 30-best lists: ``models/librispeech`` (AFP-4) against a 4-gram of
  ``books/`` with its 44k-word vocabulary.

For each: the full ``rescore`` of each model (its own expansion) with the time split into
expansion, scoring and search; and, on one shared expansion (the larger order), the scoring
alone of each model (``lattices.scored.lm_scores``), as a ratio. One thread. Writes
``bench/results/ngram_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, ami_lattice_files, environment, write_json

RUNS = REPO_ROOT / "runs" / "ngram_speed"
NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"


def words_txt(model: Path, out: Path) -> Path:
    config = json.loads((model / "config.json").read_text())
    out.write_text("".join(f"{w} {i}\n" for i, w in enumerate(config["vocab"]["words"])))
    return out


def ensure_ngram(name: str, model: Path, texts: list[Path]) -> Path:
    arpa = RUNS / f"{name}-4gram.arpa.gz"
    if not arpa.is_file():
        RUNS.mkdir(parents=True, exist_ok=True)
        words = words_txt(model, RUNS / f"{name}-words.txt")
        subprocess.run([sys.executable, "-m", "service.cli", "ngram", "--text", *map(str, texts), "--words-txt",
                        str(words), "--order", "4", "--out", str(arpa)], cwd=REPO_ROOT, check=True)
    return arpa


def timed_rescore(lattices: list[Any], scorer: Any) -> dict[str, float]:
    from lattices.rescore import RescoreOptions, rescore

    options = RescoreOptions(old_lm_weight=1.0, max_expanded_arcs=50_000_000)
    out = {"expand": 0.0, "score": 0.0, "search": 0.0, "total": 0.0, "expanded_arcs": 0}
    for lattice in lattices:
        result = rescore(lattice, scorer, options)[0]
        for key in ("expand", "score", "search", "total"):
            out[key] += result.seconds[key]
        out["expanded_arcs"] += result.stats["expanded_arcs"]
    return out


def shared_scoring(lattices: list[Any], scorers: dict[str, Any]) -> dict[str, float]:
    """Each scorer's ``lm_scores`` time on the same expansion of every lattice (the widest context)."""
    from lattices.expand import expand, lattice_word_map
    from lattices.scored import _model_ids, lm_scores

    rho = max(s.context_size for s in scorers.values())
    seconds = {name: 0.0 for name in scorers}
    for lattice in lattices:
        expansion = expand(lattice, lattice_word_map(lattice), rho, len(lattice.symbols))
        used = __import__("torch").unique(lattice.words)
        for name, scorer in scorers.items():
            ids = _model_ids(lattice.symbols, used, scorer, lattice.device)
            tick = time.perf_counter()
            lm_scores(expansion, scorer, ids)
            seconds[name] += time.perf_counter() - tick
    return seconds


def main(argv: list[str] | None = None) -> None:
    import torch

    from afp.mixtures import open_model, scorer_of
    from lattices.formats import read_lattice_file
    from lattices.formats.nbest import nbest_to_lattice, read_espnet_nbest

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=300)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    conversational = [SHARED_DATA / n / "train.txt" for n in ("switchboard", "meetings", "conversational-text")]
    cases = [("AMI lattices", REPO_ROOT / "models" / "conversational", conversational,
              [lat for f in ami_lattice_files() for lat in read_lattice_file(f)]),
             (f"LibriSpeech dev_clean {args.lists} 30-best lists", REPO_ROOT / "models" / "librispeech",
              [SHARED_DATA / "books" / "train.txt"],
              [nbest_to_lattice(n) for n in read_espnet_nbest(NBEST / "dev_clean")[: args.lists]])]
    rows = []
    for name, model_dir, texts, lattices in cases:
        arpa = ensure_ngram(model_dir.name, model_dir, texts)
        tick = time.perf_counter()
        afp_scorer = scorer_of(open_model(model_dir), precision="fp32")
        ngram_scorer = scorer_of(open_model(arpa))
        load = time.perf_counter() - tick
        timed_rescore(lattices[:3], afp_scorer)  # warm up
        afp_run, ngram_run = timed_rescore(lattices, afp_scorer), timed_rescore(lattices, ngram_scorer)
        shared = shared_scoring(lattices, {"afp": afp_scorer, "ngram": ngram_scorer})
        row = {"case": name, "afp_model": str(model_dir.relative_to(REPO_ROOT)), "ngram": str(arpa.relative_to(REPO_ROOT)),
               "lattices": len(lattices), "load_s": load, "afp": afp_run, "ngram_4gram": ngram_run,
               "total_ratio_afp_over_ngram": afp_run["total"] / ngram_run["total"],
               "shared_expansion_scoring_s": shared,
               "shared_scoring_ratio_afp_over_ngram": shared["afp"] / shared["ngram"]}
        rows.append(row)
        print(f"{name}: AFP {afp_run['total']:.2f} s (expand {afp_run['expand']:.2f}, score {afp_run['score']:.2f}, "
              f"search {afp_run['search']:.2f}), 4-gram {ngram_run['total']:.2f} s: x{row['total_ratio_afp_over_ngram']:.2f};"
              f" same expansion, scoring only: x{row['shared_scoring_ratio_afp_over_ngram']:.2f}", flush=True)
    write_json(RESULTS / "ngram_speed.json", {"command": "python -m bench.ngram_speed" + (
        f" --lists {args.lists}" if args.lists != 300 else ""), "environment": environment(), "rows": rows})


if __name__ == "__main__":
    main()
