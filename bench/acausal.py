"""Does an exact acausal (window) model help? Pseudo-perplexities, WER on the LibriSpeech lists,
and the cost of the two-sided expansion. The models are trained by ``bench/acausal_train.sh``
(resumable; about 3 h on one CPU thread in all) into ``runs/acausal/``.

  python -m bench.acausal ppl         # Switchboard: pseudo-perplexity of K = 1, 2, 3 against causal
  python -m bench.acausal expansion   # two-sided against causal expansion: size and time
  python -m bench.acausal wer         # LibriSpeech dev: tuned on one set, applied to the other

``ppl``: the causal AFP-3 and the window models (rho 3, K = 1, 2, 3; GRU-256, one epoch each, the
same data and options) on ``switchboard/valid.txt``: perplexity and pseudo-perplexity (each word
given the words around it: not a sentence probability, so the numbers say how much the right
context tells, not which model is a better LM).

``expansion``: the real AMI lattices (``models/conversational``, causal AFP-3, with the Switchboard
window models as features) and 300 LibriSpeech dev_clean 30-best lists (``models/librispeech``,
AFP-4, with the books window model): expanded states and arcs and seconds (expansion, scoring)
of the causal expansion against the two-sided one, in one run, as ratios.

``wer``: on the ESPnet LibriSpeech 30-best lists, each system tuned by ``afp tune``'s joint search
on one dev set and applied to the other, with the matched-pairs significance against the first
pass and against re-weighting: first pass; re-weighting only; + causal AFP (``models/librispeech``);
+ acausal window model (the named score ``acausal``); + both.

Writes ``bench/results/acausal.json`` (each part its own key, kept across runs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, ami_lattice_files, bundled_afp, environment, write_json

RUNS = REPO_ROOT / "runs" / "acausal"
OUT = RESULTS / "acausal.json"
SWB_VALID = SHARED_DATA / "switchboard" / "valid.txt"
NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SWB_MODELS = {"causal AFP-3": RUNS / "swb-causal-rho3",
              **{f"window rho 3, K={k}": RUNS / f"swb-window-rho3-k{k}" for k in (1, 2, 3)}}
BOOKS_WINDOW = RUNS / "books-window-rho4-k2"


def _ready(path: Path) -> bool:
    return (path / "model.safetensors").is_file() and (path / "metrics.jsonl").is_file() and \
        bool((path / "metrics.jsonl").read_text().strip())


def part_ppl() -> dict[str, Any]:
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer, WindowScorer, text_score

    sentences = [line.split() for line in SWB_VALID.read_text(encoding="utf-8").splitlines() if line.split()]
    rows = {}
    for name, path in SWB_MODELS.items():
        if not _ready(path):
            print(f"{name}: {path} not trained yet (bash bench/acausal_train.sh switchboard)", flush=True)
            continue
        loaded = load_checkpoint(path)
        scorer = WindowScorer(loaded, precision="fp32") if loaded.config.is_window else LMScorer(loaded, precision="fp32")
        tick = time.perf_counter()
        score = text_score(scorer, sentences)
        rows[name] = {"model": str(path.relative_to(REPO_ROOT)), "describe": loaded.config.describe(),
                      "rho": loaded.config.rho, "future": loaded.config.future, "pseudo": loaded.config.is_window,
                      **score.to_json(), "seconds": time.perf_counter() - tick,
                      "epochs": loaded.training.get("epochs"), "steps": loaded.training.get("steps")}
        print(f"{name:>22}: {'pseudo-' if loaded.config.is_window else ''}ppl {score.ppl:.2f}", flush=True)
    return {"valid": str(SWB_VALID.relative_to(SHARED_DATA.parent)), "models": rows}


def _cost(lattices: list[Any], scorer: Any, features: dict[str, Any], options: Any) -> dict[str, Any]:
    from lattices.rescore import rescore

    totals: dict[str, float] = {"expanded_states": 0, "expanded_arcs": 0, "expand_s": 0.0, "score_s": 0.0,
                                "total_s": 0.0, "lattice_arcs": 0}
    for lattice in lattices:
        result = rescore(lattice, scorer, options, features=features)[0]
        totals["expanded_states"] += result.stats["expanded_states"]
        totals["expanded_arcs"] += result.stats["expanded_arcs"]
        totals["lattice_arcs"] += result.stats["lattice_arcs"]
        totals["expand_s"] += result.seconds["expand"]
        totals["score_s"] += result.seconds["score"]
        totals["total_s"] += result.seconds["total"]
    return totals


def part_expansion() -> dict[str, Any]:
    from lattices.formats import read_lattice_file
    from lattices.formats.nbest import nbest_to_lattice, read_espnet_nbest
    from lattices.rescore import RescoreOptions
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer, WindowScorer

    out: dict[str, Any] = {}
    cases = []
    ami = [lat for f in ami_lattice_files() for lat in read_lattice_file(f)]
    windows = {k: RUNS / f"swb-window-rho3-k{k}" for k in (1, 2, 3)}
    if ami:
        for k, path in windows.items():
            if _ready(path):
                cases.append((f"AMI lattices ({len(ami)}), K={k}", ami, REPO_ROOT / "models" / "conversational", path))
    lists = [nbest_to_lattice(n) for n in read_espnet_nbest(NBEST / "dev_clean")[:300]]
    if _ready(BOOKS_WINDOW):
        cases.append(("LibriSpeech dev_clean 30-best (300 lists), K=2", lists, bundled_afp("librispeech"),
                      BOOKS_WINDOW))
    options = RescoreOptions(old_lm_weight=1.0, max_expanded_arcs=50_000_000)
    for name, lattices, causal_dir, window_dir in cases:
        causal = LMScorer(load_checkpoint(causal_dir), precision="fp32")
        feature = WindowScorer(load_checkpoint(window_dir), precision="fp32")
        _cost(lattices[:2], causal, {"acausal": feature}, options)  # warm up
        plain = _cost(lattices, causal, {}, options)
        two = _cost(lattices, causal, {"acausal": feature}, options)
        ratios = {k: two[k] / plain[k] for k in ("expanded_states", "expanded_arcs", "expand_s", "score_s", "total_s")
                  if plain[k]}
        out[name] = {"causal_model": str(causal_dir.relative_to(REPO_ROOT)), "causal_rho": causal.context_size,
                     "window_model": str(window_dir.relative_to(REPO_ROOT)), "window_rho": feature.rho,
                     "future": feature.future, "causal": plain, "two_sided": two, "ratio": ratios}
        print(f"{name}: arcs {plain['expanded_arcs']} -> {two['expanded_arcs']} (x{ratios['expanded_arcs']:.2f}), "
              f"time x{ratios['total_s']:.2f}", flush=True)
    return out


def part_wer(limit: int | None) -> dict[str, Any]:
    from bench.wer import cross_tune, load_set
    from afp.tune import Tuner
    from lattices.formats.nbest import nbest_to_lattice
    from lattices.rescore import RescoreOptions
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer, WindowScorer

    if not _ready(BOOKS_WINDOW):
        raise SystemExit(f"{BOOKS_WINDOW}: not trained yet (bash bench/acausal_train.sh books)")
    causal = LMScorer(load_checkpoint(bundled_afp("librispeech")), precision="fp32")
    feature = WindowScorer(load_checkpoint(BOOKS_WINDOW), precision="fp32")
    options = RescoreOptions(score_weights=(("decoder", 0.6), ("ctc", 0.4)), unk_penalty=causal.loaded.default_unk_penalty)
    tuners = {}
    for name in ("dev_clean", "dev_other"):
        lists, refs = load_set(name, limit)
        tuner = Tuner(causal, options, refs, features={"acausal": feature})
        tick = time.perf_counter()
        tuner.add(nbest_to_lattice(n) for n in lists)
        print(f"{name}: {len(lists)} lists scored (causal and acausal) in {time.perf_counter() - tick:.0f} s", flush=True)
        tuners[name] = tuner
    base = ["old_lm_weight", "word_penalty", "unk_penalty"]
    systems = {
        "re-weighting only": ({"lm_weight": 0.0, "score:acausal": 0.0}, base),
        "+ causal AFP": ({"score:acausal": 0.0}, ["lm_weight", *base]),
        "+ acausal window": ({"lm_weight": 0.0}, ["score:acausal", *base]),
        "+ both": ({}, ["lm_weight", "score:acausal", *base]),
    }
    out: dict[str, Any] = {"first_pass": {s: t.first_pass().wer for s, t in tuners.items()}, "systems": {},
                           "window_model": str(BOOKS_WINDOW.relative_to(REPO_ROOT)),
                           "window": feature.loaded.config.describe(), "causal_model": str(bundled_afp("librispeech").relative_to(REPO_ROOT))}
    reweighted = None
    for system, (fixed, free) in systems.items():
        found = cross_tune(tuners, fixed, free, reweighted)
        if reweighted is None:
            reweighted = found["errors"]
        out["systems"][system] = found["results"]
        print(system, {k: round(v["wer"], 3) for k, v in found["results"].items()}, flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=["ppl", "expansion", "wer"])
    parser.add_argument("--limit", type=int, help="wer: the first N utterances of each set")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    report = json.loads(OUT.read_text()) if OUT.is_file() else {}
    if args.part == "ppl":
        report["ppl"] = part_ppl()
    elif args.part == "expansion":
        report["expansion"] = part_expansion()
    else:
        report["wer"] = {**part_wer(args.limit), "limit": args.limit}
    report["environment"] = environment()
    report.setdefault("commands", {})[args.part] = f"python -m bench.acausal {args.part}" + (
        f" --limit {args.limit}" if args.limit else "")
    write_json(OUT, report)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
