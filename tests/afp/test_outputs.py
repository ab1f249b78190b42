"""``afp rescore``'s outputs (afp/outputs.py, afp/wspec.py): each writer's text on tiny
lattices, Kaldi archives (text, binary, pipes) read back, CTM times, per-word posteriors, errors."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
import torch

from lattices.formats import read_lattice_file, read_lattices
from lattices.formats.htk import read_htk
from lattices.formats.kaldi import read_kaldi
from lattices.rescore import RescoreOptions, rescore
from lattices.times import NoWordTimes, path_word_times
from lm.checkpoint import LoadedModel
from lm.scorer import LMScorer
from service.cli import main
from afp.outputs import ctm_lines, nbest_text_lines, transcript_line
from afp.wspec import OutputError, WriteSpec
from tests.factories import replacing_options, make_model, tiny_vocab

# Kaldi CompactLattices with transition ids (one per frame). With --lm-weight 0 only acoustics
# count (x 0.1): utt1's best is "the cat sat" (10+8+9), then "a cat sat" (12+8+9); utt2's
# only path is "the dog !SIL ran", whose !SIL and <eps> arcs are no words.
# utt1 frames: the 0-1 (2), cat 2-4 (3), sat 5 (1); utt2: the 0, <eps> 1, dog 2-3, !SIL 4-6, ran 7.
ARCHIVE = """utt1
0 1 the 1.5,10,1_2
0 1 a 1.0,12,1_2_3
1 2 cat 0.5,8,4_4_4
2 3 sat 0.5,9,5
3 0,0,

utt2
0 1 the 1,10,1
1 2 <eps> 0,1,7
2 3 dog 2,11,2_2
3 4 !SIL 0,3,3_3_3
4 5 ran 1,7,4
5

