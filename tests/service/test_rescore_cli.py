"""``afp rescore``: the batch command's contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from afp.compare import compare_answers
from lattices.formats import read_lattice_file
from service.cli import main
from tests.factories import saved_model, tiny_vocab

REPO = Path(__file__).resolve().parents[2]

# two Kaldi CompactLattices: "the cat sat" vs "a cat sat"; "the dog ran" (costs: graph,acoustic,)
ARCHIVE = """utt1
0 1 the 1.5,10,
0 1 a 1.0,12,
1 2 cat 0.5,8,
2 3 sat 0.5,9,
3 0,0,

utt2
0 1 the 1,10,
1 2 dog 2,11,
2 3 !SIL 0,3,
3 4 ran 1,7,
4

"""


@pytest.fixture()
def model_dir(tmp_path):
    return saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)


@pytest.fixture()
def archive(tmp_path):
    path = tmp_path / "lats.txt"
    path.write_text(ARCHIVE)
    return path


def run(capsys, argv, status=0):
    assert main(argv) == status
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")], captured


def test_json_lines_have_the_contract_fields(capsys, model_dir, archive):
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--format", "kaldi", f"ark,t:{archive}",
                           "--json", "--nbest", "3"])
    assert [r["key"] for r in rows] == ["utt1", "utt2"]
    for row in rows:
        for field in ("key", "best", "nbest", "expanded_states", "expanded_arcs", "pruned", "seconds"):
            assert field in row
        assert set(row["best"]) >= {"words", "score", "lm_logprob", "acoustic", "old_lm"}
        assert row["nbest"][0] == row["best"]
    assert {tuple(h["words"]) for h in rows[0]["nbest"]} == {("the", "cat", "sat"), ("a", "cat", "sat")}
    assert rows[1]["best"]["words"] == ["the", "dog", "ran"]  # !SIL is not a word for the LM
    assert rows[0]["pruned"] is None


def test_lm_logprob_is_what_afp_score_gives(capsys, tmp_path, model_dir, archive):
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), str(archive), "--json", "--nbest", "2"])
    hyps = [h for row in rows for h in row["nbest"]]
    text = tmp_path / "hyps.txt"
    text.write_text("".join(" ".join(h["words"]) + "\n" for h in hyps))
    scored, _ = run(capsys, ["score", "--model", str(model_dir), "--text", str(text), "--json"])
    for hyp, row in zip(hyps, scored):
        assert hyp["lm_logprob"] == pytest.approx(row["logprob"], abs=1e-4)


def test_bf16_score_precision_stays_within_a_thousandth_of_a_nat(capsys, model_dir, archive):
    common = ["rescore", "--model", str(model_dir), str(archive), "--json", "--nbest", "2"]
    fp32, _ = run(capsys, common)
    bf16, _ = run(capsys, [*common, "--score-precision", "bf16"])
    for a, b in zip(fp32, bf16):
        assert [h["words"] for h in a["nbest"]] == [h["words"] for h in b["nbest"]]
        for x, y in zip(a["nbest"], b["nbest"]):
            assert y["lm_logprob"] == pytest.approx(x["lm_logprob"], abs=4 * 1e-3)  # 4 words, 1e-3 each
    with pytest.raises(SystemExit):
        main([*common, "--score-precision", "fp16"])
    assert "--score-precision: invalid choice: 'fp16'" in capsys.readouterr().err


def test_plain_output_shards_and_several_lm_weights(capsys, model_dir, archive):
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), str(archive)])
    assert captured.out.splitlines()[1] == "utt2 the dog ran"
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), str(archive), "--shard", "1/2"])
    assert captured.out.splitlines() == ["utt2 the dog ran"]
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), str(archive), "--json",
                           "--lm-weight", "0", "--lm-weight", "2", "--old-lm-weight", "0"])
    assert [(r["key"], r["lm_weight"]) for r in rows] == [("utt1", 0.0), ("utt1", 2.0), ("utt2", 0.0), ("utt2", 2.0)]
    # with the LM weight 0 (and old LM weight 0) only acoustics count: "the" (10) beats "a" (12)
    assert rows[0]["best"]["words"] == ["the", "cat", "sat"]
    assert rows[0]["best"]["score"] == pytest.approx(-0.1 * (10 + 8 + 9), abs=1e-9)


def test_out_writes_rescored_archive(capsys, tmp_path, model_dir, archive):
    out = tmp_path / "rescored.txt"
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), str(archive), "--json", "--out", str(out)])
    lattices = read_lattice_file(out, "kaldi")
    assert [lat.key for lat in lattices] == ["utt1", "utt2"]
    assert [lat.num_arcs for lat in lattices] == [r["expanded_arcs"] for r in rows]
    assert lattices[0].meta["kaldi_type"] == "CompactLattice"


def test_stdin_and_pipe_specifiers(model_dir, archive):
    command = [sys.executable, "-m", "service.cli", "rescore", "--model", str(model_dir)]
    piped = subprocess.run([*command, "ark:-"], input=ARCHIVE, text=True, capture_output=True, cwd=REPO, timeout=120)
    assert piped.returncode == 0, piped.stderr
    shell = subprocess.run([*command, f"ark:cat {archive} |"], text=True, capture_output=True, cwd=REPO, timeout=120)
    assert shell.returncode == 0, shell.stderr
    assert piped.stdout == shell.stdout and piped.stdout.count("\n") == 2


def test_integer_ids_with_words_table(capsys, tmp_path, model_dir):
    vocab = tiny_vocab()
    table = tmp_path / "words.txt"
    words = ["<eps>"] + [w for w in vocab.words if w not in ("<s>", "</s>", "<unk>")]
    table.write_text("".join(f"{w} {i}\n" for i, w in enumerate(words)))
    ids = {w: i for i, w in enumerate(words)}
    lattice = tmp_path / "int.lat"
    lattice.write_text(f"u\n0 1 {ids['big']} 1,2,\n1 2 {ids['dog']} 1,2,\n2 0,0,\n\n")
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--words", str(table), str(lattice)])
    assert captured.out.strip() == "u big dog"


def test_malformed_input_names_line_and_field(capsys, tmp_path, model_dir):
    bad = tmp_path / "bad.txt"
    bad.write_text("utt1\n0 1 the 1.5,zz,\n1 0,0,\n")
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--format", "kaldi", str(bad)], status=2)
    assert captured.err.startswith("afp: error:") and "bad.txt:2" in captured.err and "Traceback" not in captured.err


def test_budget_overflow_reports_and_goes_on(capsys, model_dir, archive):
    # utt1 expands to 6 arcs with rho=2 ([the cat], [a cat] stay apart), utt2 to 4
    rows, captured = run(capsys, ["rescore", "--model", str(model_dir), str(archive), "--json", "--max-arcs", "5",
                                  "--no-auto-prune"], status=2)
    assert [r["key"] for r in rows] == ["utt1", "utt2"]
    assert "budget of 5 arcs" in rows[0]["error"] and rows[1]["expanded_arcs"] == 4
    assert "1 of 2 lattice(s) could not be rescored" in captured.err


def test_torchrun_rank_chooses_the_shard_and_suffixes_out(tmp_path, model_dir, archive):
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO), "RANK": "1", "WORLD_SIZE": "2"}
    out = tmp_path / "rescored.txt"
    done = subprocess.run([sys.executable, "-m", "service.cli", "rescore", "--model", str(model_dir), str(archive),
                           "--out", str(out)], env=env, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["utt2 the dog ran"]
    assert [lat.key for lat in read_lattice_file(tmp_path / "rescored.txt.1", "kaldi")] == ["utt2"]


def test_workers_rescore_in_input_order_with_the_same_results(capsys, tmp_path, model_dir):
    """--workers 4 (worker processes on the CPU) gives what --workers 1 gives, lattice for lattice
    in input order, a failing lattice included: the same words and the same scores, bit for bit."""
    blocks = []
    for i in range(24):
        blocks.append(f"u{i:02d}\n0 1 the {1 + i % 3},{10 + i},\n0 1 a 1.0,12,\n1 2 cat 0.5,{8 + i % 5},\n"
                      f"2 3 {'sat' if i % 2 else 'ran'} 0.5,9,\n3 0,0,\n")
    blocks.append("wide\n" + "".join(f"0 1 {w} 1,1,\n" for w in ("the", "a", "cat", "dog", "sat", "ran")) +
                  "".join(f"1 2 {w} 1,1,\n" for w in ("the", "a", "cat", "dog", "sat", "ran")) + "2 0,0,\n")
    archive = tmp_path / "many.txt"
    archive.write_text("\n".join(blocks) + "\n")
    argv = ["rescore", "--model", str(model_dir), str(archive), "--json", "--nbest", "2", "--max-arcs", "30"]
    one, _ = run(capsys, [*argv, "--workers", "1"], status=2)
    four, captured = run(capsys, [*argv, "--workers", "4", "--batch-pairs", "64"], status=2)
    assert [r["key"] for r in four] == [r["key"] for r in one] == [f"u{i:02d}" for i in range(24)] + ["wide"]
    assert "error" in four[-1] and "1 of 25 lattice(s) could not be rescored" in captured.err
    found = compare_answers(one, four, ignore={"seconds", "timing"})
    assert found.same and found.largest == 0.0, found.difference  # bit for bit


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "all", ""])
def test_a_bad_workers_value_is_a_clear_error(capsys, model_dir, archive, value):
    with pytest.raises(SystemExit):
        main(["rescore", "--model", str(model_dir), str(archive), "--workers", value])
    err = capsys.readouterr().err
    assert f"argument --workers: {value!r}: expected a positive integer or 'auto'" in err


def test_a_shard_skips_the_other_shards_lattices_unparsed(tmp_path):
    """A malformed lattice in another shard's share is never parsed (so never an error here);
    the running index goes on across inputs."""
    from afp.jobs import iter_lattices

    broken = ARCHIVE.replace("utt2\n0 1 the 1,10,", "utt2\n0 1 the not-a-weight")
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text(broken)
    second.write_text(ARCHIVE.replace("utt", "more"))
    assert [lat.key for lat in iter_lattices([str(first), str(second)], "kaldi", shard=(0, 2))] == ["utt1", "more1"]
    with pytest.raises(ValueError, match="utt2"):
        list(iter_lattices([str(first), str(second)], "kaldi", shard=(1, 2)))


def test_a_shard_of_a_binary_archive_decodes_only_its_own_lattices(tmp_path):
    """A lattice of another shard in a binary archive is walked, not decoded: a word id outside
    the symbol table there is no error for this shard (it is for the shard that owns it)."""
    from lattices.formats import read_lattices, write_lattices
    from afp.jobs import iter_lattices

    lattices = read_lattices(ARCHIVE, "kaldi")
    table = lattices[0].symbols
    data = write_lattices(lattices, "kaldi", binary=True)
    short = table[: max(int(lattices[1].words.max()), 1)]  # utt2's last word is outside this table
    assert int(lattices[1].words.max()) >= len(short) and int(lattices[0].words.max()) < len(short)
    archive = tmp_path / "lat.ark"
    archive.write_bytes(data)
    assert [lat.key for lat in iter_lattices([f"ark:{archive}"], "kaldi", short, shard=(0, 2))] == ["utt1"]
    with pytest.raises(ValueError, match="symbol table"):
        list(iter_lattices([f"ark:{archive}"], "kaldi", short, shard=(1, 2)))


def test_a_lattice_that_cannot_be_written_is_left_out_and_the_job_goes_on(capsys, tmp_path, model_dir):
    """``--out ark:`` with a --words table that lacks one lattice's word: that lattice fails (named,
    left out of every output), the others are written; the archive reads back."""
    words = tmp_path / "words.txt"
    words.write_text("".join(f"{w} {i}\n" for i, w in enumerate(["<eps>", "the", "cat", "sat", "a", "!SIL", "ran"])))
    archive = tmp_path / "lats.txt"
    archive.write_text(ARCHIVE)  # utt2 has "dog", which the table lacks
    out, text = tmp_path / "out.ark", tmp_path / "text"
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--words", str(words), "--out", f"ark:{out}",
                               "--text-dir", str(text), str(archive)], status=2)
    assert captured.out.splitlines() == ["utt1 the cat sat", "utt2\tERROR"]
    assert "lattice 'utt2': field words: word 'dog' has no id in the symbol table" in captured.err
    assert "1 of 2 lattice(s) could not be rescored or written" in captured.err
    assert [lat.key for lat in read_lattice_file(out, "kaldi", tuple(words.read_text().split()[::2]))] == ["utt1"]
    assert (text / "0.25" / "text").read_text() == "utt1 the cat sat\n"


def test_an_input_with_no_lattice_warns(capsys, tmp_path, model_dir):
    empty = tmp_path / "empty.ark"
    empty.write_bytes(b"")
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), f"ark:{empty}"])
    assert captured.out == "" and f"afp: warning: no lattice was read from ark:{empty}" in captured.err


def test_text_output_shows_the_nbest_and_says_where_posteriors_go(capsys, model_dir, archive):
    """--nbest N in the text output: the best as ``key words``, the others as Kaldi's n-best keys
    ``key-2`` ... (the same hypotheses as --json); --posteriors says they are in --json and --ctm."""
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--nbest", "3", str(archive)])
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--nbest", "3", "--posteriors", str(archive)])
    expected = []
    for row in rows:
        expected.append(" ".join([row["key"], *row["best"]["words"]]))
        expected += [" ".join([f"{row['key']}-{rank}", *h["words"]]) for rank, h in enumerate(row["nbest"][1:], 2)]
    assert captured.out.splitlines() == expected and len(expected) > len(rows)
    assert captured.err.count("the word posteriors are in --json output") == 1
