"""examples/kaldi/afp_lmrescore.sh: a Kaldi decode directory rescored as steps/lmrescore*.sh do,
with run_jobs.sh standing in for run.pl (Kaldi is not installable here); the rescored archives
checked with this project's own Kaldi reader, their best paths against afp's results."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lattices.formats import read_lattice_file, write_lattices
from tests.factories import LATTICE_SYMBOLS, all_paths, random_lattice, saved_model

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "kaldi" / "afp_lmrescore.sh"
RUN_JOBS = REPO / "examples" / "kaldi" / "run_jobs.sh"
NUM_JOBS = 2  #: two jobs show the split (each is an afp process: seconds)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("m") / "model", cell="gru", mode="afp", rho=2)


@pytest.fixture(scope="module")
def decode_dir(tmp_path_factory):
    """A decode directory as Kaldi leaves it: num_jobs, lat.JOB.gz (binary CompactLattice
    archives, integer word ids) and the language directory's words.txt."""
    root = tmp_path_factory.mktemp("kaldi")
    lang, decode = root / "lang", root / "decode"
    lang.mkdir()
    decode.mkdir()
    (lang / "words.txt").write_text("".join(f"{w} {i}\n" for i, w in enumerate(LATTICE_SYMBOLS)))
    (decode / "num_jobs").write_text(f"{NUM_JOBS}\n")
    keys = {}
    for job in range(1, NUM_JOBS + 1):
        lattices = [random_lattice(job * 10 + k, key=f"spk{job}-utt{k}") for k in range(3)]
        (decode / f"lat.{job}.gz").write_bytes(gzip.compress(write_lattices(lattices, "kaldi", binary=True)))
        keys[job] = [lattice.key for lattice in lattices]
    return root, keys


def run_script(root: Path, *args: str) -> subprocess.CompletedProcess:
    afp = Path(sys.executable).parent / "afp"
    return subprocess.run(["bash", str(SCRIPT), "--cmd", str(RUN_JOBS), "--afp", str(afp), *args,
                           str(root / "lang"), str(root / "decode"), str(root / "rescore")],
                          capture_output=True, text=True, timeout=300, cwd=root)


def test_the_script_writes_kaldi_layout_that_kaldi_readers_take(decode_dir, model_dir):
    root, keys = decode_dir
    done = run_script(root, "--model", str(model_dir), "--lm-weight", "0.5")
    assert done.returncode == 0, done.stderr + done.stdout
    out = root / "rescore"
    assert (out / "num_jobs").read_text().strip() == str(NUM_JOBS)
    for job in range(1, NUM_JOBS + 1):
        assert (out / "log" / f"rescore.{job}.log").read_text().startswith("# ")
        summary = json.loads((out / f"summary.{job}.json").read_text())
        assert (summary["job"], summary["num_jobs"], summary["done"], summary["failed"]) == (job, NUM_JOBS, 1, 0)
        rescored = read_lattice_file(out / f"lat.{job}.gz", "kaldi", LATTICE_SYMBOLS)
        assert [lattice.key for lattice in rescored] == keys[job]
        assert all(lattice.meta["kaldi_word_ids"] for lattice in rescored)  # ids of words.txt, as Kaldi's tools want
        results = {r["key"]: r for r in map(json.loads, (out / f"lat.{job}.jsonl").read_text().splitlines())}
        text = {p[0]: p[1:] for p in map(str.split, (out / f"lat.{job}.text").read_text().splitlines())}
        for lattice in rescored:
            # lattice-best-path --acoustic-scale=S: the path of the largest graph + S * acoustic
            scale = results[lattice.key]["acoustic_scale"]
            best = max(all_paths(lattice), key=lambda p: float(lattice.graph[p[0]].sum() + lattice.final_graph[p[1]]
                                                               + scale * (lattice.acoustic[p[0]].sum()
                                                                          + lattice.final_acoustic[p[1]])))
            words = [lattice.symbols[w] for w in lattice.words[best[0]].tolist()]
            spoken = [w for w in words if w not in ("<eps>", "!SIL", "<s>", "</s>")]
            assert spoken == results[lattice.key]["best"]["words"], lattice.key
            assert text[lattice.key] == spoken


def test_a_second_run_skips_what_is_done_and_a_failed_job_is_named(decode_dir, model_dir):
    root, _ = decode_dir
    out = root / "rescore"
    if not (out / "num_jobs").exists():
        assert run_script(root, "--model", str(model_dir), "--lm-weight", "0.5").returncode == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("lat.*")}
    again = run_script(root, "--model", str(model_dir), "--lm-weight", "0.5")
    assert again.returncode == 0, again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("lat.*")} == before
    assert all(json.loads((out / f"summary.{j}.json").read_text())["skipped"] == 1 for j in range(1, NUM_JOBS + 1))
    failed = run_script(root, "--model", str(root / "no-such-model"), "--extra", "--force")
    assert failed.returncode != 0
    assert f"{NUM_JOBS} of {NUM_JOBS} jobs failed" in failed.stderr and "rescore.1.log" in failed.stderr
    assert "no-such-model" in (out / "log" / "rescore.1.log").read_text()
