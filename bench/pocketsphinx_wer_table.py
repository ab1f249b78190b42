"""Does exact lattice rescoring pay? The WER table of issue 30 on PocketSphinx's own lattices.

    python -m bench.pocketsphinx_set --ref .../dev_clean/ref_wer.trn --name dev_clean   # the sets first
    python -m bench.pocketsphinx_set --ref .../dev_other/ref_wer.trn --name dev_other
    OMP_NUM_THREADS=1 python -m bench.pocketsphinx_wer_table [--limit 200] [--systems NAME ...] [--redo]

On the two PocketSphinx dev sets (``runs/pocketsphinx/dev_clean`` and ``dev_other``,
bench/pocketsphinx_set.py: the lattices as the decoder wrote them, its 1-best ``hyp.trn``, the
references), every system is tuned on the first ``--limit`` utterances of one set and applied to
the first ``--limit`` of the other, both ways. The systems (``--systems`` names, in this order):

=========================  =====================================================================
``decoder``                the decoder's own 1-best (``hyp.trn``), no tuning
``nbest50-afp``            the 50 best distinct word sequences of the lattice under the first
                           pass's scores (:func:`afp.baselines.first_pass_nbest`), as an n-best
                           list rescored exactly with the AFP part of ``models/librispeech``
``nbest500-afp``           the same with 500
``lattice-kn4``            exact lattice rescoring with the KN 4-gram ``models/librispeech/ngram``
``nbest50-gru``            the 50-best list rescored with the full-history GRU
                           ``bench/results/books-pair/gru-h256-exact`` (BPTT, sentence scores)
``kaldi-gru``              Kaldi-style lattice rescoring with that GRU: histories merged at 4 words
                           (order rho + 1 = 5), a merged state keeps the first history's RNN state
``lattice-afp``            exact AFP lattice rescoring, ``models/librispeech/afp``
``lattice-mixture``        exact lattice rescoring with the mixture ``models/librispeech``
``lattice-gru-rho4``       exact lattice rescoring with the GRU's AFP twin
                           ``bench/results/books-pair/gru-h256-rho4`` (same recipe, rho 4)
``lattice-mixture-acausal``  the mixture plus the acausal window feature (``acausal``: the books
                           window model rho 4, K = 2 (trained by bench/acausal_train.sh, retired at 1dd5a7e), kept in
                           ``bench/results/acausal/carry/books-window-rho4-k2``)
=========================  =====================================================================

Every system other than the decoder is one code path: the engine prepares each input (a lattice, or
the n-best lattice of its n best) and scores it into a :class:`~lattices.scored.ScoredLattice`
(``afp rescore``'s :func:`~lattices.rescore.score_for_options`; the full-history GRU's own scores
put in its ``new_lm`` column by :mod:`afp.baselines`), and :mod:`afp.transfer` tunes and applies:
``afp tune``'s joint search (the decoder's ``hyp.trn`` as the baseline) chooses the weights on the
tuning set: from the first pass's own point and ``--restarts`` random ones (default 1), without
cross-validation (``--folds``, default 1). (``afp tune``'s own defaults, 3 and 5, cost about ten
times as much: on a lattice every candidate of a line search is a full search of every utterance, 25
candidates per line search.) Then those weights, as ``afp tune --save`` writes them, are applied to
the other set, each lattice prepared, scored and searched again with them as
``afp rescore --weights`` does. Where ``afp tune`` would save nothing (the tuned point is worse than
the decoder on the tuning set) the tuned point is applied anyway and the row says so. The engine
runs at its defaults (:func:`afp.options.build_options`), on the CPU, one torch thread.

Reported per system and direction: the WER on the applied set, the matched-pairs test and bootstrap
(:mod:`afp.significance`) against the decoder's 1-best and against ``nbest50-afp`` (and for the
like-for-like :data:`PAIRS`, such as the GRU's AFP twin on the lattice against the GRU Kaldi-style);
seconds per utterance of rescoring the applied set (everything after reading the file: n-best
search, determinization, expansion, scoring, search), the tuning seconds (scoring the tuning set and
the search) and the model's load time, apart. A model that is not there is reported as not trained
(its row is computed by a later run). Weights kept as bf16 (``model.bf16.safetensors`` and
``config.json``) are cast to float32 once into ``runs/pocketsphinx/wer_table_models``.

**Resumable**: each (system, direction) row is written to the JSON as soon as it is done, and a
later run skips the rows already there (``--redo``: compute them again). A table of another
``--limit`` is never mixed in: give ``--redo`` (start afresh) or another ``--out``.

The audio is **synthetic** (text-to-speech voices, bench/pocketsphinx_set.py): the JSON and the
report say so. Writes ``bench/results/pocketsphinx_wer_table.json`` and ``.png``; the section
"Does exact lattice rescoring pay?" of bench/results/README.md renders it (``python -m bench.report``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.common import REPO_ROOT, RESULTS, cast_weights, command_line, environment, pyplot, save_figure, shown, \
    write_json

SETS = ("dev_clean", "dev_other")
SETS_DIR = Path("runs/pocketsphinx")
OUT = RESULTS / "pocketsphinx_wer_table.json"
MODELS = REPO_ROOT / "models" / "librispeech"
PAIR = RESULTS / "books-pair"
WINDOW = RESULTS / "acausal" / "carry" / "books-window-rho4-k2"
#: where kept bf16 weights are cast to float32 model directories
CACHE = Path("runs/pocketsphinx/wer_table_models")
#: the n-best system every other is compared with, beside the decoder
REFERENCE = "nbest50-afp"
DECODER = "decoder"
#: the like-for-like comparisons (system, against), beside the decoder and REFERENCE: one model
#: on the lattice exactly against its full-history twin the ways users run it today, 500 against
#: 50 best, and what the acausal feature adds to the mixture
PAIRS = (("lattice-gru-rho4", "kaldi-gru"), ("lattice-gru-rho4", "nbest50-gru"), ("kaldi-gru", "nbest50-gru"),
         ("lattice-afp", "kaldi-gru"), ("nbest500-afp", "nbest50-afp"), ("lattice-afp", "lattice-kn4"),
         ("lattice-mixture", "lattice-afp"), ("lattice-mixture-acausal", "lattice-mixture"))
#: Kaldi-style history merging: 4 words, the order (rho + 1 = 5) of the AFP twin
KALDI_HISTORY = 4
#: the books-pair GRUs are kept in bench/results/books-pair; their recipe (bench/books_pair.sh) is retired
BOOKS_PAIR_ABSENT = "not there (bench/books_pair.sh trained it: see the git history of bench/results/books-pair)"
AUDIO = "synthetic (text-to-speech voices, bench/pocketsphinx_set.py): not real speech"


@dataclass(frozen=True)
class System:
    """One row of the table.

    ``kind``: ``decoder`` (hyp.trn), ``lattice`` (the engine on the lattice), ``nbest`` (the
    engine on the n-best lattice of the ``n`` best), ``nbest-rnn`` (a full-history RNN's sentence
    scores of the ``n`` best), ``kaldi`` (a full-history RNN, Kaldi-style, on the lattice).
    ``model``: a model directory (or kept bf16 weights); ``feature``: an acausal window model,
    the named score ``acausal``; ``absent``: what a missing model is reported as."""

    name: str
    label: str
    kind: str
    model: Path | None = None
    n: int | None = None
    feature: Path | None = None
    absent: str = "not trained"
    how: str = ""


def default_systems() -> list[System]:
    gru, twin = PAIR / "gru-h256-exact", PAIR / "gru-h256-rho4"
    return [
        System(DECODER, "decoder 1-best", "decoder", how="hyp.trn, no tuning"),
        System("nbest50-afp", "50-best, AFP part", "nbest", MODELS / "afp", 50),
        System("nbest500-afp", "500-best, AFP part", "nbest", MODELS / "afp", 500),
        System("lattice-kn4", "lattice, KN 4-gram only", "lattice", MODELS / "ngram"),
        System("nbest50-gru", "50-best, full-history GRU", "nbest-rnn", gru, 50, absent=BOOKS_PAIR_ABSENT),
        System("kaldi-gru", "Kaldi-style lattice, full-history GRU", "kaldi", gru, absent=BOOKS_PAIR_ABSENT),
        System("lattice-afp", "exact lattice, AFP part", "lattice", MODELS / "afp"),
        System("lattice-mixture", "exact lattice, mixture (AFP + 4-gram)", "lattice", MODELS),
        System("lattice-gru-rho4", "exact lattice, GRU's AFP-4 twin", "lattice", twin, absent=BOOKS_PAIR_ABSENT),
        System("lattice-mixture-acausal", "exact lattice, mixture + acausal window", "lattice", MODELS,
               feature=WINDOW, absent=f"not available (no window model in {WINDOW})"),
    ]


def _row_key(system: str, tuned_on: str, applied_to: str) -> str:
    return f"{system}: tuned on {tuned_on}, applied to {applied_to}"


# ------------------------------------------------------------------------------------- models
def model_dir(path: Path, cache: Path = CACHE) -> Path | None:
    """A loadable model directory for ``path``: itself when it is one (a checkpoint, a mixture, an
    n-gram directory), a float32 copy in ``cache`` of kept bf16 weights (``model.bf16.safetensors``
    and ``config.json``, :func:`bench.common.cast_weights`), or None when there is no model."""
    if any((path / name).is_file() for name in ("model.safetensors", "mixture.json", "ngram.json")):
        return path
    kept, config = path / "model.bf16.safetensors", path / "config.json"
    if not (kept.is_file() and config.is_file()):
        return None
    target = cache / f"{path.parent.name}-{path.name}"
    weights = target / "model.safetensors"
    if not weights.is_file() or weights.stat().st_mtime < kept.stat().st_mtime:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(config, target / "config.json")
        cast_weights(kept, target / "model.safetensors.tmp", "float32")
        (target / "model.safetensors.tmp").replace(weights)
    return target


def unavailable(system: System, cache: Path = CACHE) -> str | None:
    """Why ``system`` cannot run (its ``absent`` text), or None."""
    missing = [path for path in (system.model, system.feature) if path is not None and model_dir(path, cache) is None]
    return f"{system.absent}: {missing[0]} is not there" if missing else None


Scorer = Callable[[Any, Any], Any]  # (lattice, options) -> ScoredLattice


@dataclass
class Loaded:
    """A system ready to run: its untuned options, how it scores an input, its features."""

    base: Any
    score: Scorer
    features: dict[str, Any]
    seconds: float


def load_system(system: System, cache: Path = CACHE) -> Loaded:
    """Load the model(s) of ``system`` on the CPU (timed) and build its scoring function."""
    from afp.options import build_options
    from afp.baselines import first_pass_nbest, kaldi_style_scored, nbest_lattice, nbest_scored
    from lattices.rescore import score_for_options

    tick = time.perf_counter()
    directory = model_dir(system.model, cache) if system.model is not None else None
    assert directory is not None, f"{system.name}: no model at {system.model}"
    features: dict[str, Any] = {}
    if system.kind in ("nbest-rnn", "kaldi"):
        from lm.checkpoint import load_checkpoint

        rnn = load_checkpoint(directory)
        unk = rnn.default_unk_penalty
    else:
        from afp import load_model

        model = load_model(directory, device="cpu")
        unk = model.loaded.default_unk_penalty
        if system.feature is not None:
            from afp.features import load_features

            features = load_features({"acausal": model_dir(system.feature, cache)}, "cpu")
    base = build_options({}, unk_default=unk)

    def nbest_of(lattice: Any) -> Any:  # the n best under the lattice's own first pass (header scales)
        return first_pass_nbest(lattice, system.n, *base.scales_for(lattice), base.skip_words)

    scorers: dict[str, Scorer] = {
        "lattice": lambda lattice, options: score_for_options(lattice, model.scorer, options, features=features),
        "nbest": lambda lattice, options: score_for_options(nbest_lattice(nbest_of(lattice), lattice), model.scorer,
                                                            options),
        "nbest-rnn": lambda lattice, options: nbest_scored(nbest_of(lattice), lattice, rnn, options),
        "kaldi": lambda lattice, options: kaldi_style_scored(lattice, rnn, KALDI_HISTORY, options)}
    if system.kind not in scorers:
        raise ValueError(f"{system.name}: unknown kind {system.kind!r}")
    return Loaded(base, scorers[system.kind], features, time.perf_counter() - tick)


# ------------------------------------------------------------------------------------- one row
def _applied(data: dict[str, Any], words: list[list[str]], seconds: list[float] | None) -> dict[str, Any]:
    """A set's WER of ``words`` (one hypothesis per utterance), and per utterance its errors."""
    from afp.wer import word_errors

    keys = [u["key"] for u in data["utterances"]]
    ref_words = [len(data["refs"][k]) for k in keys]
    errors = [word_errors(data["refs"][k], list(w), data["ignore_case"]).errors for k, w in zip(keys, words)]
    out: dict[str, Any] = {"utterances": len(keys), "ref_words": sum(ref_words), "errors": sum(errors),
                           "wer": 100.0 * sum(errors) / sum(ref_words)}
    if seconds is not None:
        out.update({"rescore_seconds": sum(seconds), "rescore_seconds_per_utterance": sum(seconds) / len(keys)})
    out["per_utterance"] = [{"key": k, "words": " ".join(w), "errors": e, "ref_words": n,
                             **({"seconds": round(s, 4)} if seconds is not None else {})}
                            for k, w, e, n, s in zip(keys, words, errors, ref_words, seconds or [None] * len(keys))]
    return out


