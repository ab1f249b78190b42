"""WER: counts against hand-worked examples, reference formats, matching, the real ESPnet set."""

from __future__ import annotations

import gzip
import random

import pytest

from afp.wer import ReferencesError, WerStats, cut_reference, match_references, read_references, word_errors
from tests.factories import require_shared, SHARED_DATA, WORDS
from tests.factories import levenshtein

DEV_CLEAN = SHARED_DATA / "nbest" / "librispeech-espnet" / "dev_clean"


@pytest.mark.parametrize(("ref", "hyp", "sub", "ins", "dele"), [
    ("the cat sat", "the cat sat", 0, 0, 0),
    ("the cat sat", "the dog sat", 1, 0, 0),  # cat -> dog
    ("the cat sat", "the cat sat down", 0, 1, 0),  # + down
    ("the cat sat", "cat sat", 0, 0, 1),  # - the
    ("the cat sat on the mat", "a cat sat the mat too", 1, 1, 1),  # the -> a, - on, + too
    ("", "hello there", 0, 2, 0),
    ("hello there", "", 0, 0, 2),
])
def test_word_errors_hand_worked(ref, hyp, sub, ins, dele):
    stats = word_errors(ref.split(), hyp.split())
    assert (stats.substitutions, stats.insertions, stats.deletions) == (sub, ins, dele)
    assert stats.errors == sub + ins + dele and stats.ref_words == len(ref.split())
    assert stats.sentences == 1 and stats.sentence_errors == int(sub + ins + dele > 0)


def test_wer_stats_sum_percent_and_json():
    total = sum(word_errors(ref.split(), hyp.split()) for ref, hyp in [("the cat sat", "the dog sat"),
                                                                       ("a b c d", "a b c d e"), ("x y", "x y")])
    assert total == WerStats(errors=2, substitutions=1, insertions=1, deletions=0, ref_words=9, sentences=3,
                             sentence_errors=2)
    assert total.wer == pytest.approx(100 * 2 / 9)
    assert sum([word_errors(["a"], ["b"]), word_errors(["a"], ["a"])]) == WerStats(1, 1, 0, 0, 2, 2, 1)
    assert total + WerStats.zero() == total
    assert total.to_json() == {"errors": 2, "substitutions": 1, "insertions": 1, "deletions": 0, "ref_words": 9,
                               "sentences": 3, "sentence_errors": 2, "wer": pytest.approx(100 * 2 / 9)}
    assert WerStats.zero().wer == 0.0 and WerStats.zero().to_json()["wer"] is None
    assert word_errors([], ["a"]).wer == float("inf")
    with pytest.raises(TypeError, match="list of words"):
        word_errors("the cat", ["the", "cat"])


@pytest.mark.parametrize("seed", range(4))
def test_word_errors_agree_with_pure_python_levenshtein(seed):
    rng = random.Random(seed)
    for _ in range(50):
        ref = [rng.choice(WORDS[:5]) for _ in range(rng.randint(0, 8))]
        hyp = [rng.choice(WORDS[:5]) for _ in range(rng.randint(0, 8))]
        stats = word_errors(ref, hyp)
        assert stats.errors == levenshtein(ref, hyp), (ref, hyp)
        assert stats.insertions - stats.deletions == len(hyp) - len(ref)


def test_read_kaldi_text(tmp_path):
    path = tmp_path / "text"
    path.write_text("utt1 the cat sat\n\nutt2  the   dog\nutt3\n", encoding="utf-8")
    assert read_references(path) == {"utt1": ["the", "cat", "sat"], "utt2": ["the", "dog"], "utt3": []}


@pytest.mark.parametrize("name", ["ref.trn", "ref_wer"])
def test_read_sclite_trn(tmp_path, name):
    path = tmp_path / name  # by the suffix, or by the content: every line ends with "(id)"
    path.write_text("THE CAT SAT\t(spk1-spk1-utt1)\nTHE DOG (spk1-spk1-utt2)\n(spk2-spk2-utt3)\n", encoding="utf-8")
    assert read_references(path) == {"spk1-spk1-utt1": ["THE", "CAT", "SAT"], "spk1-spk1-utt2": ["THE", "DOG"],
                                     "spk2-spk2-utt3": []}


def test_kaldi_text_with_a_parenthesised_tag_stays_kaldi(tmp_path):
    path = tmp_path / "text"
    path.write_text("utt1 so it goes (laughter)\nutt2 yes\n", encoding="utf-8")
    assert read_references(path) == {"utt1": ["so", "it", "goes", "(laughter)"], "utt2": ["yes"]}


def _supervisions():
    from lhotse import SupervisionSegment, SupervisionSet

    return SupervisionSet.from_segments([
        SupervisionSegment(id="sup1", recording_id="rec1", start=0.0, duration=1.0, text="the cat sat"),
        SupervisionSegment(id="sup2", recording_id="rec2", start=1.5, duration=1.0, text="on the mat"),
        SupervisionSegment(id="sup3", recording_id="rec2", start=0.0, duration=1.0, text="the dog"),
        SupervisionSegment(id="sup4", recording_id="rec3", start=0.0, duration=1.0),  # no text
    ])


