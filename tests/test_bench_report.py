"""bench/results/README.md is rendered from the JSON, and stays in step with it."""

from __future__ import annotations

import json

from bench.common import RESULTS
from bench.report import render


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_empty_results_say_not_run(tmp_path):
    text = render(tmp_path)
    assert text.count("Not run yet.") == 7


def test_tables_carry_the_measured_values_and_mark_incomplete_runs(tmp_path):
    _write(tmp_path / "ptb" / "summary.json", {
        "dataset": "ptb", "epochs": 20, "paper": {"rnn-bptt": 142.1, "afp-fpi": 129.4, "note": "test ppl"},
        "runs": {"rnn-bptt": {"epochs_done": 20, "complete": True, "best_valid_ppl": 150.123, "best_epoch": 18,
                              "seconds_per_epoch": 99.0, "device": "cpu"},
                 "afp-fpi-rho3": {"epochs_done": 7, "complete": False, "best_valid_ppl": 170.5, "best_epoch": 7,
                                  "seconds_per_epoch": 150.0, "device": "cpu"}}})
    _write(tmp_path / "epoch_timing_cuda.json", {
        "hidden": 100, "batch_size": 20, "epoch_tokens": 1000, "environment": {"gpu": "NVIDIA H100", "torch": "2.x"},
        "configs": {"exact (BPTT)": {"seconds_per_epoch": 10.0, "ratio_to_exact": 1.0},
                    "AFP-2 FPI|θ": {"seconds_per_epoch": 2.5, "ratio_to_exact": 0.25}}})
    text = render(tmp_path)
    assert "| rnn-bptt | 150.12 | 18 | 20 | 99.00 | cpu |" in text
    assert "| afp-fpi-rho3 | 170.50 | 7 | 7 of 20 (incomplete) |" in text
    assert "| rnn-bptt | 150.12 (rnn-bptt) | 142.1 |" in text  # the comparison with the paper
    assert "| afp-fpi | 170.50 (afp-fpi-rho3, some runs incomplete) | 129.4 |" in text
    assert "### cuda: NVIDIA H100" in text
    assert "| AFP-2 FPI\\|θ | 2.50 | 0.25 |" in text  # a "|" in a name does not break the table
    assert text.count("Not run yet.") == 5


def test_committed_readme_is_up_to_date():
    """What ``python -m bench.report --check`` checks: the README is the render of the JSON beside it."""
    assert README.read_text(encoding="utf-8") == render(RESULTS), "bench/results/README.md is stale: run python -m bench.report"


