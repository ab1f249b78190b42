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
    assert text.count("Not run yet.") == 1  # the bundled models; the other sections are left out
    assert "Retired studies" not in text


def test_retired_studies_are_appended_as_they_were_frozen(tmp_path):
    """The frozen Markdown of the retired studies follows the live sections unchanged, without its comment."""
    (tmp_path / "retired.md").write_text("<!-- how this was made -->\n\n## A study (retired)\n\n| a |\n|---|\n| 1 |\n")
    text = render(tmp_path)
    assert text.endswith("# Retired studies\n\nTheir scripts are gone; each heading names the commit that last ran "
                         "it, where its code is.\n\n## A study (retired)\n\n| a |\n|---|\n| 1 |\n")
    assert "how this was made" not in text


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
    for study in ("ptb", "ptb-bf16", "wikitext2-bf16"):  # retired: frozen in retired.md
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
    wer = _json("wer_librispeech.json")  # retired: frozen in retired.md
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


def test_every_section_names_a_script_that_is_there_or_says_when_it_was_retired():
    """A heading's ``python -m bench.NAME`` (or ``afp`` command) exists as ``bench/NAME.py``, unless the heading says it is retired and names a commit that wrote results and
    still had the script."""
    import re
    import subprocess

    repo = RESULTS.parents[1]
    headings = [line for line in _readme().splitlines() if line.startswith("## ") and "`afp " not in line]
    named = [(re.search(r"`python -m bench\.(\w+)", h), h) for h in headings]
    assert all(found for found, _ in named), [h for found, h in named if not found]
    retired: dict[str, str] = {}  # "COMMIT:bench/NAME.py" -> its heading
    for found, heading in named:
        script = repo / "bench" / f"{found.group(1)}.py"
        commit = re.search(r"retired: last run at commit ([0-9a-f]{7,40})\)$", heading)
        if commit is None:
            assert script.is_file() or (repo / "bench" / found.group(1)).is_dir(), heading
            continue
        assert not script.exists(), heading
        retired[f"{commit.group(1)}:bench/{found.group(1)}.py"] = heading
    assert len(retired) >= 10
    if subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        return  # no history to check against (an exported tree)
    listed = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch-check"], input="\n".join(retired) + "\n",
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line.endswith(" missing") for line in listed] == [False] * len(retired), list(zip(retired, listed))
    commits = sorted({name.split(":")[0] for name in retired})  # each wrote results: git lists it for bench/results
    wrote = subprocess.run(["git", "-C", str(repo), "log", "--no-walk=unsorted", "--format=%H", *commits, "--",
                            "bench/results"], capture_output=True, text=True, check=True).stdout.split()
    assert [c for c in commits if not any(full.startswith(c) for full in wrote)] == []


def test_throughput_section_appears_once_its_json_exists(tmp_path):
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
    text = render(tmp_path)
    assert "### cuda: NVIDIA H100, torch 2.x; GRU 256, batch 32 x 35 tokens, bf16" in text
    assert "| V | mode | softmax | tokens/s | x exact full (tokens/s) | peak CUDA MiB | peak RSS MiB |" in text
    assert "| 200,000 | exact (BPTT) | full | 4000 | 1.00 | 2048.00 | 500.00 |" in text
    assert "| 200,000 | AFP-4 | adaptive | 52000 | 13.00 | 256.00 | 500.00 |" in text
    assert "| 10,000 | AFP-4 | full | 9000 | - |" in text  # no exact full measured at this V
    assert "| adaptive | 30000 | 240000 | 6.00 | 90.00 | - |" in text  # 8 targets per context; no RSS given
    assert text.count("Not run yet.") == 1  # as with no JSON at all: this section never says it


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
    assert text.count("Not run yet.") == 1