def scored_set(loaded: Loaded, data: dict[str, Any], lattices: list[Any]) -> tuple[Any, float]:
    """A set scored once under the system's untuned options (its :class:`afp.tune.Tuner`) and the
    seconds that took."""
    from afp.tune import Tuner

    tick = time.perf_counter()
    tuner = Tuner(None, loaded.base, data["refs"], features=loaded.features)
    for lattice in lattices:
        tuner.add_scored(loaded.score(lattice, loaded.base))
    return tuner, time.perf_counter() - tick


def run_row(system: System, loaded: Loaded | None, tune: dict[str, Any], test: dict[str, Any],
            lattices: Callable[[str], list[Any]], tuners: dict[str, tuple[Any, float]], restarts: int, folds: int,
            seed: int = 0) -> dict[str, Any]:
    """Tune ``system`` on ``tune``, apply it to ``test`` (:mod:`afp.transfer`, each test lattice
    scored again with the weights applied, as ``afp rescore --weights`` does): the row of the table.
    ``tuners``: each set's scored tuner, filled as needed (one per set serves both directions)."""
    from afp.transfer import apply_weights, tune_weights

    row: dict[str, Any] = {"system": system.name, "label": system.label, "tuned_on": tune["name"],
                           "applied_to": test["name"]}
    if loaded is None:  # the decoder
        return {**row, **_applied(test, [test["hyps"].get(u["key"], []) for u in test["utterances"]], None)}
    for data in (tune, test):
        if data["name"] not in tuners:
            tuners[data["name"]] = scored_set(loaded, data, lattices(data["name"]))
    tuner, scoring_seconds = tuners[tune["name"]]
    tick = time.perf_counter()
    tuned = tune_weights(tuner, restarts=restarts, folds=folds, seed=seed, baseline=tune["hyps"], apply_best=True)
    tune_seconds = scoring_seconds + time.perf_counter() - tick
    decoded = apply_weights(tuners[test["name"]][0], tuned.point, inputs=lattices(test["name"]), score=loaded.score)
    applied = _applied(test, [list(w) for w in decoded.words], list(decoded.seconds or ()))
    summary = {k: tuned.report[k] for k in ("first_pass_wer", "start", "best", "cross_validated", "baseline",
                                            "chosen", "at_edge", "line_searches") if k in tuned.report}
    return {**row, **{k: v for k, v in applied.items() if k != "per_utterance"},
            "tune_seconds": tune_seconds, "tune_utterances": len(tuner.utterances),
            "model_load_seconds": loaded.seconds, "point": tuned.point, "point_is": tuned.reason, "tune": summary,
            "per_utterance": applied["per_utterance"]}