# The committed README against the committed JSON, each fact read and formatted here, not by the report.
README = RESULTS / "README.md"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _json(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def test_every_training_run_and_bundled_candidate_has_its_measured_row():
    text = _readme()
    for study in ("ptb", "ptb-bf16", "wikitext2-bf16"):
        for name, run in _json(f"{study}/summary.json")["runs"].items():
            assert f"| {name} | {run['best_valid_ppl']:.2f} | {run['best_epoch']} | " in text, (study, name)
    for preset in ("conversational", "librispeech", "ptb"):
        for name, candidate in _json(f"bundled/{preset}.json")["candidates"].items():
            if "best_valid_ppl" in candidate:
                assert f"| {name} | " in text and f" | {candidate['best_valid_ppl']:.2f} | " in text, (preset, name)
    for row in _json("train_throughput_cpu.json")["train"]:
        mode = "exact (BPTT)" if row["mode"] == "exact" else "AFP-4"
        assert f"| {row['vocab_size']:,} | {mode} | {row['softmax']} | {row['tokens_per_second']:.0f} | " in text


def test_every_wer_of_the_committed_tables_is_in_the_readme():
    text = _readme()
    wer = _json("wer_librispeech.json")
    assert f"| first pass | {wer['sets']['dev_clean']['first_pass_wer']:.2f} | " \
           f"{wer['sets']['dev_other']['first_pass_wer']:.2f} |" in text
    for label, system in wer["systems"].items():
        clean, other = (next(v["wer"] for k, v in system["results"].items() if k.startswith(s) and "tuned on" in k)
                        for s in ("dev_clean", "dev_other"))
        assert f"| {label} | {clean:.2f} | {other:.2f} | " in text, label
    table = _json("pocketsphinx_wer_table.json")
    for row in table["rows"].values():
        label = table["systems"][row["system"]]["label"]
        assert f"| {label} | {row['applied_to']} | {row['wer']:.2f} | " in text, (label, row["applied_to"])
    for row in _json("tune_transfer.json")["rows"]:
        assert f" | {row['system']} | {row['tuned_wer']:.2f} | " in text
        assert f" | {row['against_first_pass']['wer_b']:.2f} | " in text
    for system in _json("corpus_rescore.json")["systems"]:
        assert f"| {system['system']} | {system['wall_s']:.2f} | {system['lattices_per_s']:.2f} | " in text


def test_every_section_names_a_script_that_is_there_or_says_when_it_was_retired():
    """A heading's ``python -m bench.NAME`` (or ``afp`` command) exists as ``bench/NAME.py``, unless the heading says it is retired and names a commit that wrote results and
    still had the script."""
    import re
    import subprocess

    repo = RESULTS.parents[1]
    headings = [line for line in _readme().splitlines() if line.startswith("## ") and "`afp " not in line]
    named = [(re.search(r"`python -m bench\.(\w+)", h), h) for h in headings]
    assert all(found for found, _ in named), [h for found, h in named if not found]
    retired = 0
    for found, heading in named:
        script = repo / "bench" / f"{found.group(1)}.py"
        commit = re.search(r"retired: last run at commit ([0-9a-f]{7,40})\)$", heading)
        if commit is None:
            assert script.is_file() or (repo / "bench" / found.group(1)).is_dir(), heading
            continue
        retired += 1
        assert not script.exists(), heading
        git = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True)
        if git.returncode != 0:
            continue  # no history to check against (an exported tree)
        for check in (["cat-file", "-e", f"{commit.group(1)}:bench/{found.group(1)}.py"],
                      ["diff-tree", "--quiet", "--no-commit-id", "-r", commit.group(1), "--", "bench/results"]):
            done = subprocess.run(["git", "-C", str(repo), *check], capture_output=True)
            assert done.returncode == (0 if check[0] == "cat-file" else 1), (heading, check)
    assert retired >= 10


def test_precision_check_pairs_complete_runs_of_both_precisions(tmp_path):
    def summary(ppl: float, complete: bool, precision: str) -> dict:
        run = {"epochs_done": 20 if complete else 5, "complete": complete, "best_valid_ppl": ppl, "best_epoch": 5,
               "seconds_per_epoch": 100.0 if precision == "fp32" else 60.0, "device": "cpu", "precision": precision}
        return {"dataset": "ptb", "epochs": 20, "paper": {}, "runs": {"rnn-bptt": run, "afp-fpi-rho2": {**run,
                "complete": False, "epochs_done": 3}}}

    _write(tmp_path / "ptb" / "summary.json", summary(160.0, True, "fp32"))
    _write(tmp_path / "ptb-bf16" / "summary.json", summary(161.6, True, "bf16"))
    text = render(tmp_path)
    assert "### ptb: float32 against bfloat16-autocast training of the same runs" in text
    assert "| rnn-bptt | 160.00 | 161.60 | +1.00% |" in text
    assert "| afp-fpi-rho2 | 160.00 | 161.60 |" not in text  # incomplete runs are not compared
    assert "| rnn-bptt | 161.60 | 5 | 20 | 60.00 | cpu | bf16 |" in text


def test_the_kn_5gram_calibrates_ours_against_the_paper(tmp_path):
    def run(ppl: float) -> dict:
        return {"epochs_done": 20, "complete": True, "best_valid_ppl": ppl, "best_epoch": 9,
                "seconds_per_epoch": 1.0, "device": "cpu"}

    _write(tmp_path / "ptb" / "summary.json", {
        "dataset": "ptb", "epochs": 20, "paper": {"rnn-bptt": 142.1, "kn-5gram": 141.2, "ffnn-2gram": 179.0},
        "runs": {"rnn-bptt": run(160.0), "kn-5gram": {**run(150.0), "epochs_done": 1}}})
    text = render(tmp_path)
    assert "| rnn-bptt | 160.00 (rnn-bptt) | 142.1 | 1.067 | 1.006 |" in text
    assert "| kn-5gram | 150.00 (kn-5gram) | 141.2 | 1.000 | 1.000 |" in text
    assert "| ffnn-2gram | not run | 179.0 |  | 1.268 |" in text


