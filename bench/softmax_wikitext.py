"""Full against adaptive softmax on WikiText-2 (33k words): training tokens/s and validation
perplexity after the same number of steps, side by side in one run.

  python -m bench.softmax_wikitext                         # 100 steps each (2,000 lines, batch 20)
  python -m bench.softmax_wikitext --sentences 36718       # a whole epoch each

The corpus is prepared once (``afp prepare``: the vocabulary of the whole training text, 33,278
words with ``<unk>``, and the validation split), then the same model (GRU, AFP-rho, the same
seed) trains one epoch over the first ``--sentences`` lines of the training text
(``max_train_sentences``: the same batches, so the same number of steps) with each output layer,
and is validated on the whole validation text. The two runs go one after the other in one process:
read the ratio, not the absolute rates, on a shared machine.

Writes ``bench/results/softmax_wikitext.json`` (the work directory, ``--work``, is not kept in
the repository).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.common import RESULTS, SHARED_DATA, environment, read_metrics, write_json

DATA = SHARED_DATA / "wikitext-2"
SOFTMAXES = ("full", "adaptive")


def run(work: Path, sentences: int, hidden: int, rho: int, batch_size: int, threads: int) -> dict[str, Any]:
    """Prepare WikiText-2 under ``work``, train and validate each softmax; the results record."""
    from lm.config import ModelConfig, PrepareConfig, TrainConfig
    from lm.shards import prepare
    from lm.train import train

    prepared = work / "data"
    if not (prepared / "meta.json").is_file():
        prepare(PrepareConfig(text=(str(DATA / "wiki.train.tokens"),), valid=str(DATA / "wiki.valid.tokens"),
                              out=str(prepared)))
    meta = json.loads((prepared / "meta.json").read_text(encoding="utf-8"))
    rows = []
    for softmax in SOFTMAXES:
        out = work / softmax
        cfg = TrainConfig(data=str(prepared), epochs=1, batch_size=batch_size, lr=2e-3, max_train_sentences=sentences,
                          num_threads=threads, precision="fp32", seed=1)
        result = train(ModelConfig(cell="gru", hidden=hidden, mode="afp", rho=rho, softmax=softmax), cfg, out,
                       progress=False)
        (metrics,) = read_metrics(out)
        rows.append({"softmax": softmax, "steps": result.steps, "train_tokens": metrics["train_tokens"],
                     "tokens_per_second": metrics["tokens_per_second"], "train_seconds": metrics["seconds"],
                     "train_ppl": metrics["train_ppl"], "valid_ppl": metrics["valid_ppl"]})
        print(json.dumps(rows[-1]), flush=True)
    full, adaptive = rows
    return {"benchmark": "bench.softmax_wikitext", "command": " ".join(["python -m bench.softmax_wikitext", *sys.argv[1:]]),
            "vocab_size": meta["vocab"]["size"], "train_sentences": sentences, "model": f"GRU-{hidden} AFP-{rho}",
            "batch_size": batch_size, "threads": threads, "rows": rows,
            "adaptive_speedup": adaptive["tokens_per_second"] / full["tokens_per_second"],
            "environment": environment()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=2000, help="training lines (the same steps for both)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--rho", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/afp-softmax-wikitext"))
    parser.add_argument("--out", type=Path, default=RESULTS / "softmax_wikitext.json")
    args = parser.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"{DATA} is missing: this needs ../shared/data")
    args.work.mkdir(parents=True, exist_ok=True)
    write_json(args.out, run(args.work, args.sentences, args.hidden, args.rho, args.batch_size, args.threads))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
