"""Sections on PocketSphinx lattices: the decoder's sets and the WER table of every system."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.common import load_json, plot_link, table, where


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