def test_epoch_timing_with_two_precisions_also_compares_within_each(tmp_path):
    _write(tmp_path / "epoch_timing_cpu.json", {
        "hidden": 100, "batch_size": 20, "epoch_tokens": 1000, "precisions": ["fp32", "bf16"],
        "configs": {"exact (BPTT)": {"seconds_per_epoch": 10.0, "ratio_to_exact": 1.0},
                    "AFP-2 FPI": {"seconds_per_epoch": 9.0, "ratio_to_exact": 0.9},
                    "exact (BPTT) bf16": {"seconds_per_epoch": 8.0, "ratio_to_exact": 0.8},
                    "AFP-2 FPI bf16": {"seconds_per_epoch": 6.0, "ratio_to_exact": 0.6}}})
    text = render(tmp_path)
    assert "training precisions fp32, bf16" in text
    assert "| AFP-2 FPI | 9.00 | 0.90 | 0.90 |" in text
    assert "| AFP-2 FPI bf16 | 6.00 | 0.60 | 0.75 |" in text  # 6 / 8: against exact BPTT in bf16


def test_wer_and_conversational_sections(tmp_path):
    sets = {s: {"first_pass_wer": fp, "oracle_wer": o} for s, fp, o in (("dev_clean", 1.7, 0.59),
                                                                           ("dev_other", 3.61, 1.76))}
    speed = {s: {"tokens": 1000, "afp_distinct_contexts": 150, "contexts_per_token": 0.15,
                 "afp_engine_tokens_per_s": 9000.0, "afp_merged_tokens_per_s": 12000.0} for s in sets}
    point = {"lm_weight": 0.1, "old_lm_weight": 0.7, "word_penalty": 1.0, "unk_penalty": -10.0}
    significance = {"against_first_pass": {"mapsswe": {"p": 0.012}}, "against_reweighted": {"mapsswe": {"p": 0.3}}}
    systems = {"afp+lm": {"results": {"dev_clean (tuned on dev_other)": {"wer": 1.61, "point": point, **significance},
                                      "dev_clean (own best)": {"wer": 1.6, "point": point},
                                      "dev_other (tuned on dev_clean)": {"wer": 3.42,
                                                                         "point": {**point, "lm_weight": 0.05}}}}}
    _write(tmp_path / "wer_librispeech.json", {
        "environment": {"threads": 2, "torch": "2.x"}, "afp_model": "models/librispeech",
        "afp": {"name": "AFP-4 gru 1x256", "training": {"best_valid_ppl": 150.0}}, "baseline_model": None,
        "score_weights": {"decoder": 0.6, "ctc": 0.4}, "sets": sets, "speed": speed, "systems": systems})
    _write(tmp_path / "conversational_eval.json", {
        "environment": {"threads": 2}, "models": {"old": {}, "new": {}}, "shared_vocabulary": 3000,
        "sets": {"switchboard": {"old": {"ppl": 90.0, "oov_rate": 0.1, "shared_vocab_ppl": 200.0},
                                 "new": {"ppl": 80.0, "oov_rate": 0.01, "shared_vocab_ppl": 120.0}}}})
    text = render(tmp_path)
    assert "| first pass | 1.70 | 3.61 | the recogniser's (0, 0.6, 0, 0) |" in text
    assert "| afp+lm | 1.61 | 3.42 | 0.012 / 0.3 | - / - | 0.1, 0.7, 1, -10 / 0.05, 0.7, 1, -10 |" in text
    assert "| dev_clean | 1000 | 150 | 0.15 | 9000.00 | 12000.00 | not run | not run |" in text
    assert "| switchboard | new | 120.00 | 80.00 | 1.00% |" in text
    assert text.count("Not run yet.") == 5


