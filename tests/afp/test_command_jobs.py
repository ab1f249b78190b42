"""The library calls behind the command line (:mod:`afp.scoring`, :mod:`afp.text_jobs`,
:mod:`afp.rescore_job`, :mod:`afp.tune_job`, :func:`afp.wer.compare_systems`): their values, and
the command printing exactly what they return."""

from __future__ import annotations

import json
import math

import pytest

from afp.options import OptionsError
from afp.outputs import OutputOptions
from afp.rescore_job import RescoreJob, RescoreSetup, run_rescore_cuts_job, run_rescore_job
from afp.scoring import ModelSpec
from afp.text_jobs import mix_models, model_info, perplexity, score_text
from afp.tune_job import (TuneJob, TuneJobError, comparison_text, grid_report_lines, joint_report_lines, parse_values,
                          run_tune_job)
from afp.wer import ReferencesError, compare_systems
from lm.checkpoint import load_checkpoint
from lm.scorer import LMScorer, score_sentences
from service.cli import main
from tests.afp.test_cuts import make_cuts
from tests.factories import write_text
from tests.service.test_rescore_cli import ARCHIVE

SENTENCES = [["the", "cat", "sat"], ["a", "dog", "ran", "on", "the", "mat"], ["the", "zebra", "sat"]]
REFS = "utt1 the cat sat\nutt2 the dog ran\n"


@pytest.fixture()
def text(tmp_path):
    return write_text(tmp_path / "text.txt", SENTENCES)


def printed(capsys) -> str:
    return capsys.readouterr().out


def test_perplexity_is_the_models_own_and_what_afp_ppl_prints(model_dir, text, capsys):
    result = perplexity(ModelSpec(model=str(model_dir), device="cpu"), str(text))
    scorer = LMScorer(load_checkpoint(model_dir))
    values = score_sentences(scorer, SENTENCES)
    logprob = sum(float(v.sum()) for v in values)
    tokens = sum(v.numel() for v in values)
    as_json = result.to_json()
    assert as_json["tokens"] == tokens == 3 + 6 + 3 + 3 and as_json["sentences"] == 3 and as_json["oov"] == 1
    assert as_json["ppl"] == pytest.approx(math.exp(-logprob / tokens), rel=1e-5) and "pseudo" not in as_json
    assert result.summary() == (f"ppl {as_json['ppl']:.2f} over 15 tokens in 3 sentences (1 unknown words scored as "
                                f"{scorer.loaded.vocab.unk})")
    assert main(["ppl", "--model", str(model_dir), "--device", "cpu", "--text", str(text), "--json"]) == 0
    assert json.loads(printed(capsys)) == pytest.approx(as_json)
    assert main(["ppl", "--model", str(model_dir), "--device", "cpu", "--text", str(text)]) == 0
    assert printed(capsys) == result.summary() + "\n"


def test_score_text_streams_every_line_with_its_token_logprobs(model_dir, tmp_path, capsys):
    path = tmp_path / "lines.txt"
    path.write_text("the cat sat\n\na dog ran\n")
    seen, notes = [], []
    total = score_text(ModelSpec(model=str(model_dir), device="cpu"), str(path),
                       lambda words, values: seen.append((list(words), values)), note=notes.append)
    expected = score_sentences(LMScorer(load_checkpoint(model_dir)), [["the", "cat", "sat"], [], ["a", "dog", "ran"]])
    assert [w for w, _ in seen] == [["the", "cat", "sat"], [], ["a", "dog", "ran"]] and notes == []
    for (_, values), want in zip(seen, expected):
        assert isinstance(values, list) and values == pytest.approx(want.tolist(), abs=1e-6)
    assert total.sentences == 3 and total.tokens == 4 + 1 + 4
    assert main(["score", "--model", str(model_dir), "--device", "cpu", "--text", str(path)]) == 0
    assert printed(capsys).splitlines() == [f"{sum(v):.4f}\t{' '.join(w)}" for w, v in seen]


