"""Rescoring speed of an AFP model against an ARPA 4-gram of the same vocabulary, side by side.

  python -m bench.ngram_speed [--lists 300]

Cases: the bundled mixtures' parts (``python -m bench.bundle_mixtures``), each AFP model
against the pruned KN 4-gram of its own training text and vocabulary, and the mixture of the two:

* the real AMI lattices: ``models/conversational/afp`` (AFP-3) and ``models/conversational/ngram``;
* LibriSpeech dev_clean 30-best lists: ``models/librispeech/afp`` (AFP-4) and
  ``models/librispeech/ngram``.

For each: the full ``rescore`` of each model and of the mixture (its own expansion) with the
time split into expansion, scoring and search; and, on one shared expansion (the larger order), the scoring
alone of each model (``lattices.scored.lm_scores``), as a ratio. One thread. Writes
``bench/results/ngram_speed.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, ami_lattice_files, environment, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"


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
    models = REPO_ROOT / "models"
    cases = [("AMI lattices", models / "conversational",
              [lat for f in ami_lattice_files() for lat in read_lattice_file(f)]),
             (f"LibriSpeech dev_clean {args.lists} 30-best lists", models / "librispeech",
              [nbest_to_lattice(n) for n in read_espnet_nbest(NBEST / "dev_clean")[: args.lists]])]
    rows = []
    for name, mixture_dir, lattices in cases:
        if not (mixture_dir / "mixture.json").is_file():
            raise SystemExit(f"{mixture_dir} is not a bundled mixture: python -m bench.bundle_mixtures {mixture_dir.name}")
        tick = time.perf_counter()
        afp_scorer = scorer_of(open_model(mixture_dir / "afp"), precision="fp32")
        ngram_scorer = scorer_of(open_model(mixture_dir / "ngram"))
        mixture_scorer = scorer_of(open_model(mixture_dir), precision="fp32")
        load = time.perf_counter() - tick
        timed_rescore(lattices[:3], afp_scorer)  # warm up
        afp_run, ngram_run = timed_rescore(lattices, afp_scorer), timed_rescore(lattices, ngram_scorer)
        mixture_run = timed_rescore(lattices, mixture_scorer)
        shared = shared_scoring(lattices, {"afp": afp_scorer, "ngram": ngram_scorer})
        row = {"case": name, "afp_model": str((mixture_dir / "afp").relative_to(REPO_ROOT)),
               "ngram": str((mixture_dir / "ngram").relative_to(REPO_ROOT)),
               "mixture": str(mixture_dir.relative_to(REPO_ROOT)),
               "lattices": len(lattices), "load_s": load, "afp": afp_run, "ngram_4gram": ngram_run,
               "mixture_run": mixture_run,
               "total_ratio_afp_over_ngram": afp_run["total"] / ngram_run["total"],
               "total_ratio_mixture_over_afp": mixture_run["total"] / afp_run["total"],
               "shared_expansion_scoring_s": shared,
               "shared_scoring_ratio_afp_over_ngram": shared["afp"] / shared["ngram"]}
        rows.append(row)
        print(f"{name}: AFP {afp_run['total']:.2f} s (expand {afp_run['expand']:.2f}, score {afp_run['score']:.2f}, "
              f"search {afp_run['search']:.2f}), 4-gram {ngram_run['total']:.2f} s: x{row['total_ratio_afp_over_ngram']:.2f};"
              f" same expansion, scoring only: x{row['shared_scoring_ratio_afp_over_ngram']:.2f}; mixture "
              f"{mixture_run['total']:.2f} s: x{row['total_ratio_mixture_over_afp']:.2f} the AFP model's", flush=True)
    write_json(RESULTS / "ngram_speed.json", {"command": "python -m bench.ngram_speed" + (
        f" --lists {args.lists}" if args.lists != 300 else ""), "environment": environment(), "rows": rows})


if __name__ == "__main__":
    main()