def test_throughput_and_scale_sections_appear_once_their_json_exists(tmp_path):
    assert "bench.train_throughput" not in render(tmp_path)  # run by hand: no section until there is JSON

    def train_row(v: int, mode: str, softmax: str, tokens_per_second: float, speedup: float | None) -> dict:
        return {"vocab_size": v, "mode": mode, "softmax": softmax, "name": f"V={v} {mode}, {softmax} softmax",
                "tokens_per_round": 11200, "round_seconds": [1.0], "median_round_seconds": 1.0,
                "tokens_per_second": tokens_per_second, "start_rss_mib": 300.0, "peak_rss_mib": 500.0,
                "peak_cuda_mib": 2048.0 if softmax == "full" else 256.0, "speedup_over_exact_full": speedup}

    _write(tmp_path / "train_throughput_cuda.json", {
        "device": "cuda:0", "zipf_exponent": 1.0, "environment": {"gpu": "NVIDIA H100", "torch": "2.x"},
        "config": {"hidden": 256, "rho": 4, "batch_size": 32, "bptt": 35, "precision": "bf16", "rounds": 5},
        "train": [train_row(200_000, "exact", "full", 4000.4, 1.0), train_row(200_000, "afp", "adaptive", 52000.0, 13.0),
                  train_row(10_000, "afp", "full", 9000.0, None)],
        "score": {"vocab_size": 200_000, "rho": 4, "contexts": 4096, "targets_per_context": 8, "rows": [
            {"softmax": "full", "contexts_per_second": 5000.0, "speedup_over_full": 1.0, "peak_cuda_mib": 900.0},
            {"softmax": "adaptive", "contexts_per_second": 30000.0, "speedup_over_full": 6.0, "peak_cuda_mib": 90.0}]}})
    measured = {"returncode": 0, "wall_seconds": 12.5, "peak_rss_mib": 400.0, "peak_rss_anon_mib": 350.0,
                "peak_rss_file_mib": 50.0}
    _write(tmp_path / "train_scale.json", {
        "environment": {"threads": 2, "torch": "2.x"}, "same_train_ppl": True,
        "args": {"device": "cpu", "model_args": "--cell gru", "batch_size": 64, "batches": 5},
        "corpus": {"words": 200_000}, "legacy_corpus": {"words": 100_000},
        "prepare": {**measured, "bytes_on_disk": 2 * 2**20},
        "load": {"data": {**measured, "peak_rss_mib": 180.0}, "legacy": {**measured, "peak_rss_mib": 900.0}},
        "train": {"data": {**measured, "tokens_per_second": 1234.4}, "legacy": {**measured, "tokens_per_second": 1200.0}}})
    run = {"model_calls": 12, "lattices_per_s": 80.0, "contexts_per_s": 8000.0}
    _write(tmp_path / "merged_rescoring_cuda.json", {
        "environment": {"gpu": "NVIDIA H100", "torch": "2.x"}, "args": {"batch_pairs": 262_144},
        "sets": {"dev_clean": {"lattices": 2703, "precisions": {
            "fp32": {"per_lattice": {**run, "model_calls": 2703},
                     "merged_8": {**run, "lattices_per_s": 400.0, "speed_over_per_lattice": 5.0,
                                  "same_best_words": True, "max_abs_lm_logprob_diff": 2e-6}},
            "bf16": {"per_lattice": run, "vs_fp32": {"same_best_words": False, "max_abs_lm_logprob_diff": 4e-4,
                                                     "speed_ratio_per_lattice": 1.5}}}}}})
    wt_row = {"steps": 50, "train_tokens": 90_000, "train_ppl": 600.0}
    _write(tmp_path / "softmax_wikitext.json", {
        "command": "python -m bench.softmax_wikitext", "vocab_size": 33_279, "train_sentences": 1000,
        "model": "GRU-256 AFP-4", "batch_size": 20, "environment": {"threads": 2, "torch": "2.x"},
        "rows": [{**wt_row, "softmax": "full", "tokens_per_second": 1000.0, "valid_ppl": 700.0},
                 {**wt_row, "softmax": "adaptive", "tokens_per_second": 5500.0, "valid_ppl": 690.5}]})
    text = render(tmp_path)
    assert "| adaptive | 50 | 90,000 | 5500 | 5.50 | 600.00 | 690.50 |" in text
    assert "V = 33,279, batch size 20, 1,000 training lines" in text
    assert "### cuda: NVIDIA H100, torch 2.x; merged calls of up to 262,144 pairs" in text
    assert "| dev_clean | 2703 | fp32 | per lattice | 2703 | 80.00 | 8000 | - | - | - |" in text
    assert "| dev_clean | 2703 | fp32 | merged 8 | 12 | 400.00 | 8000 | 5.00 | yes | 2.0e-06 |" in text
    assert "| dev_clean | 2703 | bf16 | per lattice vs fp32 | - | - | - | 1.50 | no | 4.0e-04 |" in text
    assert "### cuda: NVIDIA H100, torch 2.x; GRU 256, batch 32 x 35 tokens, bf16" in text
    assert "| V | mode | softmax | tokens/s | x exact full (tokens/s) | peak CUDA MiB | peak RSS MiB |" in text
    assert "| 200,000 | exact (BPTT) | full | 4000 | 1.00 | 2048.00 | 500.00 |" in text
    assert "| 200,000 | AFP-4 | adaptive | 52000 | 13.00 | 256.00 | 500.00 |" in text
    assert "| 10,000 | AFP-4 | full | 9000 | - |" in text  # no exact full measured at this V
    assert "| adaptive | 30000 | 240000 | 6.00 | 90.00 | - |" in text  # 8 targets per context; no RSS given
    assert "| prepare | text -> shards | 200,000 | 400.00 | 350.00 | 50.00 | 12.50 | - |" in text
    assert "| load | text in memory | 100,000 | 900.00 |" in text
    assert "| train | shards | 200,000 | 400.00 | 350.00 | 50.00 | 12.50 | 1234 |" in text
    assert "Shards on disk: 2.0 MiB. Both paths reach the same training perplexity: yes." in text
    assert text.count("Not run yet.") == 7  # as with no JSON at all: these sections never say it