"""
WORDS = ("<eps>", "the", "a", "cat", "sat", "dog", "ran", "!SIL")

# HTK SLF, words on nodes, lmscale 10 (acoustic scale 0.1): "the" (-10) beats "a" (-12) at LM weight 0.
# Best path: !NULL(0.00) -> the (0.00-0.30) -> cat (0.30-0.80) -> !SIL (skipped).
SLF = """VERSION=1.1
UTTERANCE=h1
lmscale=10.0
N=5 L=5
I=0 t=0.00 W=!NULL
I=1 t=0.30 W=the
I=2 t=0.35 W=a
I=3 t=0.80 W=cat
I=4 t=1.00 W=!SIL
J=0 S=0 E=1 a=-10 l=-1
J=1 S=0 E=2 a=-12 l=-1
J=2 S=1 E=3 a=-8 l=-1
J=3 S=2 E=3 a=-8 l=-1
J=4 S=3 E=4 a=-3 l=0
"""


@pytest.fixture(scope="module")
def scorer():
    vocab = tiny_vocab()
    model = make_model(vocab, cell="gru", mode="afp", rho=2)
    return LMScorer(LoadedModel(model.config, vocab, model))


@pytest.fixture()
def archive(tmp_path):
    path = tmp_path / "lats.txt"
    path.write_text(ARCHIVE)
    return path


@pytest.fixture()
def words_txt(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("".join(f"{w} {i}\n" for i, w in enumerate(WORDS)))
    return path


def results(scorer, text=ARCHIVE, **options):
    options = {"lm_weights": (0.0,), **options}
    lattices = read_kaldi(text, WORDS) if "\nJ=" not in text else [read_htk(text)]
    return [rescore(lattice, scorer, replacing_options(**options))[0] for lattice in lattices]


def afp(capsys, argv, status=0):
    assert main(["rescore", *argv]) == status
    return capsys.readouterr()


def assert_clean_error(captured, *parts):
    errors = "\n".join(line for line in captured.err.splitlines() if not line.startswith("afp: warning:"))
    assert errors.startswith("afp: error:") and "Traceback" not in captured.err, captured.err
    for part in parts:
        assert part in captured.err, captured.err


# ------------------------------------------------------------------------------ line formats
def test_transcripts_and_nbest_text_are_kaldi_lines(scorer):
    utt1, utt2 = results(scorer, nbest=3)
    assert transcript_line(utt1.key, utt1.best.words) == "utt1 the cat sat"
    assert transcript_line("empty", []) == "empty"
    assert nbest_text_lines(utt1) == ["utt1-1 the cat sat", "utt1-2 a cat sat"]  # 2 distinct sequences only
    assert nbest_text_lines(utt2) == ["utt2-1 the dog ran"]


def test_ctm_times_from_kaldi_transition_ids(scorer):
    utt1, utt2 = results(scorer)
    assert ctm_lines(utt1) == ["utt1 1 0.00 0.02 the", "utt1 1 0.02 0.03 cat", "utt1 1 0.05 0.01 sat"]
    # the epsilon (1 frame) and !SIL (3 frames) take time but get no line
    assert ctm_lines(utt2, frame_shift=0.03) == ["utt2 1 0.00 0.03 the", "utt2 1 0.06 0.06 dog",
                                                 "utt2 1 0.21 0.03 ran"]


def test_ctm_times_from_htk_node_times(scorer):
    (h1,) = results(scorer, SLF)
    assert h1.best.words == ["the", "cat"]
    assert ctm_lines(h1) == ["h1 1 0.00 0.30 the", "h1 1 0.30 0.50 cat"]


def test_ctm_times_survive_pruning(scorer):
    (h1,) = results(scorer, SLF, prune_beam=0.0)  # arc ids now index the pruned lattice
    assert h1.pruned["arcs_after"] < h1.pruned["arcs_before"]
    assert ctm_lines(h1) == ["h1 1 0.00 0.30 the", "h1 1 0.30 0.50 cat"]


def test_ctm_without_times_is_an_error(scorer):
    no_tids = ARCHIVE.replace(",1_2_3", ",").replace(",1_2", ",").replace(",4_4_4", ",").replace(",5\n", ",\n")
    utt1 = results(scorer, no_tids)[0]
    with pytest.raises(NoWordTimes, match="no transition ids"):
        ctm_lines(utt1)
    no_ilabels = read_kaldi("t\n0 1 0 the 1,2\n1 0,0\n\n", WORDS)[0]  # a Lattice with no transition id
    with pytest.raises(NoWordTimes, match="no transition ids"):
        path_word_times(no_ilabels, [0], [0])


def test_ctm_times_of_a_kaldi_lattice_transducer(scorer):
    """One frame per arc with a transition id; a word lasts from its arc to the next word arc,
    as Kaldi's conversion to a CompactLattice groups them (the leading silence frames are no word's)."""
    lattice = read_kaldi("t\n0 1 5 <eps> 1,2\n1 2 6 the 0,1\n2 3 6 <eps>\n3 4 0 <eps>\n4 5 7 cat\n5 6 8 <eps>\n6 0,0\n\n",
                         WORDS)[0]
    path = list(range(6))
    assert path_word_times(lattice, path, [1, 4]) == [(0.01, 0.02), (0.03, 0.02)]
    assert path_word_times(lattice, path, [4], frame_shift=0.03)[0] == pytest.approx((0.09, 0.06))


def test_posteriors_are_one_per_word_and_within_0_1(scorer):
    utt1, utt2 = results(scorer, posteriors=True, nbest=10)
    for result in (utt1, utt2):
        posteriors = result.word_posteriors()
        assert len(posteriors) == len(result.best.words) and all(0.0 <= p <= 1.0 for p in posteriors)
        assert result.to_json()["best"]["word_posteriors"] == posteriors
        # independently: every path of these lattices is one listed hypothesis (no two paths share
        # their words), so a word arc's posterior is the softmax mass of the hypotheses through it
        totals = torch.tensor([h.score for h in result.nbest], dtype=torch.float64)
        mass = torch.softmax(totals, dim=0)
        expected = [float(sum(m for h, m in zip(result.nbest, mass.tolist()) if arc in h.arcs))
                    for arc in result.best.word_arcs]
        assert posteriors == pytest.approx(expected, abs=1e-9)
    assert len(utt2.best.arcs) == 5 and len(utt2.word_posteriors()) == 3  # <eps> and !SIL have none
    assert utt2.word_posteriors() == pytest.approx([1.0, 1.0, 1.0])  # one path
    assert 0.5 < utt1.word_posteriors()[0] < 1.0 and utt1.word_posteriors()[1] == pytest.approx(1.0)
    over = dataclasses.replace(utt2, arc_posteriors=utt2.arc_posteriors * (1 + 1e-9))
    assert max(over.word_posteriors()) == 1.0
    lines = ctm_lines(utt1)
    assert [line.split()[-1] for line in lines] == [f"{p:.4f}" for p in utt1.word_posteriors()]


# ------------------------------------------------------------------------------ write specifiers
@pytest.mark.parametrize("text, kind, target, archive", [
    ("out.txt", "file", "out.txt", None),
    ("-", "stdout", "-", None),
    ("ark,t:lat.txt", "file", "lat.txt", "text"),
    ("ark:lat.ark", "file", "lat.ark", "binary"),
    ("ark,b,f:lat.ark", "file", "lat.ark", "binary"),
    ("ark:-", "stdout", "-", "binary"),
    ("ark,t:| gzip -c > lat.gz", "pipe", "gzip -c > lat.gz", "text"),
    ("| wc -l", "pipe", "wc -l", None),
    ("dir:with/colon.txt", "file", "dir:with/colon.txt", None),
])
def test_write_specifiers(text, kind, target, archive):
    spec = WriteSpec.parse(text)
    assert (spec.kind, spec.target, spec.archive) == (kind, target, archive)


@pytest.mark.parametrize("text, message", [
    ("scp:x.scp", "scp:"), ("ark,scp:a.ark,a.scp", "scp:"), ("ark,t,b:x", "unsupported archive options"),
    ("ark,p:x", "unsupported archive options"), ("ark:", "no file"), ("ark:|", "no command"),
])
def test_bad_write_specifiers(text, message):
    with pytest.raises(OutputError, match=message):
        WriteSpec.parse(text)


def test_rank_suffix_keeps_gzip_and_refuses_shared_streams():
    assert WriteSpec.parse("ark,t:lat.txt.gz").for_rank(1).target == "lat.txt.1.gz"
    assert WriteSpec.parse("ark,t:lat.txt").for_rank(2).text == "ark,t:lat.txt.2"
    with pytest.raises(OutputError, match="same standard output"):
        WriteSpec.parse("ark:-").for_rank(0)


# ------------------------------------------------------------------------------ the command
def test_text_and_binary_archives_hold_the_same_lattices(capsys, tmp_path, model_dir, archive, words_txt):
    common = ["--model", str(model_dir), "--words", str(words_txt), str(archive)]
    captured = afp(capsys, [*common, "--out", f"ark,t:{tmp_path / 'lat.txt'}"])
    assert captured.out.splitlines()[0].startswith("utt1 ")  # transcripts still on stdout
    afp(capsys, [*common, "--out", f"ark:{tmp_path / 'lat.ark'}"])
    text = (tmp_path / "lat.txt").read_text()
    assert text.split("\n")[1].split()[2].isdigit()  # --words: integer ids
    from_text = read_lattices(text, "kaldi", WORDS)
    from_binary = read_lattices((tmp_path / "lat.ark").read_bytes(), "kaldi", WORDS)
    assert [lat.key for lat in from_binary] == ["utt1", "utt2"]
    for a, b in zip(from_text, from_binary):
        assert a.meta == b.meta and a.start == b.start and a.num_states == b.num_states
        for name in ("src", "dst", "words", "finals"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        for name in ("graph", "acoustic", "final_graph", "final_acoustic"):
            assert torch.allclose(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5), name
        assert a.arc_extra["kaldi_tids"] == b.arc_extra["kaldi_tids"]


def test_pipe_writes_a_gzip_archive_that_reads_back(capsys, tmp_path, model_dir, archive, words_txt):
    target = tmp_path / "lat.gz"
    afp(capsys, ["--model", str(model_dir), str(archive), "--words", str(words_txt),
                 "--out", f"ark:| gzip -c > {target}"])
    assert target.read_bytes()[:2] == b"\x1f\x8b"
    lattices = read_lattice_file(target, "kaldi", WORDS)
    assert [lat.key for lat in lattices] == ["utt1", "utt2"] and lattices[0].meta["kaldi_word_ids"]


def test_plain_gz_path_is_gzipped_and_keeps_spellings(capsys, tmp_path, model_dir, archive, words_txt):
    afp(capsys, ["--model", str(model_dir), str(archive), "--words", str(words_txt), "--out",
                 str(tmp_path / "lat.txt.gz")])
    text = gzip.decompress((tmp_path / "lat.txt.gz").read_bytes()).decode()
    assert text.startswith("utt1\n") and " the " in text  # a plain PATH writes words as they were read


def test_archive_on_stdout_replaces_the_transcripts(capsys, tmp_path, model_dir, archive):
    captured = afp(capsys, ["--model", str(model_dir), str(archive), "--lm-weight", "0", "--old-lm-weight", "0", "--out", "ark,t:-",
                            "--text-dir", str(tmp_path / "text")])
    assert [lat.key for lat in read_kaldi(captured.out)] == ["utt1", "utt2"]
    assert (tmp_path / "text" / "0" / "text").read_text() == "utt1 the cat sat\nutt2 the dog ran\n"


def test_text_dir_per_lm_weight_and_tab_lines_agree(capsys, tmp_path, model_dir, archive):
    captured = afp(capsys, ["--model", str(model_dir), str(archive), "--lm-weight", "0", "--old-lm-weight", "0", "--lm-weight", "2.5",
                            "--text-dir", str(tmp_path / "d")])
    lines = captured.out.splitlines()
    assert lines[0] == "0\tutt1 the cat sat" and len(lines) == 4
    for weight in ("0", "2.5"):
        expected = [line.split("\t", 1)[1] for line in lines if line.split("\t")[0] == weight]
        assert (tmp_path / "d" / weight / "text").read_text().splitlines() == expected


def test_nbest_text_and_ctm_files(capsys, tmp_path, model_dir, archive):
    afp(capsys, ["--model", str(model_dir), str(archive), "--lm-weight", "0", "--old-lm-weight", "0", "--nbest", "2", "--nbest-text",
                 str(tmp_path / "nbest.txt"), "--ctm", str(tmp_path / "x.ctm"), "--frame-shift", "0.03"])
    assert (tmp_path / "nbest.txt").read_text() == "utt1-1 the cat sat\nutt1-2 a cat sat\nutt2-1 the dog ran\n"
    assert (tmp_path / "x.ctm").read_text().splitlines()[3:] == [
        "utt2 1 0.00 0.03 the", "utt2 1 0.06 0.06 dog", "utt2 1 0.21 0.03 ran"]


def test_htk_input_to_a_directory_and_to_a_kaldi_archive(capsys, tmp_path, model_dir):
    slf = tmp_path / "h1.lat"
    slf.write_text(SLF)
    captured = afp(capsys, ["--model", str(model_dir), str(slf), "--lm-weight", "0", "--old-lm-weight", "0", "--out", str(tmp_path / "dir"),
                            "--ctm", "-"])
    assert captured.out == "h1 1 0.00 0.30 the\nh1 1 0.30 0.50 cat\n"
    assert [lat.key for lat in read_lattice_file(tmp_path / "dir" / "h1.lat", "htk")] == ["h1"]
    afp(capsys, ["--model", str(model_dir), str(slf), "--out", f"ark,t:{tmp_path / 'h1.txt'}"])
    assert [lat.key for lat in read_lattice_file(tmp_path / "h1.txt", "kaldi")] == ["h1"]


def test_json_lines_unchanged_with_file_outputs(capsys, tmp_path, model_dir, archive):
    captured = afp(capsys, ["--model", str(model_dir), str(archive), "--json", "--posteriors", "--ctm",
                            str(tmp_path / "x.ctm")])
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [len(r["best"]["word_posteriors"]) for r in rows] == [len(r["best"]["words"]) for r in rows] == [3, 3]
    confidences = [float(line.split()[5]) for line in (tmp_path / "x.ctm").read_text().splitlines()]
    assert confidences == pytest.approx([p for r in rows for p in r["best"]["word_posteriors"]], abs=1e-4)


# ------------------------------------------------------------------------------ errors: one line, exit 2
@pytest.mark.parametrize("extra, parts", [
    (["--out", "scp:x.scp"], ["--out", "scp:"]),
    (["--out", "ark:{tmp}/bin.ark"], ["--words"]),  # binary needs the symbol table
    (["--out", "ark,t:-", "--json"], ["standard output", "--json"]),
    (["--out", "-", "--ctm", "-"], ["--out and --ctm", "standard output"]),
    (["--ctm", "{tmp}/x.ctm", "--lm-weight", "0", "--lm-weight", "1"], ["--ctm", "one LM weight"]),
    (["--nbest-text", "ark:{tmp}/n.ark"], ["--nbest-text", "text"]),
    (["--ctm", "{tmp}/x.ctm", "--frame-shift", "0"], ["--frame-shift"]),
    (["--out", "ark,t:{tmp}/a-file/lat.txt"], ["a-file/lat.txt", "cannot write"]),  # a folder that is a file
    (["--text-dir", "{tmp}/a-file"], ["a-file", "cannot write"]),
    (["--out", "ark,t:| cat > /dev/null; exit 3"], ["exit status 3", "failed"]),
    (["--out", "ark,t:| cat > {tmp}/a-file/x.gz"], ["exit status", "a-file/x.gz"]),
])
def test_output_errors_are_one_line_and_exit_2(capsys, tmp_path, model_dir, archive, extra, parts):
    (tmp_path / "a-file").write_text("not a folder")
    argv = ["--model", str(model_dir), str(archive), *(x.format(tmp=tmp_path) for x in extra)]
    assert_clean_error(afp(capsys, argv, status=2), *parts)


def test_ctm_of_lattices_without_times_is_an_error(capsys, tmp_path, model_dir):
    bare = tmp_path / "bare.txt"
    bare.write_text("u\n0 1 the 1,2,\n1 0,0,\n\n")
    assert_clean_error(afp(capsys, ["--model", str(model_dir), str(bare), "--ctm", str(tmp_path / "x.ctm")],
                           status=2), "--ctm", "no transition ids")
