"""Which language model helps the ESPnet LibriSpeech first pass? The AFP model, a Kneser-Ney
4-gram of the same text and vocabulary, and their EM mixture, each added to the recogniser's own
LM and tuned by ``afp tune``'s joint search on one dev set, applied to the other.

  python -m bench.wer_models                 # every utterance of both dev sets

Models (each built when missing, into ``runs/wer_models/``):

* ``models/librispeech`` (GRU-256 AFP-4, books/);
* a KN 4-gram of ``books/train.txt`` with its vocabulary (``afp ngram``, as ``bench.ngram_speed``
  builds it), an n-gram model directory;
* their mixture, weights by EM on ``books/valid.txt`` (``afp mix``).

Systems: first pass; re-weighting only (no new LM); + each model. WER with the matched-pairs
p-values against the first pass and against re-weighting (``bench.wer.cross_tune``). Writes
``bench/results/wer_models.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, SHARED_DATA, environment, write_json

RUNS = REPO_ROOT / "runs" / "wer_models"
BOOKS = SHARED_DATA / "books"


def afp(*argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "service.cli", *argv], cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"afp {' '.join(argv)}: {done.stderr}")
    return done.stdout


def models() -> dict[str, Path]:
    RUNS.mkdir(parents=True, exist_ok=True)
    afp_model = REPO_ROOT / "models" / "librispeech"
    store = RUNS / "books-4gram"
    if not (store / "ngram.json").is_file():
        config = json.loads((afp_model / "config.json").read_text())
        words = RUNS / "words.txt"
        words.write_text("".join(f"{w} {i}\n" for i, w in enumerate(config["vocab"]["words"])))
        afp("ngram", "--text", str(BOOKS / "train.txt"), "--words-txt", str(words), "--order", "4",
            "--out", str(RUNS / "books-4gram.arpa.gz"), "--store", str(store))
    mixture = RUNS / "mixture"
    if not (mixture / "mixture.json").is_file():
        print(afp("mix", "--text", str(BOOKS / "valid.txt"), "--out", str(mixture), str(afp_model), str(store)).strip())
    return {"+ AFP model": afp_model, "+ KN 4-gram": store, "+ mixture (EM on books/valid)": mixture}


def main() -> None:
    import torch

    from afp.mixtures import open_model, scorer_of
    from afp.tune import Tuner
    from bench.wer import cross_tune, load_set
    from lattices.formats.nbest import nbest_to_lattice
    from lattices.rescore import RescoreOptions

    torch.set_num_threads(1)
    sets = {name: load_set(name, None) for name in ("dev_clean", "dev_other")}
    report: dict[str, Any] = {"command": "python -m bench.wer_models", "environment": environment(), "systems": {},
                              "models": {}}
    reweighted = None
    base = ["old_lm_weight", "word_penalty", "unk_penalty"]
    for label, path in models().items():
        loaded = open_model(path)
        scorer = scorer_of(loaded, precision="fp32")
        options = RescoreOptions(score_weights=(("decoder", 0.6), ("ctc", 0.4)),
                                 unk_penalty=loaded.default_unk_penalty)
        tuners = {}
        tick = time.perf_counter()
        for name, (lists, refs) in sets.items():
            tuner = Tuner(scorer, options, refs)
            tuner.add(nbest_to_lattice(n) for n in lists)
            tuners[name] = tuner
        report["models"][label] = {"path": str(path.relative_to(REPO_ROOT)), "name": loaded.config.describe(),
                                   "scoring_s": time.perf_counter() - tick}
        if reweighted is None:
            report["first_pass"] = {s: t.first_pass().wer for s, t in tuners.items()}
            found = cross_tune(tuners, {"lm_weight": 0.0}, base)
            reweighted = found["errors"]
            report["systems"]["re-weighting only"] = found["results"]
            print("re-weighting only", {k: round(v["wer"], 3) for k, v in found["results"].items()}, flush=True)
        found = cross_tune(tuners, {}, ["lm_weight", *base], reweighted)
        report["systems"][label] = found["results"]
        print(label, {k: round(v["wer"], 3) for k, v in found["results"].items()}, flush=True)
        write_json(RESULTS / "wer_models.json", report)


if __name__ == "__main__":
    main()