@pytest.mark.parametrize("name", ["supervisions.jsonl.gz", "supervisions.jsonl", "supervisions.json"])
def test_read_lhotse_supervisions(tmp_path, name):
    _supervisions().to_file(tmp_path / name)
    assert read_references(tmp_path / name) == {"sup1": ["the", "cat", "sat"], "sup2": ["on", "the", "mat"],
                                                "sup3": ["the", "dog"]}


def test_read_lhotse_cuts_gives_supervisions_and_joined_cuts(tmp_path):
    from lhotse import CutSet, Recording, RecordingSet

    recordings = RecordingSet.from_recordings(
        [Recording(id=f"rec{i}", sources=[], sampling_rate=16000, num_samples=48000, duration=3.0) for i in (1, 2, 3)])
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=_supervisions())
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    refs = read_references(tmp_path / "cuts.jsonl.gz")
    by_recording = {cut.recording_id: cut.id for cut in cuts}
    assert refs[by_recording["rec2"]] == "the dog on the mat".split()  # time order, not manifest order
    assert refs[by_recording["rec1"]] == "the cat sat".split()
    assert by_recording["rec3"] not in refs  # its only supervision has no text
    assert refs["sup2"] == "on the mat".split() and "sup4" not in refs
    assert cut_reference(cuts[by_recording["rec2"]]) == "the dog on the mat".split()
    assert cut_reference(cuts[by_recording["rec3"]]) is None


def test_reading_errors_name_the_file_and_line(tmp_path):
    bad_trn = tmp_path / "ref.trn"
    bad_trn.write_text("A B (s-u1)\nC D no id here\n", encoding="utf-8")
    with pytest.raises(ReferencesError, match=r"ref\.trn:2: expected sclite trn"):
        read_references(bad_trn)
    twice = tmp_path / "text"
    twice.write_text("u1 a\nu2 b\nu1 c\n", encoding="utf-8")
    with pytest.raises(ReferencesError, match=r"text:3: utterance 'u1' again \(first on line 1\)"):
        read_references(twice)
    latin = tmp_path / "latin"
    latin.write_bytes(b"u1 a\nu2 caf\xe9\n")
    with pytest.raises(ReferencesError, match=r"latin:2: not UTF-8"):
        read_references(latin)
    with pytest.raises(ReferencesError, match="missing.txt: cannot read"):
        read_references(tmp_path / "missing.txt")
    with pytest.raises(ReferencesError, match="missing.jsonl.gz: cannot read"):
        read_references(tmp_path / "missing.jsonl.gz")
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(ReferencesError, match="empty"):
        read_references(empty)
    junk = tmp_path / "junk.jsonl.gz"
    with gzip.open(junk, "wt") as f:
        f.write('{"not": "a manifest"}\n')
    with pytest.raises(ReferencesError, match="junk.jsonl.gz"):
        read_references(junk)
    assert issubclass(ReferencesError, ValueError)


def test_match_references_exact_then_speaker_suffix():
    refs = {"utt1": ["a"], "spk-spk-utt2": ["b"], "x-1": ["c"], "y-1": ["d"]}
    assert match_references(refs, ["spk-utt2", "utt1", "utt2"]) == {"spk-utt2": ["b"], "utt1": ["a"],
                                                                    "utt2": ["b"]}
    assert match_references(refs, ["x-1"]) == {"x-1": ["c"]}  # exact beats any suffix
    with pytest.raises(ReferencesError, match=r"'1' matches 2 references \('x-1', 'y-1'\)"):
        match_references(refs, ["1"])
    missing = [f"gone{i}" for i in range(7)]
    with pytest.raises(ReferencesError, match=r"7 hypotheses have no reference: 'gone0', .*'gone4' and 2 more"):
        match_references(refs, ["utt1", *missing])
    with pytest.raises(ReferencesError, match=r"1 hypothesis has no reference: 'tt1'"):
        match_references(refs, ["tt1"])  # a suffix must start after a "-"


def test_real_espnet_trn_and_first_pass_wer():
    require_shared(DEV_CLEAN / "ref_wer.trn", DEV_CLEAN / "1best_recog" / "text")
    refs = read_references(DEV_CLEAN / "ref_wer.trn")
    assert len(refs) == 2703 and sum(len(words) for words in refs.values()) == 54402
    assert refs["1272-128104-1272-128104-0000"][:3] == ["MISTER", "QUILTER", "IS"]
    hyps = read_references(DEV_CLEAN / "1best_recog" / "text")  # Kaldi text: the same reader
    assert len(hyps) == 2703 and "1272-128104-0000" in hyps
    matched = match_references(refs, hyps)
    assert list(matched) == list(hyps)
    stats = sum(word_errors(matched[key], words) for key, words in hyps.items())
    assert stats.ref_words == 54402 and stats.sentences == 2703
    assert round(stats.wer, 2) == 1.70  # the data's documented first-pass WER on dev_clean