def _ps_set(synthetic: bool, audio: str, utterances: int, first_pass: float, oracle: float) -> dict:
    return {"synthetic": synthetic, "audio": audio, "command": f"python -m bench.pocketsphinx_set ({audio})",
            "decoder": "pocketsphinx.Decoder(fwdflat=False)", "pocketsphinx": "5.1.1", "utterances": utterances,
            "ref_words": 8127, "audio_seconds": 2515.27, "rtf": {"decode": 0.2005, "decode_lattice_nbest": 0.21},
            "wer": {"first_pass": {"wer": first_pass}, "nbest50_top": {"wer": 36.6}, "nbest50_oracle": {"wer": oracle},
                    "first_pass_or_nbest50_oracle": {"wer": 25.3}},
            "lattice_links": {"median": 7349.5, "max": 52180, "mean": 10145.1}}


def test_pocketsphinx_sets_section_says_which_audio_is_synthetic(tmp_path):
    assert "bench.pocketsphinx_set" not in render(tmp_path)
    _write(tmp_path / "pocketsphinx_sets.json", {
        "dev_clean": _ps_set(True, "synthetic: text-to-speech", 400, 31.377, 28.559),
        "librivox": _ps_set(False, "real speech (LibriVox)", 5, 26.76, 15.49)})
    text = render(tmp_path)
    assert "| set | audio | utterances | ref words | audio min | first pass (decoder 1-best) | 50-best oracle |" in text
    assert "| dev_clean | synthetic (TTS) | 400 | 8,127 | 41.9 | 31.38 | 28.56 | 0.201 | 7,350 / 52,180 |" in text
    assert "| librivox | real speech | 5 |" in text
    assert "dev_clean is synthetic: text-to-speech; librivox is real speech (LibriVox)" in text
    assert text.count("Not run yet.") == 7


def _ps_speed(audio: float, utterances: int) -> dict:
    totals = {"read": 6.0, "determinize_seconds": 24.0, "minimize_seconds": 1.2, "fit_seconds": 3.0,
              "expand_seconds": 0.6, "score_seconds": 18.0, "search_seconds": 0.3, "total_seconds": 53.1,
              "expanded_arcs": 700_000, "contexts": 300_000, "pairs": 650_000}
    return {"utterances": utterances, "audio_seconds": audio, "totals": totals, "rtf_rescoring": 53.1 / audio,
            "rtf_decoding": 0.2086, "oracle_wer_input": 8.375, "oracle_wer_rescored": 12.714, "rows": []}