def test_model_info_is_the_models_description_with_its_score_precision(model_dir, capsys):
    info = model_info(ModelSpec(model=str(model_dir), device="cpu", score_precision="bf16"))
    assert info == {**load_checkpoint(model_dir).info(), "score_precision": "bf16"}
    assert info["rho"] == 2 and info["cell"] == "gru"
    assert model_info(ModelSpec(model=str(model_dir), device="cpu"))["score_precision"] == "fp32"  # auto on a CPU
    assert main(["info", "--model", str(model_dir), "--device", "cpu", "--score-precision", "bf16", "--json"]) == 0
    assert json.loads(printed(capsys)) == json.loads(json.dumps(info))


def test_model_spec_mixes_interpolated_models_and_refuses_bad_weights(model_dir):
    spec = ModelSpec(model=str(model_dir), device="cpu", interpolate=(f"{model_dir}:0.25",))
    loaded = spec.load()
    mixed, plain = spec.scorer(loaded), ModelSpec(model=str(model_dir), device="cpu").scorer(loaded)
    assert mixed.precision == "per part (a mixture)" and plain.precision == "fp32"
    with pytest.raises(ValueError, match="--interpolate weights sum to 1.2"):
        ModelSpec(model=str(model_dir), interpolate=(f"{model_dir}:0.6", f"{model_dir}:0.6")).scorer(loaded)


def test_mix_models_writes_a_mixture_with_the_em_weights(model_dir, text, tmp_path):
    summary = mix_models([str(model_dir), str(model_dir)], str(text), str(tmp_path / "mix"), device="cpu")
    assert summary["out"] == str(tmp_path / "mix") and summary["models"] == [str(model_dir)] * 2
    assert summary["weights"] == pytest.approx([0.5, 0.5]) and summary["sentences"] == 3  # equal parts: no move
    assert summary["mixture_ppl"] == pytest.approx(summary["part_ppl"][0], rel=1e-5)
    written = json.loads((tmp_path / "mix" / "mixture.json").read_text())
    assert [p["weight"] for p in written["parts"]] == pytest.approx([0.5, 0.5])


def test_the_setup_builds_options_and_names_flags_beside_a_weights_file(tmp_path):
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"format": "afp-weights/1", "lm_weight": 0.7, "old_lm_weight": 0.2,
                                   "word_penalty": 1.5}))
    options = RescoreSetup(weights=str(weights)).rescore_options(unk_default=-4.0)
    assert options.lm_weights == (0.7,) and options.old_lm_weight == 0.2 and options.word_penalty == 1.5
    assert options.unk_penalty == -4.0 and options.match_case is not False
    given = RescoreSetup(options={"lm_weight": [0.3, 0.6], "nbest": 3, "max_arcs": 99, "match_case": False})
    options = given.rescore_options(unk_default=-2.0, return_lattice=True)
    assert options.lm_weights == (0.3, 0.6) and options.nbest == 3 and options.max_expanded_arcs == 99
    assert options.return_lattice and options.match_case is False and options.unk_penalty == -2.0
    assert RescoreSetup().untuned and not given.untuned and not RescoreSetup(weights=str(weights)).untuned
    both = RescoreSetup(weights=str(weights), options={"lm_weight": [0.3], "decode": "mbr", "nbest": 2})
    with pytest.raises(OptionsError, match=f"^--weights {weights} sets the weights: give it or --lm-weight, --decode, "
                                           "not both$"):
        both.rescore_options()


