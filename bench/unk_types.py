"""Record in each bundled model how many distinct training words it maps to ``<unk>``.

  python -m bench.unk_types            # updates models/*/config.json (training.unk_types)

``afp train`` records this count itself (``training.unk_types``); the bundled models were trained
before it did, so this recounts it from their training text (the sources their ``TRAINING.md``
names, in ``../shared/data``) with each model's own vocabulary. The count sets the model's default
unknown-word penalty, ``-log(unk_types)`` (:attr:`lm.checkpoint.LoadedModel.default_unk_penalty`).
"""

from __future__ import annotations

import json

from bench.common import REPO_ROOT, SHARED_DATA

SOURCES = {
    "conversational": ["switchboard/train.txt", "meetings/train.txt", "conversational-text/train.txt"],
    "conversational-text": ["conversational-text/train.txt"],
    "librispeech": ["books/train.txt"],
    "ptb": ["ptb/ptb.train.txt"],
}


def main() -> None:
    from lm.corpus import iter_sentences

    for name, sources in SOURCES.items():
        path = REPO_ROOT / "models" / name / "config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        known = set(config["vocab"]["words"])
        unk = config["vocab"].get("unk", "<unk>")
        unknown = {w for source in sources for sentence in iter_sentences(SHARED_DATA / source) for w in sentence
                   if w not in known and w != unk}
        config["training"]["unk_types"] = len(unknown)
        config["training"]["unk_types_sources"] = sources
        path.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        print(f"{name}: {len(unknown)} distinct training words map to {unk}")


if __name__ == "__main__":
    main()