def compare_rows(table: dict[str, Any], seed: int = 0) -> None:
    """Fill each row's ``against``: the decoder's 1-best and :data:`REFERENCE` of the same
    direction, and the table's ``pairs``: each of :data:`PAIRS` whose rows are there, by the
    matched-pairs test and bootstrap (the row's WER minus the other's)."""
    rows = table["rows"]
    for row in rows.values():
        found = {other: _compared(rows, row, other, seed) for other in (DECODER, REFERENCE) if other != row["system"]}
        row["against"] = {other: compared for other, compared in found.items() if compared is not None}
    table["pairs"] = [{"system": name, "against": other, "applied_to": row["applied_to"], **found}
                      for name, other in PAIRS for row in rows.values() if row["system"] == name
                      for found in [_compared(rows, row, other, seed)] if found is not None]


def _compared(rows: dict[str, Any], row: dict[str, Any], other: str, seed: int) -> dict[str, Any] | None:
    """``row`` against system ``other``'s row of the same direction (matched pairs and bootstrap),
    or None when that row is absent or holds other utterances."""
    from afp.significance import compare

    base = rows.get(_row_key(other, row["tuned_on"], row["applied_to"]))
    if base is None:
        return None
    a, b = base["per_utterance"], row["per_utterance"]
    if [u["key"] for u in a] != [u["key"] for u in b]:
        return None
    return compare([u["errors"] for u in a], [u["errors"] for u in b], [u["ref_words"] for u in b], seed=seed).to_json()