def test_a_rescoring_job_writes_its_outputs_and_reports_failures(model_dir, tmp_path, capsys):
    archive = tmp_path / "lats.txt"
    archive.write_text(ARCHIVE)
    warnings, failures = [], []
    setup = RescoreSetup(model=ModelSpec(model=str(model_dir), device="cpu"),
                         options={"lm_weight": [0.0], "old_lm_weight": 0.0})
    job = RescoreJob(setup, inputs=(str(archive),), outputs=OutputOptions(text_dir=str(tmp_path / "td")))
    summary = run_rescore_job(job, warn=warnings.append, on_failure=failures.append)
    assert (summary.seen, summary.failed) == (2, 0) and failures == [] and warnings == []
    # LM weight 0 and old-LM weight 0: acoustics alone choose
    assert (tmp_path / "td" / "0" / "text").read_text() == "utt1 the cat sat\nutt2 the dog ran\n"
    assert printed(capsys) == "utt1 the cat sat\nutt2 the dog ran\n"
    small = RescoreJob(RescoreSetup(model=setup.model, options={"max_arcs": 2, "auto_prune": False}),
                       inputs=(str(archive),), shard="1/2")
    summary = run_rescore_job(small, warn=warnings.append, on_failure=failures.append)
    assert (summary.seen, summary.failed) == (1, 1) and [f.key for f in failures] == ["utt2"]
    assert printed(capsys) == "utt2\tERROR\n" and warnings == []  # nothing rescored: no untuned-weights warning
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    run_rescore_job(RescoreJob(setup, inputs=(str(empty),)), warn=warnings.append)
    assert warnings[-1] == f"no lattice was read from {empty}"


def test_a_cuts_job_is_the_rescore_cuts_summary(model_dir, tmp_path):
    cuts = make_cuts(tmp_path, ["the cat sat", "the dog sat"])
    setup = RescoreSetup(model=ModelSpec(model=str(model_dir), device="cpu"),
                         options={"lm_weight": [0.0], "old_lm_weight": 0.0})
    summary = run_rescore_cuts_job(setup, str(cuts), str(tmp_path / "out.jsonl.gz"))
    assert summary["cuts"] == 2 and summary["failed"] == 0 and summary["ref_words"] == 6
    assert summary["substitutions"] == 1 and summary["wer"] == pytest.approx(100 / 6)


def test_grid_values_parse_as_lists_and_inclusive_ranges():
    assert parse_values("0:1:0.25", "--lm-weights") == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert parse_values("0.1:0.3:0.1", "--x") == (0.1, 0.2, 0.3)  # rounded: no 0.30000000000000004
    assert parse_values("1, 2,,3", "--x") == (1.0, 2.0, 3.0)
    for bad in ("1:0:0.5", "0:1:0", "a,b", "0:1"):
        with pytest.raises(TuneJobError, match=f"^--word-penalties {bad!r}: expected numbers"):
            parse_values(bad, "--word-penalties")
    job = TuneJob(RescoreSetup(), inputs=("x",), refs="r")
    assert not job.grid_mode and TuneJob(RescoreSetup(), inputs=("x",), refs="r", mbr=True).grid_mode
    grid = TuneJob(RescoreSetup(), inputs=("x",), refs="r", lm_weights="0,1").grid_of()
    assert grid.lm_weights == (0.0, 1.0) and grid.old_lm_weights == (0.0, 0.5, 1.0) and grid.word_penalties == (0.0,)


def test_a_grid_tuning_job_finds_the_acoustic_choice_and_saves_it(model_dir, tmp_path, capsys):
    archive = tmp_path / "lats.txt"
    archive.write_text(ARCHIVE)
    refs = tmp_path / "refs.txt"
    refs.write_text(REFS)
    setup = RescoreSetup(model=ModelSpec(model=str(model_dir), device="cpu"))
    job = TuneJob(setup, inputs=(str(archive),), refs=str(refs), lm_weights="0", old_lm_weights="0",
                  save=str(tmp_path / "w.json"), progress=False)
    report = run_tune_job(job)
    assert report["utterances"] == 2 and report["ref_words"] == 6 and report["best"]["wer"] == 0.0
    assert [(r["lm_weight"], r["old_lm_weight"], r["errors"]) for r in report["grid"]] == [(0.0, 0.0, 0)]
    saved = json.loads((tmp_path / "w.json").read_text())
    assert saved["lm_weight"] == 0.0 and saved["old_lm_weight"] == 0.0 and saved["tuned"]["grid"] is True
    lines = grid_report_lines(report)
    # lattices (not n-best lists): no oracle WER
    assert lines[0] == f"2 utterances, 6 reference words; first pass WER {report['first_pass_wer']:.2f}%"
    assert lines[2].split() == ["0", "0", "0", "0", "0.00"] and lines[3].startswith("best: --lm-weight 0 ")
    assert main(["tune", "--model", str(model_dir), "--device", "cpu", str(archive), "--refs", str(refs),
                 "--lm-weights", "0", "--old-lm-weights", "0"]) == 0
    assert printed(capsys).splitlines() == lines


