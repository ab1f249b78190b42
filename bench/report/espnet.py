"""Sections on word error rate with the ESPnet LibriSpeech n-best lists: n-best rescoring and its
speed, tuning on one dev set and applying to the other, untuned defaults, acausal window models,
and which language model helps the first pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.common import by, load_json, table, where


def _point(point: dict[str, float] | None) -> str:
    """``0.1, 0.7, 1, -10`` for a tuned grid point (its weights in the grid's order)."""
    if not point:
        return "-"
    keys = ("lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "mbr_scale")
    return ", ".join(f"{point[k]:.3g}" for k in keys if k in point)


def wer(results: Path) -> list[str]:
    """``wer_librispeech.json``: WER of each system tuned on the other dev set, its significance
    and weights, and the AFP model's scoring speed against the full RNN; "Not run yet." when absent."""
    lines = ["## Word error rate of n-best rescoring, LibriSpeech dev (`python -m bench.wer`)", ""]
    data = load_json(results / "wer_librispeech.json")
    if not data:
        return [*lines, "Not run yet.", ""]
    sets = list(data["sets"])
    lines += [f"{where(data)}. AFP model `{data['afp_model']}` ({data['afp']['name']}, valid ppl "
              f"{data['afp']['training'].get('best_valid_ppl', float('nan')):.2f}); baseline "
              f"`{data.get('baseline_model')}`. Named weights {data['score_weights']}; each system tuned on one dev "
              "set and applied to the other. Plot `wer_librispeech.png`.", ""]
    rows = [["first pass", *(data["sets"][s]["first_pass_wer"] for s in sets), "the recogniser's (0, 0.6, 0, 0)"],
            ["oracle (30-best)", *(data["sets"][s]["oracle_wer"] for s in sets), "-"]]
    def p_values(t: dict[str, Any]) -> str:
        first = t.get("against_first_pass", {}).get("mapsswe", {}).get("p")
        reweighted = t.get("against_reweighted", {}).get("mapsswe", {}).get("p")
        return " / ".join(f"{p:.2g}" if p is not None else "-" for p in (first, reweighted))

    for label, system in data["systems"].items():
        tuned = [next(v for k, v in system["results"].items() if k.startswith(s) and "tuned on" in k) for s in sets]
        rows.append([label, *(t["wer"] for t in tuned), *(p_values(t) for t in tuned),
                     " / ".join(_point(t.get("point")) for t in tuned)])
    lines += table(["system (WER %, tuned on the other set)", *sets,
                    *(f"p {s} (vs first pass / vs re-weighting)" for s in sets),
                    "weights applied (new LM, old LM, word penalty, unk penalty)"], rows)
    speed_rows = []
    for s in sets:
        sp = data["speed"][s]
        speed_rows.append([s, sp["tokens"], sp["afp_distinct_contexts"], sp["contexts_per_token"],
                           sp["afp_engine_tokens_per_s"], sp["afp_merged_tokens_per_s"],
                           sp.get("rnn_tokens_per_s", "not run"), sp.get("rnn_over_afp_merged", "not run")])
    lines += table(["set", "tokens", "AFP distinct contexts", "contexts/token", "AFP engine tokens/s",
                    "AFP merged tokens/s", "full-RNN tokens/s", "full-RNN time / AFP merged time"], speed_rows)
    return lines


def tune_transfer(results: Path) -> list[str]:
    """``tune_transfer.json``: tuned on one LibriSpeech dev set, applied to the other; nothing
    when absent."""
    data = load_json(results / "tune_transfer.json")
    if not data:
        return []
    rows = []
    for r in data["rows"]:
        c = r["against_first_pass"]
        rows.append([f"{r['tuned_on']} -> {r['applied_to']}", r["system"], f"{r['tuned_wer']:.2f}",
                     f"{r['cross_validated_wer']:.2f}" if r.get("cross_validated_wer") is not None else "-",
                     f"{c['wer_a']:.2f}", f"{c['wer_b']:.2f}", f"{c['difference']:+.2f}",
                     f"{c['mapsswe']['p']:.2g}", f"[{c['bootstrap']['low']:+.2f}, {c['bootstrap']['high']:+.2f}]",
                     "yes" if c["significant"] else "no", _point(r["point"])])
    return ["## Tuning that cannot lose: tuned on one dev set, applied to the other" + by("tune_transfer"),
            "", f"`{data['command']}`: model `{data['model']}`, ESPnet 30-best lists; WER in percent; p: matched "
            "pairs (MAPSSWE, utterances); interval: bootstrap 95% of the applied WER minus the first pass's. "
            "`joint` writes the first pass's own weights when its cross-validated WER is not below the first pass's.",
            "", *table(["direction", "system", "tuned WER", "CV WER", "first pass", "applied WER", "difference", "p",
                        "bootstrap 95%", "significant", "weights"], rows)]


def untuned_defaults(results: Path) -> list[str]:
    """``untuned_defaults.json``: afp rescore with untuned weights on the ESPnet lists."""
    data = load_json(results / "untuned_defaults.json")
    if not data:
        return []
    rows = [[r["set"], r["system"], " ".join(r["flags"]) or "(none)", f"{r['first_pass_wer']:.2f}", f"{r['wer']:.2f}",
             f"{r['p']:.2g}", f"{r['weights']['old_lm_weight']:g} / {r['weights']['lm_weight']:g}"] for r in data["rows"]]
    lines = ["## Untuned defaults on the ESPnet lists" + by("untuned_defaults"), "",
             f"`{data['command']}`: `afp rescore --model {data['model']}` with the flags shown; p: matched pairs against "
             "the first pass.", "", *table(["set", "system", "flags", "first pass", "WER", "p", "old LM / new LM weight"],
                                           rows)]
    unk = data.get("unk_penalty")
    if unk:
        lines += ["", "The unknown-word default: `--unk-penalty 0` (an unknown word scored as the whole `<unk>` class) "
                  "against the model's own `-log U`, both untuned, matched pairs:", "",
                  *table(["set", "model's own", "unk penalty 0", "difference", "p"],
                         [[name, f"{r['untuned']:.2f}", f"{r['unk_penalty_0']:.2f}", f"{r['difference']:+.2f}",
                           f"{r['p']:.2g}"] for name, r in unk.items()])]
    return lines


def acausal(results: Path) -> list[str]:
    """``acausal.json``: window models' pseudo-perplexities, expansion cost and WER."""
    data = load_json(results / "acausal.json")
    if not data:
        return []
    lines = ["## Acausal window models" + by("acausal"), ""]
    if "ppl" in data:
        rows = [[name, r["describe"], "pseudo-ppl" if r["pseudo"] else "ppl", f"{r['ppl']:.2f}", r["tokens"]]
                for name, r in data["ppl"]["models"].items()]
        lines += [f"`{data['commands']['ppl']}`: `{data['ppl']['valid']}`; GRU-256, one epoch of Switchboard each, the "
                  "same options. A pseudo-perplexity scores each word from the words around it: it says how much the "
                  "right context tells, not which is the better language model.", "",
                  *table(["model", "kind", "measure", "value", "tokens"], rows)]
    if "expansion" in data:
        rows = [[name, v["causal"]["expanded_arcs"], v["two_sided"]["expanded_arcs"], f"{v['ratio']['expanded_arcs']:.2f}",
                 f"{v['causal']['total_s']:.2f}", f"{v['two_sided']['total_s']:.2f}", f"{v['ratio']['total_s']:.1f}",
                 f"{v['two_sided']['score_s']:.2f}"] for name, v in data["expansion"].items()]
        lines += [f"`{data['commands']['expansion']}`: causal expansion against the two-sided one (the causal model "
                  "plus the window model as a feature), in one run.", "",
                  *table(["inputs", "causal arcs", "two-sided arcs", "arc ratio", "causal s", "two-sided s",
                          "time ratio", "two-sided scoring s"], rows)]
    if "wer" in data:
        sets = list(data["wer"]["first_pass"])
        rows = [["first pass", *(f"{data['wer']['first_pass'][s]:.2f}" for s in sets), "-", "-"]]
        for system, results_ in data["wer"]["systems"].items():
            tuned = [next(v for k, v in results_.items() if k.startswith(s) and "tuned on" in k) for s in sets]
            rows.append([system, *(f"{t['wer']:.2f}" for t in tuned),
                         " / ".join(f"{t['against_first_pass']['mapsswe']['p']:.2g}" for t in tuned),
                         " / ".join(f"{t['against_reweighted']['mapsswe']['p']:.2g}" if "against_reweighted" in t
                                    else "-" for t in tuned)])
        lines += [f"`{data['commands']['wer']}`: ESPnet 30-best lists, each system tuned on one dev set by the joint "
                  f"search and applied to the other; window model `{data['wer']['window_model']}` "
                  f"({data['wer']['window']}).", "",
                  *table(["system", *sets, "p vs first pass", "p vs re-weighting"], rows)]
    return lines


def wer_models(results: Path) -> list[str]:
    """``wer_models.json`` (the bundled books-large models) and ``wer_models_books.json`` (the
    earlier 7.6M-word books/ models): an AFP model, a KN 4-gram and their mixture on the ESPnet lists."""
    lines = []
    for name, what in (("wer_models.json", "the bundled `models/librispeech` mixture and its parts (books/ + "
                                            "books-large/, 67.6M words)"),
                       ("wer_models_books.json", "the earlier models of books/ alone (7.6M words)")):
        data = load_json(results / name)
        if not data or "first_pass" not in data:
            continue
        sets = list(data["first_pass"])
        rows = [["first pass", "-", *(f"{data['first_pass'][s]:.2f}" for s in sets), "-", "-"]]
        for system, found in data["systems"].items():
            tuned = [next(v for k, v in found.items() if k.startswith(s) and "tuned on" in k) for s in sets]
            rows.append([system, data["models"].get(system, {}).get("name", "-"),
                         *(f"{t['wer']:.2f}" for t in tuned),
                         " / ".join(f"{t['against_first_pass']['mapsswe']['p']:.2g}" for t in tuned),
                         " / ".join(f"{t['against_reweighted']['mapsswe']['p']:.2g}" if "against_reweighted" in t
                                    else "-" for t in tuned)])
        lines += [f"## Which LM helps the ESPnet first pass? {what[0].upper() + what[1:]}"
                  + by("wer_models"), "",
                  f"`{data['command']}`: each system added to the recogniser's own LM and tuned by the joint search "
                  "on one dev set, applied to the other (WER %).", "",
                  *table(["system", "model", *(f"{s} (tuned on the other)" for s in sets), "p vs first pass",
                          "p vs re-weighting"], rows)]
    return lines
