"""What a user who tunes nothing gets: ``afp rescore`` with its untuned defaults on the ESPnet
LibriSpeech 30-best lists, through the command line, against the recogniser's own 1-best.

  python -m bench.untuned_defaults            # both dev sets, every utterance (about 2 x 30 s)

Systems, each an ``afp rescore --json`` run of ``models/librispeech`` (one thread), scored by
``afp wer --json`` against the first pass (``1best_recog/text``) with the matched-pairs p-value:

  * ``untuned``: no weight given. The recogniser's combination comes from the lists' totals
    (0.6 decoder + 0.4 ctc + 0.6 lm) and the new LM enters at a quarter of its LM's weight;
  * ``untuned, the issue's flags``: ``--score-weights decoder=0.6,ctc=0.4`` (what the issue's user
    gave), the rest untuned: the same weights;
  * ``new LM 0``: ``--lm-weight 0``: must be the first pass exactly;
  * ``old default``: the untuned default before this change, the old LM at 1 and the new LM at 0.5
    (``--old-lm-weight 1 --lm-weight 0.5 --score-weights decoder=0.6,ctc=0.4``);
  * ``share 0.5``: the recogniser's combination and the new LM at half its LM's weight (0.3);
  * ``unk penalty 0``: untuned, but an unknown word scored as the whole ``<unk>`` class
    (``--unk-penalty 0``) instead of the model's own ``-log U``; it is also compared with
    ``untuned`` directly (``unk_penalty``: the measurement behind the unknown-word default).

Writes ``bench/results/untuned_defaults.json``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.common import RESULTS, SHARED_DATA, afp, environment, write_json

NBEST = SHARED_DATA / "nbest" / "librispeech-espnet"
SYSTEMS = {
    "untuned": [],
    "untuned, the issue's flags": ["--score-weights", "decoder=0.6,ctc=0.4"],
    "new LM 0": ["--lm-weight", "0"],
    "old default": ["--old-lm-weight", "1", "--lm-weight", "0.5", "--score-weights", "decoder=0.6,ctc=0.4"],
    "share 0.5": ["--lm-weight", "0.3"],
    "unk penalty 0": ["--unk-penalty", "0"],
}


def compare(name: str, *hypotheses: Path) -> dict:
    """``afp wer --json`` of ``hypotheses`` on set ``name``: each after the first against the first."""
    return json.loads(afp("wer", "--json", "--refs", str(NBEST / name / "ref_wer.trn"), *(str(h) for h in hypotheses)))


def main() -> None:
    rows, unk = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("dev_clean", "dev_other"):
            outputs = []
            for system, flags in SYSTEMS.items():
                out = Path(tmp) / f"{name}-{len(outputs)}.jsonl"
                out.write_text(afp("rescore", "--model", "models/librispeech", "--threads", "1", "--json",
                                   *flags, str(NBEST / name)))
                first = json.loads(out.read_text().splitlines()[0])
                outputs.append((system, flags, out, {k: first[k] for k in ("lm_weight", "old_lm_weight",
                                                                           "score_weights")}))
            report = compare(name, NBEST / name / "1best_recog" / "text", *(o[2] for o in outputs))
            first_pass = report["systems"][0]
            for (system, flags, _, weights), row in zip(outputs, report["systems"][1:]):
                against = row["against_first"]
                rows.append({"set": name, "system": system, "flags": flags, "weights": weights,
                             "wer": row["wer"], "first_pass_wer": first_pass["wer"],
                             "difference": against["difference"], "p": against["mapsswe"]["p"]})
                print(f"{name} {system:>27}: WER {row['wer']:.2f}% (first pass {first_pass['wer']:.2f}%, "
                      f"p={against['mapsswe']['p']:.3g})  weights {weights}", flush=True)
            files = {system: out for system, _, out, _ in outputs}
            pair = compare(name, files["untuned"], files["unk penalty 0"])
            unk[name] = {"untuned": pair["systems"][0]["wer"], "unk_penalty_0": pair["systems"][1]["wer"],
                         "difference": pair["systems"][1]["against_first"]["difference"],
                         "p": pair["systems"][1]["against_first"]["mapsswe"]["p"]}
            print(f"{name}: unk penalty 0 against the model's own: {unk[name]}", flush=True)
    write_json(RESULTS / "untuned_defaults.json", {
        "command": "python -m bench.untuned_defaults", "environment": environment(),
        "model": "models/librispeech", "rows": rows, "unk_penalty": unk})


if __name__ == "__main__":
    main()