def test_the_report_text_of_a_joint_search():
    comparison = {"wer_a": 10.0, "wer_b": 8.0, "difference": -2.0, "mapsswe": {"p": 0.01234},
                  "bootstrap": {"low": -3.0, "high": -1.0, "poi": 0.99}, "significant": True}
    assert comparison_text(comparison) == ("10.00% -> 8.00% (-2.00), matched pairs p=0.0123, bootstrap 95% "
                                           "[-3.00, -1.00], P(better)=0.990 (significant)")
    report = {"utterances": 3, "ref_words": 20, "first_pass_wer": 10.0, "oracle_wer": None, "ignore_case": True,
              "start": {"point": {"lm_weight": 0.0}, "wer": 10.0, "reproduces_first_pass": 1.0},
              "best": {"lm_weight": 0.5, "score:ctc": 0.25, "wer": 8.0, "errors": {}, "against_first_pass": comparison},
              "chosen": {"point": {"lm_weight": 0.5}, "reason": "the tuned weights", "is_first_pass": False},
              "at_edge": ["lm_weight"], "line_searches": 7, "seconds": 1.25, "evaluations_per_second": 40.0,
              "method": "MERT", "saved": "w.json"}
    lines = joint_report_lines(report)
    assert lines[0].startswith("note: the hypotheses are in another case")
    assert lines[1] == "3 utterances, 20 reference words; first pass WER 10.00%"
    assert lines[2] == ("start, the first pass's own weights (reproducing 100.0% of its choices): WER 10.00%  "
                        "[lm_weight 0]")
    assert lines[3] == "tuned: WER 8.00%  [lm_weight 0.5 ctc 0.25]"
    assert lines[5:] == ["chosen: the tuned weights  [lm_weight 0.5]",
                         "warning: lm_weight ended at the edge of its range: the best value may lie beyond",
                         "7 line searches in 1.2 s (40.0 evaluations/s; MERT)",
                         "saved w.json: afp rescore --weights w.json ... applies them"]


def test_compare_systems_scores_each_file_and_tests_the_differences(tmp_path, capsys):
    refs = tmp_path / "refs.txt"
    refs.write_text(REFS)
    same, worse = tmp_path / "a.txt", tmp_path / "b.txt"
    same.write_text(REFS)
    worse.write_text("utt1 the cat\nutt2 a dog ran on\n")
    report = compare_systems(str(refs), [str(same), str(worse)], seed=3)
    rows = report.rows()
    assert rows[0]["wer"] == 0.0 and rows[1]["wer"] == pytest.approx(100 * 3 / 6)
    assert (rows[1]["deletions"], rows[1]["substitutions"], rows[1]["insertions"]) == (1, 1, 1)
    assert rows[1]["against_first"]["wer_b"] == pytest.approx(50.0) and "against_first" not in rows[0]
    lines = report.lines()
    assert lines[0].split() == ["WER", "sub", "del", "ins", "ref", "words", "utts", "hypotheses"]
    assert lines[-1].startswith(f"{worse} against {same}: 0.00% -> 50.00% (+50.00)")
    assert main(["wer", "--refs", str(refs), str(same), str(worse), "--seed", "3", "--json"]) == 0
    assert json.loads(printed(capsys)) == json.loads(json.dumps(report.to_json()))
    other = tmp_path / "c.txt"
    other.write_text("utt1 the cat sat\n")
    with pytest.raises(ReferencesError, match="hold different utterances"):
        compare_systems(str(refs), [str(same), str(other)])