def test_pocketsphinx_rescore_section_renders_targets_and_skips_the_old_format(tmp_path):
    head = {"command": "python -m bench.pocketsphinx_rescore --target 20000", "model": "models/librispeech",
            "model_load_seconds": 0.1, "environment": {"threads": 1, "torch": "2.x"},
            "audio": "synthetic (text-to-speech voices, bench/pocketsphinx_set.py)"}
    _write(tmp_path / "pocketsphinx_rescore.json", {**head, "budgets": {"20000": {
        "speed": {"dev_clean": _ps_speed(600.0, 100)}, "wer": {}, "peak_memory_mib": 900.0}}})
    assert "bench.pocketsphinx_rescore" not in render(tmp_path)  # the older format: no section, no error

    compared = {"difference": -4.4393, "mapsswe": {"z": -3.3, "p": 0.000936}, "bootstrap": {"low": -7.07, "high": -1.71},
                "significant": True}
    entry = {"speed": {"dev_clean": _ps_speed(600.0, 100), "librivox": _ps_speed(30.0, 5)},
             "peak_memory_mib": 914.99, "wer": {
                 "tuned on dev_clean, applied to dev_other": {
                     "tune": {"chosen": {"point": {"lm_weight": 1.25, "word_penalty": 0.8333}}},
                     "decoder_wer": 26.4603, "rescored_wer": 22.021, "against_decoder": compared},
                 "tuned on dev_other": {"tune": {"chosen": {"point": None}}}}}
    _write(tmp_path / "pocketsphinx_rescore.json", {**head, "targets": {"50000": {**entry, "wer": {}},
                                                                        "20000": entry}})
    _write(tmp_path / "pocketsphinx_sets.json", {"librivox": _ps_set(False, "real speech", 5, 26.76, 15.49)})
    text = render(tmp_path)
    assert "CPU, 1 threads, torch 2.x; the audio is synthetic (text-to-speech voices, bench/pocketsphinx_set.py), " \
           "except librivox (real speech)." in text
    assert "| target arcs | set | utterances | read | determinize | minimize | fit | expand | score | search |" in text
    assert ("| 20,000 | dev_clean | 100 | 0.010 | 0.040 | 0.002 | 0.005 | 0.001 | 0.030 | 0.001 | 0.089 | 0.209 "
            "| 7,000 | 3,000 | 12.71 (8.38) | 915 |") in text
    assert "| 20,000 | librivox | 5 | 0.200 |" in text
    assert text.index("| 20,000 | dev_clean |") < text.index("| 50,000 | dev_clean |")  # targets in numeric order
    assert ("| 20,000 | tuned on dev_clean, applied to dev_other | 26.46 | 22.02 | -4.44 (p 0.00094, [-7.07, -1.71], "
            "significant) | lm 1.25, penalty 0.833 |") in text
    assert "| 20,000 | tuned on dev_other | - | - | no weights better than the decoder's 1-best | - |" in text


def _rho_row(rtf: float, arcs: float, oracle: float, wer: dict, both: float | None, decoder: float | None) -> dict:
    return {"rtf": rtf, "expanded_arcs_per_utt": arcs, "oracle_wer_kept": oracle, "wer": wer, "wer_both": both,
            "decoder_wer_both": decoder, "peak_memory_mib": 812.4}


def test_rho_sweep_section_has_a_row_per_model_and_target(tmp_path):
    assert "bench.rho_sweep" not in render(tmp_path)  # no JSON: no section
    training = {"init_from": "models/librispeech/afp", "init_steps": 109652, "steps": 1000}
    clean, other = "tuned on dev_clean, applied to dev_other", "tuned on dev_other, applied to dev_clean"
    _write(tmp_path / "rho_sweep.json", {
        "command": "python -m bench.rho_sweep --limit 100 ", "environment": {"threads": 1, "torch": "2.x"},
        "limit": 100, "audio": "synthetic (text-to-speech voices, bench/pocketsphinx_set.py)", "models": {
            "rho2": {"path": "runs/rho-finetune/rho2", "rho": 2, "ppl": 301.234,
                     "training": {**training, "best_valid_ppl": 250.5}, "targets": {
                         "20000": _rho_row(0.31, 18000.4, 9.876, {clean: 23.456, other: 21.111}, 22.3, 30.04),
                         "5000": _rho_row(0.0456, 4900.0, 14.5, {other: 22.5}, None, None)}},
            "rho4": {"path": "runs/rho-finetune/rho4", "rho": 4, "ppl": 280.0,
                     "training": {**training, "best_valid_ppl": 240.0},
                     "targets": {"10000": _rho_row(0.2, 9876.0, 11.0, {clean: 22.0, other: 20.0}, 21.0, 30.04)}}}})
    text = render(tmp_path)
    assert "## Which rho and which target for PocketSphinx lattices? (`python -m bench.rho_sweep`, retired" in text
    assert ("`python -m bench.rho_sweep --limit 100`: the audio is synthetic (text-to-speech voices, "
            "bench/pocketsphinx_set.py); the first 100 utterances of each PocketSphinx dev set.") in text
    assert ("rho2 `runs/rho-finetune/rho2` (rho 2, best books/ valid ppl 250.50); rho4 `runs/rho-finetune/rho4` "
            "(rho 4, best books/ valid ppl 240.00); each fine-tuned on books/ at its rho from the shipped AFP-4 "
            "weights `models/librispeech/afp` (109,652 steps) for 1,000 steps, so they differ only in rho.") in text
    assert "seconds per audio second, CPU, 1 threads, torch 2.x, on a loaded machine: compare within this" in text
    assert ("| model | rho | Portrait ppl | target arcs | expanded arcs/utt | oracle WER kept | "
            f"WER {clean} | WER {other} | WER both | decoder WER both | RTF | peak MiB |") in text
    assert "| rho2 | 2 | 301.23 | 5,000 | 4,900 | 14.50 | - | 22.50 | - | - | 0.046 | 812 |" in text
    assert "| rho2 | 2 | 301.23 | 20,000 | 18,000 | 9.88 | 23.46 | 21.11 | 22.30 | 30.04 | 0.310 | 812 |" in text
    assert "| rho4 | 4 | 280.00 | 10,000 | 9,876 | 11.00 | 22.00 | 20.00 | 21.00 | 30.04 | 0.200 | 812 |" in text
    assert text.index("| rho2 | 2 | 301.23 | 5,000 |") < text.index("| rho2 | 2 | 301.23 | 20,000 |")  # numeric order
    assert "rho_sweep.png" not in text  # no plot, no link
    (tmp_path / "rho_sweep.png").write_bytes(b"png")
    assert "before tuning (plot `rho_sweep.png`)." in render(tmp_path)
    assert text.count("Not run yet.") == 7  # the other sections as with no JSON at all

    data = json.loads((tmp_path / "rho_sweep.json").read_text())
    data["models"]["rho4"]["training"]["steps"] = 500  # trained for other steps: each model says its own
    _write(tmp_path / "rho_sweep.json", data)
    text = render(tmp_path)
    assert "(rho 2, 1,000 steps, best books/ valid ppl 250.50); rho4 `runs/rho-finetune/rho4` (rho 4, 500 steps," \
        in text
    assert "(109,652 steps) for the steps shown, so they differ only in rho." in text