# ------------------------------------------------------------------------------------- the table
def _read_sets(sets_dir: Path, limit: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each set's first ``limit`` utterances (``set.json``), their lattice paths, references and the
    decoder's 1-best; and what the table says of the sets."""
    from afp.wer import case_differs, read_hypotheses, read_references

    sets, info = {}, {}
    for name in SETS:
        root = sets_dir / name
        meta = json.loads((root / "set.json").read_text())
        utts = meta["utterances"][:limit] if limit else meta["utterances"]
        keys = [u["key"] for u in utts]
        refs, hyps = read_references(root / "ref.trn"), read_hypotheses(root / "hyp.trn")
        missing = [k for k in keys if k not in refs]
        if missing:
            raise SystemExit(f"{root}: no reference for {len(missing)} utterance(s), e.g. {missing[0]}")
        sets[name] = {"name": name, "utterances": utts, "refs": refs, "hyps": hyps,
                      "ignore_case": case_differs([refs[k] for k in keys], [hyps.get(k, []) for k in keys]),
                      "paths": [root / "lattices" / f"{k}.slf" for k in keys]}
        info[name] = {"dir": str(root), "utterances": len(keys), "ref_words": sum(len(refs[k]) for k in keys),
                      "audio_seconds": sum(u.get("audio_seconds", 0.0) for u in utts),
                      "synthetic": meta.get("synthetic", True)}
    return sets, info


def build_table(systems: Sequence[System], out: Path, sets_dir: Path = SETS_DIR, limit: int | None = 200,
                redo: bool = False, restarts: int = 1, folds: int = 1, command: str = "",
                cache: Path = CACHE) -> dict[str, Any]:
    """Compute every missing (system, direction) row, writing ``out`` after each; returns the table."""
    from lattices.formats import read_lattice_file

    torch.set_num_threads(1)
    sets, info = _read_sets(sets_dir, limit)

    @functools.cache
    def lattices(name: str) -> list[Any]:  # a set's lattices, read on first use (a resumed table may read none)
        tick = time.perf_counter()
        read = [read_lattice_file(path)[0] for path in sets[name]["paths"]]
        keys = [u["key"] for u in sets[name]["utterances"]]
        assert [lattice.key for lattice in read] == keys, (name, [lattice.key for lattice in read][:3], keys[:3])
        info[name]["read_seconds_per_utterance"] = (time.perf_counter() - tick) / max(len(read), 1)
        return read

    table = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    if table is not None and (table.get("limit") != limit or list(table.get("sets", {})) != list(SETS)) and not redo:
        raise SystemExit(f"{out} holds a table of --limit {table.get('limit')}: give --redo to start afresh, or "
                         "another --out")
    if table is None or (redo and table.get("limit") != limit):
        table = {"command": command, "audio": AUDIO, "limit": limit, "sets": info, "environment": environment(),
                 "tuning": {"search": "afp.tune.joint_tune", "restarts": restarts, "folds": folds,
                            "baseline": "the decoder's hyp.trn"},
                 "reference": REFERENCE, "kaldi_history": KALDI_HISTORY, "systems": {}, "unavailable": {}, "rows": {}}
        with _locked(out):
            write_json(out, table)
    for name, known in table.get("sets", {}).items():  # keep the reading time of an earlier run
        if "read_seconds_per_utterance" in known and name in info:
            info[name].setdefault("read_seconds_per_utterance", known["read_seconds_per_utterance"])
    # the table's command; each system's entry keeps the command that computed its rows
    table.update({"command": " ".join(command.split()[:3] + ([f"--limit {limit}"] if limit else [])),
                  "sets": info, "audio": AUDIO})
    directions = [(SETS[0], SETS[1]), (SETS[1], SETS[0])]
    mine: list[str] = []  # the systems this run has looked at: their entries and rows are its own
    for system in systems:
        mine.append(system.name)
        table["systems"][system.name] = {"label": system.label, "kind": system.kind, "how": system.how,
                                         "model": shown(system.model) if system.model else None, "n": system.n,
                                         "feature": shown(system.feature) if system.feature else None,
                                         "command": command}
        reason = unavailable(system, cache)
        if reason is not None:
            table["unavailable"][system.name] = reason
            print(f"{system.name}: {reason}", flush=True)
            continue
        table["unavailable"].pop(system.name, None)
        todo = [d for d in directions if redo or _row_key(system.name, *d) not in table["rows"]]
        if not todo:
            print(f"{system.name}: done already", flush=True)
            continue
        loaded = load_system(system, cache) if system.kind != "decoder" else None
        tuners: dict[str, tuple[Any, float]] = {}
        for tune_name, test_name in todo:
            row = run_row(system, loaded, sets[tune_name], sets[test_name], lattices, tuners, restarts, folds)
            table["rows"][_row_key(system.name, tune_name, test_name)] = row
            table = _merge(out, table, mine)
            print(f"{system.name}: tuned on {tune_name}, applied to {test_name}: WER {row['wer']:.2f}"
                  + (f", {row['rescore_seconds_per_utterance']:.3f} s/utt, tuning {row['tune_seconds']:.0f} s"
                     if "rescore_seconds" in row else ""), flush=True)
    table = _merge(out, table, mine)
    with _locked(out):
        plot(table, out.with_suffix(".png"))
    return table


@contextlib.contextmanager
def _locked(out: Path) -> Any:
    """An exclusive lock on ``out``'s lock file while the block runs: several processes may
    compute rows of one table at once (``--systems A`` beside ``--systems B``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(out.name + ".lock"), "w") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _merge(out: Path, table: dict[str, Any], mine: Sequence[str]) -> dict[str, Any]:
    """The table on disk, which other processes may have added rows and systems to since this one
    read it, with this process's systems ``mine`` (their entries, rows and unavailability) taken
    from ``table``; written back (rows compared and plotted) under the lock, and returned."""
    with _locked(out):
        disk = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else table
        if disk.get("limit") != table["limit"]:
            raise SystemExit(f"{out} now holds a table of --limit {disk.get('limit')}: another run started it afresh")
        merged = {**table,
                  "systems": {**disk["systems"], **{n: table["systems"][n] for n in mine}},
                  "unavailable": {**{k: v for k, v in disk["unavailable"].items() if k not in mine},
                                  **{k: v for k, v in table["unavailable"].items() if k in mine}},
                  "rows": {**{k: r for k, r in disk["rows"].items() if r["system"] not in mine},
                           **{k: r for k, r in table["rows"].items() if r["system"] in mine}}}
        compare_rows(merged)
        write_json(out, merged)
        return merged


def plot(table: dict[str, Any], path: Path) -> None:
    """WER of each system in both directions, and its rescoring seconds per utterance."""
    rows = table["rows"]
    names = [n for n in table["systems"] if any(r["system"] == n for r in rows.values())]
    if not names:
        return
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    directions = sorted({(r["tuned_on"], r["applied_to"]) for r in rows.values()}, key=lambda d: d[1])
    width = 0.8 / max(len(directions), 1)
    labels = [table["systems"][n]["label"] for n in names]
    for i, (tuned, applied) in enumerate(directions):
        found = [rows.get(_row_key(n, tuned, applied)) for n in names]
        xs = [j + (i - (len(directions) - 1) / 2) * width for j in range(len(names))]
        left.bar(xs, [r["wer"] if r else 0.0 for r in found], width, label=f"applied to {applied}")
        seconds = [r.get("rescore_seconds_per_utterance") if r else None for r in found]
        right.bar([x for x, s in zip(xs, seconds) if s], [s for s in seconds if s], width, label=f"on {applied}")
    left.set(ylabel="WER (%)", title=f"PocketSphinx lattices (synthetic audio), {table['limit']} utterances per set")
    right.set(yscale="log", ylabel="rescoring seconds per utterance (1 CPU thread)")
    for ax in (left, right):
        ax.set_xticks(range(len(names)), labels, rotation=30, ha="right", fontsize=7)
        ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    systems = default_systems()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=200, help="the first N utterances of each set (default 200)")
    parser.add_argument("--systems", nargs="+", choices=[s.name for s in systems], help="these systems only")
    parser.add_argument("--redo", action="store_true", help="compute the rows again (and start afresh at another limit)")
    parser.add_argument("--restarts", type=int, default=1, help="the joint search's random restarts (default 1)")
    parser.add_argument("--folds", type=int, default=1, help="its cross-validation folds (default 1: none)")
    parser.add_argument("--sets-dir", type=Path, default=SETS_DIR)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    systems = [s for s in systems if not args.systems or s.name in args.systems]
    build_table(systems, args.out, args.sets_dir, args.limit, args.redo, args.restarts, args.folds,
                command_line("bench.pocketsphinx_wer_table", argv))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
