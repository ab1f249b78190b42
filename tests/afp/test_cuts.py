"""``afp rescore-cuts``: lhotse CutSets naming their lattices, hypotheses written back, WER."""

from __future__ import annotations

import json

import pytest

from service.cli import main
from tests.factories import saved_model
from tests.service.test_rescore_cli import ARCHIVE


def make_cuts(tmp_path, references):
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

    (tmp_path / "lats").mkdir()
    (tmp_path / "lats" / "archive.txt").write_text(ARCHIVE)
    recordings = RecordingSet.from_recordings(
        [Recording(id=f"rec{i}", sources=[], sampling_rate=16000, num_samples=16000, duration=1.0) for i in (1, 2)])
    supervisions = SupervisionSet.from_segments(
        [SupervisionSegment(id=f"sup{i}", recording_id=f"rec{i}", start=0, duration=1.0, text=text)
         for i, text in zip((1, 2), references)])
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions)
    keys = iter(["utt1", "utt2"])
    cuts = CutSet.from_cuts(c.with_custom("lattice", "lats/archive.txt").with_custom("lattice_key", next(keys))
                            for c in cuts)
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    return tmp_path / "cuts.jsonl.gz"


def test_rescore_cuts_writes_hypotheses_and_wer(tmp_path, capsys):
    from lhotse import load_manifest

    model = saved_model(tmp_path / "model", cell="lstm", mode="afp", rho=2)
    cuts = make_cuts(tmp_path, ["the cat sat", "the dog sat"])
    # LM weight 0: only acoustics count, so the hypotheses are "the cat sat" and "the dog ran"
    assert main(["rescore-cuts", "--model", str(model), "--cuts", str(cuts), "--out", str(tmp_path / "out.jsonl.gz"),
                 "--lm-weight", "0", "--old-lm-weight", "0"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cuts"] == 2 and summary["ref_words"] == 6 and summary["failed"] == 0
    assert summary["substitutions"] == 1 and summary["wer"] == pytest.approx(100 / 6)  # percent, as afp tune
    out = list(load_manifest(tmp_path / "out.jsonl.gz"))
    assert [c.custom["hypothesis"] for c in out] == ["the cat sat", "the dog ran"]
    assert out[0].custom["rescore"]["expanded_arcs"] == 6 and "lm_logprob" in out[0].custom["rescore"]


def test_cut_without_lattice_is_a_clear_error(tmp_path, capsys):
    from lhotse import CutSet, load_manifest

    model = saved_model(tmp_path / "model")
    cuts = make_cuts(tmp_path, ["a", "b"])
    broken = CutSet.from_cuts(c.with_custom("lattice", "lats/missing.txt") for c in load_manifest(cuts))
    broken.to_file(tmp_path / "broken.jsonl.gz")
    assert main(["rescore-cuts", "--model", str(model), "--cuts", str(tmp_path / "broken.jsonl.gz"),
                 "--out", str(tmp_path / "o.jsonl.gz")]) == 2
    err = capsys.readouterr().err
    assert "missing.txt" in err and "no such file" in err and "rec1" in err
    out = list(load_manifest(tmp_path / "o.jsonl.gz"))  # every cut is written, each with its error
    assert all("no such file" in c.custom["rescore"]["error"] and "hypothesis" not in c.custom for c in out)


def test_rescore_cuts_goes_through_the_rescore_job(tmp_path, capsys):
    """An oversized lattice fails its cut only; every LM weight and --old-lm are used; --workers
    gives the same answer; the hypotheses equal afp rescore's on the same lattices."""
    from lhotse import load_manifest

    from tests.lm.test_ngram import HAND

    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    cuts = make_cuts(tmp_path, ["the cat sat", "the dog sat"])
    arpa = tmp_path / "G.arpa"
    arpa.write_text(HAND)
    common = ["--model", str(model), "--lm-weight", "0.5", "--lm-weight", "1", "--old-lm", str(arpa),
              "--old-lm-weight", "0.5"]
    assert main(["rescore-cuts", *common, "--cuts", str(cuts), "--out", str(tmp_path / "a.jsonl.gz")]) == 0
    one = json.loads(capsys.readouterr().out)
    assert main(["rescore", *common, "--json", str(tmp_path / "lats" / "archive.txt")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    out = list(load_manifest(tmp_path / "a.jsonl.gz"))
    assert [c.custom["hypotheses"] for c in out] == [
        {f"{r['lm_weight']:g}": " ".join(r["best"]["words"]) for r in rows if r["key"] == key} for key in ("utt1", "utt2")]
    assert [r["lm_weight"] for r in one["per_lm_weight"]] == [0.5, 1.0]
    assert main(["rescore-cuts", *common, "--workers", "2", "--cuts", str(cuts), "--out", str(tmp_path / "b.jsonl.gz")]) == 0
    two = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in two.items() if k != "out"} == {k: v for k, v in one.items() if k != "out"}
    # an expansion budget that utt1 (two first words) exceeds and utt2 does not
    assert main(["rescore-cuts", "--model", str(model), "--max-arcs", "4", "--no-auto-prune", "--cuts", str(cuts),
                 "--out", str(tmp_path / "c.jsonl.gz")]) == 2
    captured = capsys.readouterr()
    summary = json.loads(captured.out.splitlines()[0])
    assert summary["failed"] == 1 and summary["cuts"] == 2 and summary["sentences"] == 1
    assert "exceeds the budget" in captured.err and "1 of 2 cut(s) could not be rescored" in captured.err
    out = list(load_manifest(tmp_path / "c.jsonl.gz"))
    assert "exceeds the budget" in out[0].custom["rescore"]["error"] and "hypothesis" in out[1].custom