def test_corpus_rescore_section_renders_every_system(tmp_path):
    row = {"lattices": 800, "failed": 0, "peak_rss_mib_per_worker": 700.5, "ray_overhead_s_per_input": None}
    _write(tmp_path / "corpus_rescore.json", {
        "command": "python -m bench.corpus_rescore", "sets": ["runs/pocketsphinx/dev_clean"], "model": "models/librispeech",
        "inputs": 16, "lattices": 800, "note": "quiet", "environment": {"machine": "Xeon", "cpu_count": 2, "torch": "2.x"},
        "systems": [{**row, "system": "one", "wall_s": 400.0, "lattices_per_s": 2.0, "speedup_over_one": 1.0},
                    {**row, "system": "ray2", "wall_s": 210.5, "lattices_per_s": 3.8, "speedup_over_one": 1.9,
                     "ray_overhead_s_per_input": 0.012, "equal_to_one": {"same": True}},
                    {**row, "system": "killed", "wall_s": 430.0, "lattices_per_s": 1.86, "speedup_over_one": 0.93,
                     "killed_after_s": 200.0, "inputs_done_when_killed": 8, "resume_s": 230.0,
                     "equal_to_one": {"same": False, "difference": "lat.1.jsonl: x"}}]})
    text = render(tmp_path)
    assert "800 lattices of runs/pocketsphinx/dev_clean as 16 inputs, model `models/librispeech`" in text
    assert "| one | 400.00 | 2.00 | 1.00 | 700.50 | - | 0 | - |  |" in text
    assert "| ray2 | 210.50 | 3.80 | 1.90 | 700.50 | 0.01 | 0 | yes |  |" in text
    assert ("| killed | 430.00 | 1.86 | 0.93 | 700.50 | - | 0 | NO: lat.1.jsonl: x | killed after 200.0 s (8 inputs "
            "done), resumed in 230.0 s |") in text


