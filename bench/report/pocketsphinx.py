"""Sections on PocketSphinx lattices: the decoder's sets, exact rescoring step by step, the WER
table of every system, and which rho and target size to rescore with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.common import by, load_json, plot_link, table, where


def _against(c: dict[str, Any] | None) -> str:
    """``-4.44 (p 0.00094, [-7.07, -1.71], significant)``: an :func:`afp.significance.compare`
    record (WER B minus A, matched-pairs p, bootstrap 95% interval), or ``-``."""
    if c is None:
        return "-"
    return (f"{c['difference']:+.2f} (p {c['mapsswe']['p']:.2g}, [{c['bootstrap']['low']:+.2f}, "
            f"{c['bootstrap']['high']:+.2f}]{', significant' if c['significant'] else ''})")


def _weights(point: dict[str, float] | None) -> str:
    """``lm 1.25, old lm 0, penalty 0.833, unk -11.2, decoder 1``: a tuned point, short names."""
    if not point:
        return "-"
    short = {"lm_weight": "lm", "old_lm_weight": "old lm", "word_penalty": "penalty", "unk_penalty": "unk"}
    return ", ".join(f"{short.get(k, k.removeprefix('score:'))} {0.0 if abs(v) < 1e-9 else v:.3g}"
                     for k, v in point.items())  # a search's 1e-15 is a 0


def pocketsphinx_sets(results: Path) -> list[str]:
    """``pocketsphinx_sets.json`` (bench.pocketsphinx_set's ``summarize`` per set): size, the
    decoder's 1-best and n-best oracle WER, decoding speed and lattice sizes; nothing when absent."""
    data = load_json(results / "pocketsphinx_sets.json")
    if not data:
        return []
    rows, audio, sizes = [], {}, set()
    for name, s in data.items():
        oracle, links = _nbest_oracle(s["wer"]), s["lattice_links"]
        sizes |= {oracle[0]} if oracle else set()
        audio.setdefault(s["audio"], []).append(name)
        rows.append([name, "synthetic (TTS)" if s["synthetic"] else "real speech", s["utterances"],
                     f"{s['ref_words']:,}", f"{s['audio_seconds'] / 60:.1f}", f"{s['wer']['first_pass']['wer']:.2f}",
                     f"{oracle[1]:.2f}" if oracle else "-", f"{s['rtf']['decode']:.3f}",
                     f"{links['median']:,.0f} / {links['max']:,}"])
    first = next(iter(data.values()))
    return ["## PocketSphinx sets: the decoder's lattices, 1-best and n-best (`python -m bench.pocketsphinx_set`)", "",
            f"Decoder `{first['decoder']}`, PocketSphinx {first['pocketsphinx']}. Audio: "
            + "; ".join(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} {what}" for what, names in audio.items())
            + ". WER in percent; n-best oracle: per utterance the hypothesis of the list with the fewest errors; "
            "decoding RTF: the decoder's seconds per audio second. Commands: "
            + "; ".join(f"`{s['command']}`" for s in data.values()) + ".", "",
            *table(["set", "audio", "utterances", "ref words", "audio min", "first pass (decoder 1-best)",
                    f"{'/'.join(map(str, sorted(sizes))) or 'n'}-best oracle", "decoding RTF",
                    "lattice links median / max"], rows)]


def _nbest_oracle(wer: dict[str, Any]) -> tuple[int, float] | None:
    """``(N, WER)`` of a set's ``nbestN_oracle`` column (bench.pocketsphinx_set.summarize), or None."""
    return next(((int(k[5:-7]), v["wer"]) for k, v in wer.items() if k.startswith("nbest") and k.endswith("_oracle")),
                None)


#: the steps of ``bench.pocketsphinx_rescore``'s speed table, in order (``totals`` keys ``STEP_seconds``; ``read``)
_RESCORE_STEPS = ("read", "determinize", "minimize", "fit", "expand", "score", "search")


def pocketsphinx_rescore(results: Path) -> list[str]:
    """``pocketsphinx_rescore.json``: per target_expanded_arcs value, the time of every step of
    rescoring each PocketSphinx set and the WER tuned on one set, applied to the other; nothing
    when absent or in the older format (``budgets`` in place of ``targets``)."""
    return _rescore_section(results, "pocketsphinx_rescore.json",
                            "Exact rescoring of PocketSphinx lattices: time per step and WER")


def pocketsphinx_speed(results: Path) -> list[str]:
    """``pocketsphinx_speed.json``: the same speed table from a run on a quiet machine (its
    ``machine`` note says what else ran); nothing when absent or in the older format."""
    return _rescore_section(results, "pocketsphinx_speed.json",
                            "Exact rescoring of PocketSphinx lattices: speed on a quiet machine")


def _rescore_section(results: Path, name: str, title: str) -> list[str]:
    """A section of ``bench.pocketsphinx_rescore``'s output file ``name``, headed ``title``."""
    data = load_json(results / name)
    if not data or not isinstance(data.get("targets"), dict):
        return []
    known = load_json(results / "pocketsphinx_sets.json") or {}
    speed, wer, real = [], [], set()
    for target, entry in sorted(data["targets"].items(), key=lambda kv: int(kv[0])):
        for name, run in entry["speed"].items():
            totals, audio, n = run["totals"], run["audio_seconds"], run["utterances"]
            if not known.get(name, {}).get("synthetic", True):
                real.add(name)
            steps = (totals.get(f"{k}_seconds", totals.get(k, 0.0)) / audio for k in _RESCORE_STEPS)
            speed.append([f"{int(target):,}", name, n, *(f"{v:.3f}" for v in steps),
                          f"{run['rtf_rescoring']:.3f}", f"{run['rtf_decoding']:.3f}",
                          f"{totals['expanded_arcs'] / n:,.0f}", f"{totals['contexts'] / n:,.0f}",
                          f"{run['oracle_wer_rescored']:.2f} ({run['oracle_wer_input']:.2f})",
                          f"{entry['peak_memory_mib']:.0f}" if "peak_memory_mib" in entry else "-"])
        for direction, r in entry.get("wer", {}).items():
            if "rescored_wer" not in r:  # the joint search kept the decoder's 1-best on the tuning set
                wer.append([f"{int(target):,}", direction, "-", "-", "no weights better than the decoder's 1-best",
                            "-"])
                continue
            wer.append([f"{int(target):,}", direction, f"{r['decoder_wer']:.2f}", f"{r['rescored_wer']:.2f}",
                        _against(r.get("against_decoder")), _weights(r.get("tune", {}).get("chosen", {}).get("point"))])
    lines = [f"## {title}" + by("pocketsphinx_rescore"), "",
             f"`{data['command'].strip()}`: model `{data['model']}` (loaded in {data['model_load_seconds']:.1f} s), "
             f"{where(data)}" + (f" ({data['machine']})" if data.get("machine") else "")
             + f"; the audio is {data['audio']}"
             + (f", except {', '.join(sorted(real))} (real speech)" if real else "")
             + ". Each step in seconds per audio second, summed over the set (read: the SLF file; determinize, "
             "minimize, fit: the reduction before expansion); RTF: rescoring's and the decoder's; arcs and contexts: "
             "of the expansion, per utterance; oracle: the lattice oracle WER of the lattice rescored (of the input); "
             "peak: the process's resident memory after rescoring, before tuning"
             + plot_link(results, "pocketsphinx_rescore.png") + ".", "",
             *table(["target arcs", "set", "utterances", *_RESCORE_STEPS, "RTF rescoring", "RTF decoding",
                     "expanded arcs/utt", "contexts/utt", "oracle WER kept (input)", "peak MiB"], speed)]
    if wer:
        lines += ["Weights tuned by afp tune's joint search on one set and applied to the other, WER in percent; "
                  "difference: rescored minus the decoder's 1-best, matched-pairs p and bootstrap 95% interval.", "",
                  *table(["target arcs", "tuned / applied", "decoder 1-best", "rescored", "vs decoder 1-best",
                          "weights"], wer)]
    return lines


def pocketsphinx_wer_table(results: Path) -> list[str]:
    """``pocketsphinx_wer_table.json``: each system tuned on one PocketSphinx dev set and applied
    to the other, against the decoder's 1-best and 50-best rescoring; nothing when absent."""
    data = load_json(results / "pocketsphinx_wer_table.json")
    if not data:
        return []
    systems, rows = data["systems"], data["rows"]

    def against(row: dict[str, Any], name: str) -> str:
        return _against(row.get("against", {}).get(name))

    cells = []
    for name, system in systems.items():
        for row in sorted((r for r in rows.values() if r["system"] == name), key=lambda r: r["applied_to"]):
            timed = "rescore_seconds_per_utterance" in row
            cells.append([system["label"], row["applied_to"], f"{row['wer']:.2f}", against(row, "decoder"),
                          against(row, data["reference"]),
                          f"{row['rescore_seconds_per_utterance']:.3f}" if timed else "-",
                          f"{row['tune_seconds']:.0f}" if timed else "-",
                          _weights(row["point"]) if timed else "-"])
    sets = ", ".join(f"{n} ({s['utterances']} utterances, {s['ref_words']:,} words, {s['audio_seconds'] / 60:.1f} "
                     "min)" for n, s in data["sets"].items())
    reference = systems.get(data["reference"], {}).get("label", data["reference"])
    lines = ["## Does exact lattice rescoring pay? PocketSphinx lattices (`python -m bench.pocketsphinx_wer_table`)",
             "", f"`{data['command']}`: the audio is {data['audio']}. Sets: {sets}. Each system tuned by afp tune's "
             f"joint search (random restarts: {data['tuning']['restarts']}, cross-validation folds: "
             f"{data['tuning']['folds']}, the decoder's 1-best as baseline) on one set and applied to the other; "
             "WER in percent on the set it was applied to. Differences: WER minus that of the decoder's 1-best / of "
             f"{reference}, matched-pairs p and bootstrap 95% interval. Seconds per utterance: rescoring the applied "
             f"set after reading it, {where(data)}; tuning seconds apart (scoring the tuning set and the search). "
             f"Kaldi-style: histories merged at {data['kaldi_history']} words"
             + plot_link(results, "pocketsphinx_wer_table.png") + ".", "",
             *table(["system", "applied to", "WER", "vs decoder 1-best", f"vs {reference}", "s/utt", "tuning s",
                     "weights"], cells)]
    pairs = data.get("pairs", [])
    if pairs:
        label = {n: s["label"] for n, s in systems.items()}
        lines += ["Like for like (the first system's WER minus the second's on the same utterances, matched-pairs p "
                  "and bootstrap 95% interval):", "",
                  *table(["system", "against", "applied to", "difference"],
                         [[label.get(p["system"], p["system"]), label.get(p["against"], p["against"]), p["applied_to"],
                           _against(p)] for p in pairs])]
    if data.get("unavailable"):
        lines += ["Not in the table: " + "; ".join(f"{n} ({systems.get(n, {}).get('label', n)}): {why}"
                                                   for n, why in data["unavailable"].items()) + ".", ""]
    return lines


def _count(value: int | None) -> str:
    """``1,000``, or ``?`` for a count a model's config does not record."""
    return "?" if value is None else f"{value:,}"


def _percent(value: float | None) -> str:
    """A WER with two decimals, ``-`` when there is none (the joint search kept the decoder's 1-best)."""
    return "-" if value is None else f"{value:.2f}"


def _rho_models(models: dict[str, Any]) -> str:
    """The models of ``rho_sweep.json`` in a sentence: each one's path, rho and books/ validation
    perplexity, the weights they all start from and how long each was trained on."""
    trainings = [m["training"] for m in models.values()]
    steps = {t["steps"] for t in trainings}
    each = "; ".join(f"{name} `{m['path']}` (rho {m['rho']}, "
                     + ("" if len(steps) == 1 else f"{_count(m['training']['steps'])} steps, ")
                     + f"best books/ valid ppl {_percent(m['training']['best_valid_ppl'])})"
                     for name, m in models.items())
    start = ", ".join(dict.fromkeys(f"`{t['init_from']}` ({_count(t['init_steps'])} steps)" for t in trainings))
    length = f"{_count(next(iter(steps)))} steps" if len(steps) == 1 else "the steps shown"
    return (f"{each}; each fine-tuned on books/ at its rho from the shipped AFP-4 weights {start} for {length}, so "
            "they differ only in rho")


def rho_sweep(results: Path) -> list[str]:
    """``rho_sweep.json``: per model of ``bench/rho_finetune.sh`` (the same fine-tuning at rho 2, 3
    and 4) and per target size, the expansion, the lattice oracle kept, the WER tuned on one dev
    set and applied to the other, speed and memory; nothing when absent."""
    data = load_json(results / "rho_sweep.json")
    if not data or not data.get("models"):
        return []
    models = data["models"]
    directions = list(dict.fromkeys(d for m in models.values() for r in m["targets"].values() for d in r["wer"]))
    rows = []
    for name, model in models.items():
        for target, r in sorted(model["targets"].items(), key=lambda kv: int(kv[0])):
            rows.append([name, model["rho"], f"{model['ppl']:.2f}", f"{int(target):,}",
                         f"{r['expanded_arcs_per_utt']:,.0f}", f"{r['oracle_wer_kept']:.2f}",
                         *(_percent(r["wer"].get(d)) for d in directions), _percent(r["wer_both"]),
                         _percent(r["decoder_wer_both"]), f"{r['rtf']:.3f}",
                         "-" if r.get("peak_memory_mib") is None else f"{r['peak_memory_mib']:.0f}"])
    return ["## Which rho and which target for PocketSphinx lattices?" + by("rho_sweep"), "",
            f"`{data['command'].strip()}`: the audio is {data['audio']}; the first {data['limit']} utterances of each "
            f"PocketSphinx dev set. Models: {_rho_models(models)}. The AFP model alone rescores (a mixture with the "
            "4-gram would expand to order 4 whatever the rho). Portrait ppl: perplexity on The Portrait of a Lady "
            "(the clean held-out book); target: the expansion's target arcs per lattice; oracle: the lattice oracle "
            "WER of the lattices rescored. WER in percent, tuned by afp tune's joint search on one set and applied "
            "to the other (`-`: the search kept the decoder's 1-best); both: the two applied sets together, against "
            f"the decoder's 1-best on the same words. RTF: rescoring's seconds per audio second, {where(data)}, on a "
            "loaded machine: compare within this table; peak: the process's resident memory after rescoring, before "
            "tuning" + plot_link(results, "rho_sweep.png") + "."
            + "".join(f" {note}" for note in data.get("notes", [])), "",
            *table(["model", "rho", "Portrait ppl", "target arcs", "expanded arcs/utt", "oracle WER kept",
                    *(f"WER {d}" for d in directions), "WER both", "decoder WER both", "RTF", "peak MiB"], rows)]


def tune_speed(results: Path) -> list[str]:
    """``tune_speed.json`` (and ``tune_speed_gpu.json``, the same run on a GPU machine):
    ``afp tune`` against ``afp rescore --weights`` on the same lattices, before and after a change,
    what the restarts and folds buy, and the rescoring runs' real-time factors; nothing when absent."""
    sections = [_tune_speed(data) for data in (load_json(results / f) for f in ("tune_speed.json", "tune_speed_gpu.json"))
                if data]
    return [line for section in sections for line in section]


def _tune_speed(data: dict[str, Any]) -> list[str]:
    rows, rescoring = [], []
    for name, entry in data["sets"].items():
        rescore = entry["rescore_same"]["wall_s"]
        runs = [("before" + (f" ({data['before']})" if data.get("before") else ""), entry.get("before")),
                ("after: " + (data.get("defaults") or "restarts 3, folds 5 (defaults)"), entry["tune"]), *(entry.get("study") or {}).items()]
        for label, run in runs:
            if not run:
                continue
            cv = run.get("cross_validated_wer")
            held = (run.get("held_out") or (entry["rescore_held_out"] if run is entry["tune"] else None) or {}).get("wer")
            rows.append([name, label, run["wall_s"], run["search_s"], run["line_searches"],
                         round(run["wall_s"] / rescore, 2), f"{run['tuned_wer']:.2f}", "-" if cv is None else f"{cv:.2f}",
                         "-" if held is None else f"{held:.2f}"])
        for label, key in (("untuned defaults", "rescore_untuned"), (f"weights tuned on {name}", "rescore_same"),
                           (f"weights tuned on {name}", "rescore_held_out")):
            run = entry.get(key)
            if not run or "rtf" not in run:
                continue
            rescoring.append([run.get("set", name), label, run["wall_s"], run["audio_s"], f"{run['rtf']:.3f}", run["peak_rss_mib"],
                              f"{run['wer']:.2f}"])
        every = entry.get("rescore_every") or {}
        for code in ("before", "after"):
            run = every.get(code)
            if run:
                label = f"tuned on {name}'s first {data['limit']}: " + (
                    f"before ({data['before']})" if code == "before" else "after")
                rescoring.append([f"{name}, all {every['lattices']}", label, run["wall_s"], run["audio_s"],
                                  f"{run['rtf']:.3f}", run["peak_rss_mib"], f"{run['wer']:.2f}"])
    env = data.get("environment", {})
    where = (f"GPU machine ({env['gpu']}, {env.get('cpu_count', '?')} CPU cores; `afp` on its default device, CUDA)"
             if env.get("cuda") else "CPU")
    return ["## Tuning time against rescoring time" + (" on a GPU" if env.get("cuda") else "") + by("tune_speed"), "",
            f"`{data['command']}`: {where}, torch {env.get('torch', '?')}, one CPU thread per process, model "
            f"`{data['model']}`, the first {data['limit']} lattices of each PocketSphinx set. Wall seconds include "
            f"loading and scoring; search seconds are the joint search alone (line searches: the main search's, the "
            f"folds run as many again each). Tune / rescore: over `afp rescore --weights` on the same lattices (aim: "
            f"at most 1.5). Held-out: the saved weights applied to the other set's lattices. "
            f"{data.get('note', '')}".rstrip(), "",
            *table(["set", "search", "wall s", "search s", "line searches", "tune / rescore", "tuned WER",
                    "cross-validated WER", "held-out WER"], rows),
            *(["`afp rescore` on the same lattices (RTF: wall seconds over the audio's, process start and model "
               "loading included; aim: 0.05):", "",
               *table(["lattices", "weights", "wall s", "audio s", "RTF", "peak MiB", "WER"], rescoring)] if rescoring
              else [])]
