"""Which language model helps the ESPnet LibriSpeech first pass? The AFP model, a Kneser-Ney
4-gram of the same text and vocabulary, and their EM mixture, each added to the recogniser's own
LM and tuned by ``afp tune``'s joint search on one dev set, applied to the other.

  python -m bench.wer_models                 # every utterance of both dev sets

Models: the bundled ``models/librispeech`` mixture (``python -m bench.bundle_mixtures librispeech``)
and each of its parts alone:

* ``models/librispeech/afp``: GRU-256 AFP-4 trained on books/ + books-large/ (67.6M words);
* ``models/librispeech/ngram``: the KN 4-gram of the same text and vocabulary, entropy-pruned;
* ``models/librispeech``: their mixture (weights by EM on held-out books text).

The numbers of the earlier 7.6M-word books/ models are in ``bench/results/wer_models_books.json``.

Systems: first pass; re-weighting only (no new LM); + each model. WER with the matched-pairs
p-values against the first pass and against re-weighting (``bench.wer.cross_tune``). Writes
``bench/results/wer_models.json``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, RESULTS, environment, write_json

def models() -> dict[str, Path]:
    bundled = REPO_ROOT / "models" / "librispeech"
    if not (bundled / "mixture.json").is_file():
        raise SystemExit(f"{bundled} is not a mixture: run python -m bench.bundle_mixtures librispeech")
    return {"+ AFP model (books-large)": bundled / "afp", "+ KN 4-gram (books-large, pruned)": bundled / "ngram",
            "+ mixture (models/librispeech)": bundled}


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