def test_tune_speed_section_has_a_row_per_search_and_its_ratio_to_rescoring(tmp_path):
    run = {"wall_s": 100.0, "search_s": 80.0, "line_searches": 40, "tuned_wer": 20.0, "cross_validated_wer": 21.5}
    _write(tmp_path / "tune_speed.json", {
        "command": "python -m bench.tune_speed", "model": "models/librispeech", "limit": 100, "before": "abc1234",
        "environment": {"torch": "2.x"}, "note": "",
        "sets": {"dev_clean": {"rescore_same": {"wall_s": 50.0, "wer": 20.5},
                               "rescore_held_out": {"set": "dev_other", "wall_s": 40.0, "wer": 18.25},
                               "tune": run, "before": {**run, "wall_s": 600.0, "tuned_wer": 20.5,
                                                       "held_out": {"wall_s": 40.0, "wer": 18.0}},
                               "study": {"restarts 0, folds 1": {**run, "wall_s": 45.0, "cross_validated_wer": None}}}}})
    text = render(tmp_path)
    assert "| dev_clean | before (abc1234) | 600.00 | 80.00 | 40 | 12.00 | 20.50 | 21.50 | 18.00 |" in text
    assert "| dev_clean | after: restarts 3, folds 5 (defaults) | 100.00 | 80.00 | 40 | 2.00 | 20.00 | 21.50 | 18.25 |" in text
    assert "| dev_clean | restarts 0, folds 1 | 45.00 | 80.00 | 40 | 0.90 | 20.00 | - | - |" in text
    assert "on a GPU" not in text and "`afp rescore` on the same lattices" not in text  # no RTFs recorded


def test_tune_speed_gpu_run_is_its_own_section_with_the_real_time_factors(tmp_path):
    run = {"wall_s": 42.0, "search_s": 13.0, "line_searches": 68, "tuned_wer": 22.4, "cross_validated_wer": 23.8}
    rescore = {"wall_s": 30.37, "audio_s": 611.96, "rtf": 0.0496, "peak_rss_mib": 1665, "wer": 22.4}
    for name, env in (("tune_speed.json", {"torch": "2.x", "cuda": False}),
                      ("tune_speed_gpu.json", {"torch": "2.y", "cuda": True, "gpu": "NVIDIA H200", "cpu_count": 16})):
        _write(tmp_path / name, {
            "command": f"python -m bench.tune_speed --out {name}", "model": "models/librispeech", "limit": 100,
            "environment": env, "note": "",
            "sets": {"dev_clean": {"tune": run, "rescore_same": rescore, "rescore_untuned": {**rescore, "rtf": 0.0418},
                                   "rescore_held_out": {**rescore, "set": "dev_other", "rtf": 0.0448}}}})
    text = render(tmp_path)
    cpu, gpu = text.split("## Tuning time against rescoring time on a GPU")
    assert "NVIDIA H200, 16 CPU cores" in gpu and "torch 2.y" in gpu and "torch 2.x" in cpu
    for section in (cpu, gpu):
        assert "| dev_clean | weights tuned on dev_clean | 30.37 | 611.96 | 0.050 | 1665 | 22.40 |" in section
        assert "| dev_clean | untuned defaults | 30.37 | 611.96 | 0.042 | 1665 | 22.40 |" in section
        assert "| dev_other | weights tuned on dev_clean | 30.37 | 611.96 | 0.045 | 1665 | 22.40 |" in section


def test_tune_speed_every_lattice_runs_are_rows_before_and_after(tmp_path):
    run = {"wall_s": 42.0, "search_s": 13.0, "line_searches": 68, "tuned_wer": 22.4, "cross_validated_wer": 23.8}
    rescore = {"wall_s": 30.0, "audio_s": 600.0, "rtf": 0.05, "peak_rss_mib": 500, "wer": 22.4}
    every = {"lattices": 400, "rounds": 2, "speedup": 1.5,
             "before": {**rescore, "wall_s": 150.0, "audio_s": 2500.0, "rtf": 0.06, "walls_s": [150.0, 155.0]},
             "after": {**rescore, "wall_s": 100.0, "audio_s": 2500.0, "rtf": 0.04, "peak_rss_mib": 490,
                       "walls_s": [101.0, 100.0]}}
    _write(tmp_path / "tune_speed.json", {
        "command": "python -m bench.tune_speed --every-lattice", "model": "models/librispeech", "limit": 100,
        "before": "abc1234", "environment": {"torch": "2.x"}, "note": "",
        "sets": {"dev_clean": {"tune": run, "rescore_same": rescore, "rescore_every": every,
                               "rescore_held_out": {**rescore, "set": "dev_other"}}}})
    text = render(tmp_path)
    assert ("| dev_clean, all 400 | tuned on dev_clean's first 100: before (abc1234) | 150.00 | 2500.00 | 0.060 | 500 "
            "| 22.40 |") in text
    assert "| dev_clean, all 400 | tuned on dev_clean's first 100: after | 100.00 | 2500.00 | 0.040 | 490 | 22.40 |" in text
