"""N-best lists as lattices: the prefix tree, the ESPnet / SRILM / JSON readers, format guessing, fuzzing."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattices.formats import READ_FORMATS, guess_format, read_lattice_file, read_lattices
from lattices.formats.nbest import (
    BYTELOG_TO_LN,
    NBestHypothesis,
    NBestList,
    first_pass_weights,
    is_espnet_nbest_dir,
    nbest_from_json,
    nbest_to_lattice,
    read_espnet_nbest,
    read_srilm_nbest,
)
from lattices.lattice import Lattice, LatticeFormatError
from tests.factories import nbest_to_json, require_shared, DEVICES, SHARED_DATA

ESPNET_DIR = SHARED_DATA / "nbest" / "librispeech-espnet" / "dev_clean"


def paths(lattice: Lattice) -> list[tuple[tuple[str, ...], dict[str, float], int]]:
    """Every start-to-final path by depth-first search: (words without epsilons, summed named
    scores including the final weights, final_extra["hypothesis"] of its final state)."""
    named = lattice.named_scores()
    finals = {int(s): i for i, s in enumerate(lattice.finals.tolist())}
    out_arcs: dict[int, list[int]] = {}
    for arc, src in enumerate(lattice.src.tolist()):
        out_arcs.setdefault(src, []).append(arc)
    found = []

    def walk(state: int, words: tuple[str, ...], sums: dict[str, float]) -> None:
        if state in finals:
            index = finals[state]
            total = {name: sums[name] + float(final[index]) for name, (_, final) in named.items()}
            found.append((words, total, int(lattice.final_extra["hypothesis"][index])))
        for arc in out_arcs.get(state, []):
            word = int(lattice.words[arc])
            walk(int(lattice.dst[arc]), words + ((lattice.symbols[word],) if word else ()),
                 {name: sums[name] + float(per_arc[arc]) for name, (per_arc, _) in named.items()})

    walk(lattice.start, (), {name: 0.0 for name in named})
    return found


def hyp(words: str, **scores: float) -> NBestHypothesis:
    return NBestHypothesis(tuple(words.split()), scores)


# Ranks 0..4: "A B C", "A B D", "A E", "A B C" again (a duplicate with other scores), "" (empty).
# Distinct non-empty prefixes: A, A B, A B C, A B D, A E = 5, so 1 + 5 + 5 hypotheses = 11 states.
EXAMPLE = NBestList("utt1", (hyp("A B C", decoder=-1.0, lm=-10.0), hyp("A B D", decoder=-1.5, lm=-9.0),
                             hyp("A E", decoder=-2.0, lm=-7.5), hyp("A B C", decoder=-2.5, lm=-12.25),
                             hyp("", decoder=-9.0, lm=-0.5)))


# ------------------------------------------------------------------------------------ prefix tree
def test_paths_are_exactly_the_hypotheses_with_their_scores() -> None:
    lattice = nbest_to_lattice(EXAMPLE)
    assert lattice.validate() is lattice
    found = sorted(paths(lattice), key=lambda p: p[2])
    assert [rank for _, _, rank in found] == [0, 1, 2, 3, 4]  # each hypothesis once, by its own final state
    for (words, scores, rank), expected in zip(found, EXAMPLE.hypotheses):
        assert words == expected.words, rank
        assert scores == pytest.approx(expected.scores), rank
    assert set(lattice.named_scores()) == {"decoder", "lm"}
    assert lattice.meta == {"nbest": 5}


def test_shared_prefixes_are_merged_and_duplicates_kept() -> None:
    lattice = nbest_to_lattice(EXAMPLE)
    assert lattice.num_states == 11
    assert lattice.num_arcs == 5 + 5  # one arc per distinct prefix, one epsilon arc per hypothesis
    assert lattice.finals.numel() == 5 and lattice.final_extra["hypothesis"].tolist() == [0, 1, 2, 3, 4]
    assert lattice.symbols == ("<eps>", "A", "B", "C", "D", "E")
    # exactly one arc leaves the start with "A", plus the empty hypothesis's epsilon arc
    leaving = lattice.words[lattice.src == lattice.start].tolist()
    assert sorted(leaving) == [0, 1]
    # the duplicate "A B C" ends at the same tree state as rank 0 but in its own final state
    eps = (lattice.words == 0).nonzero().squeeze(1)
    ends = dict(zip(lattice.dst[eps].tolist(), lattice.src[eps].tolist()))
    final_of_rank = dict(zip(lattice.final_extra["hypothesis"].tolist(), lattice.finals.tolist()))
    assert ends[final_of_rank[0]] == ends[final_of_rank[3]] and final_of_rank[0] != final_of_rank[3]
    assert ends[final_of_rank[4]] == lattice.start


def test_scores_only_on_epsilon_arcs_and_zero_elsewhere() -> None:
    lattice = nbest_to_lattice(EXAMPLE)
    word_arcs = lattice.words != 0
    for name, (per_arc, per_final) in lattice.named_scores().items():
        assert per_arc.dtype == torch.float64 and per_arc.shape == (lattice.num_arcs,)
        assert bool((per_arc[word_arcs] == 0).all()) and bool((per_final == 0).all()), name
    on_epsilons = sorted(lattice.scores["decoder"][~word_arcs].tolist())
    assert on_epsilons == sorted(h.scores["decoder"] for h in EXAMPLE.hypotheses)
    for tensor in (lattice.acoustic, lattice.graph, lattice.final_acoustic, lattice.final_graph):
        assert bool((tensor == 0).all())


def test_empty_hypothesis_alone_is_one_epsilon_arc() -> None:
    lattice = nbest_to_lattice(NBestList("e", (hyp("", score=-3.0),)))
    assert lattice.num_states == 2 and lattice.num_arcs == 1 and lattice.words.tolist() == [0]
    assert paths(lattice) == [((), {"score": -3.0}, 0)]


def test_inconsistent_score_names_name_key_rank_and_name() -> None:
    bad = NBestList("u9", (hyp("A", decoder=-1.0, ctc=-2.0), hyp("B", decoder=-1.0, ctc=-1.0), hyp("C", decoder=-1.0)))
    with pytest.raises(LatticeFormatError) as info:
        nbest_to_lattice(bad)
    assert info.value.key == "u9" and info.value.field == "ctc" and "hypothesis 3" in str(info.value)
    with pytest.raises(LatticeFormatError, match="at least one hypothesis"):
        nbest_to_lattice(NBestList("none", ()))
    with pytest.raises(LatticeFormatError, match="finite"):
        nbest_to_lattice(NBestList("inf", (hyp("A", lm=-math.inf),)))


def test_no_score_names_falls_back_to_zero_acoustic_and_graph() -> None:
    lattice = nbest_to_lattice(NBestList("plain", (hyp("A B"), hyp("A"))))
    assert lattice.scores == {} and set(lattice.named_scores()) == {"acoustic", "graph"}
    assert sorted(words for words, _, _ in paths(lattice)) == [("A",), ("A", "B")]


# ------------------------------------------------------------------------------------ Lattice.scores
def test_named_scores_survive_subset_and_device() -> None:
    lattice = nbest_to_lattice(EXAMPLE)
    keep = torch.ones(lattice.num_arcs, dtype=torch.bool)
    keep[(lattice.words == 2).nonzero()[0]] = False  # drop the "B" arc: ranks 0, 1 and 3 disappear
    pruned = lattice.subset(keep)
    found = sorted(paths(pruned), key=lambda p: p[2])
    assert [(words, rank) for words, _, rank in found] == [(("A", "E"), 2), ((), 4)]
    assert found[0][1] == {"decoder": -2.0, "lm": -7.5}
    assert set(pruned.final_scores) == {"decoder", "lm"} and pruned.final_scores["lm"].shape == (2,)
    assert pruned.validate() is pruned
    assert lattice.to("cpu") is lattice


@pytest.mark.parametrize("device", DEVICES)
def test_named_scores_move_with_the_lattice(device: str) -> None:
    moved = nbest_to_lattice(EXAMPLE).to(device)
    assert {t.device.type for t in (*moved.scores.values(), *moved.final_scores.values())} == {device}
    assert moved.validate() is moved and moved.named_scores()["lm"][0].device.type == device


def test_validate_checks_named_score_shapes_and_finiteness() -> None:
    lattice = nbest_to_lattice(EXAMPLE)
    with pytest.raises(LatticeFormatError, match="expected"):
        lattice.replace(scores={**lattice.scores, "lm": lattice.scores["lm"][:-1]}).validate()
    with pytest.raises(LatticeFormatError, match="differ"):
        lattice.replace(final_scores={"lm": lattice.final_scores["lm"]}).validate()
    bad = lattice.scores["lm"].clone()
    bad[0] = math.nan
    with pytest.raises(LatticeFormatError, match="finite"):
        lattice.replace(scores={**lattice.scores, "lm": bad}).validate()


# ------------------------------------------------------------------------------------ SRILM
def test_srilm_plain_form_log10() -> None:
    text = "-2.0 -0.5 3 <s> HELLO BIG WORLD </s>\n-3 -1 2 HELLO WORLD\n"
    nbest = read_srilm_nbest(text, source="/x/utt7.score.gz")
    assert nbest.key == "utt7"
    first, second = nbest.hypotheses
    assert first.words == ("HELLO", "BIG", "WORLD") and second.words == ("HELLO", "WORLD")
    # log10 -> natural log: -2 * ln(10) = -4.605170185988091, -0.5 * ln(10) = -1.151292546497023
    assert first.scores == pytest.approx({"acoustic": -4.605170185988091, "lm": -1.151292546497023}, rel=1e-12)
    assert second.scores == pytest.approx({"acoustic": -6.907755278982137, "lm": -2.302585092994046}, rel=1e-12)
    with pytest.raises(LatticeFormatError) as info:
        read_srilm_nbest("-1 -1 2 A B\n-1 -1 4 A B C\n", source="f.nbest")
    assert info.value.line == 2 and "word count is 4" in str(info.value)


def test_srilm_nbest1_bytelog() -> None:
    nbest = read_srilm_nbest("NBestList1.0\n(-10000) A B\n\n(-20480) A\n", key="k")
    # a bytelog is log base 1.0001 divided by 1024: -10000 -> -10000 * 1024 / 10000.5 = -1023.9488025598720
    assert nbest.hypotheses[0].scores["score"] == pytest.approx(-1023.948802559872, rel=1e-12)
    assert nbest.hypotheses[1].scores["score"] == pytest.approx(-2097.0471476426179, rel=1e-12)
    assert nbest.hypotheses[0].scores["score"] == pytest.approx(-10000 * 1024 * math.log(1.0001), rel=1e-9)
    assert [h.words for h in nbest.hypotheses] == [("A", "B"), ("A",)] and nbest.key == "k"
    assert read_srilm_nbest("(-10000) A B\n").hypotheses[0].scores == nbest.hypotheses[0].scores  # SRILM: no header


NBEST2 = ("NBestList2.0\n"
          "(-3000) <s> ( st: 0.00 et: 0.10 g: 0 a: -100 ) HELLO ( st: 0.11 et: 0.50 g: -1000 a: -900 ) "
          "HH ( st: 0.11 et: 0.20 g: 0 a: -400 ) AH ( st: 0.21 et: 0.50 g: 0 a: -500 ) "
          "WORLD ( st: 0.51 et: 0.90 g: -500 a: -400 ) </s> ( st: 0.91 et: 0.95 g: -100 a: 0 )\n"
          "(-2048) OK ( st: 0.00 et: 0.95 g: -1024 a: -1024 )\n")


def test_srilm_nbest2_word_scores_and_subword_units() -> None:
    first, second = read_srilm_nbest(NBEST2, key="u").hypotheses
    # words <s> HELLO WORLD </s> (HH and AH lie inside HELLO): a = -1400, g = -1600 bytelog;
    # -1400 * 1024 / 10000.5 = -143.352832..., -1600 * 1024 / 10000.5 = -163.831808...,
    # -1024 * 1024 / 10000.5 = -104.852357...
    assert first.words == ("HELLO", "WORLD")
    assert first.scores == pytest.approx({"acoustic": -143.35283235838208, "lm": -163.8318084095795}, rel=1e-12)
    assert second.scores == pytest.approx({"acoustic": -104.85235738213089, "lm": -104.85235738213089}, rel=1e-12)
    assert BYTELOG_TO_LN == 1024 / 10000.5


@pytest.mark.parametrize(("text", "line", "words"), [
    ("", None, "no hypotheses"),
    ("NBestList1.0\n", None, "no hypotheses"),
    ("NBestList1.0\n(-1) A\n-1 -2 1 A\n", 3, "parentheses"),
    ("NBestList1.0\n(x) A\n", 2, "not a number"),
    ("NBestList2.0\n(-1) A ( st: 0 et: 1 g: 0 a: 0\n", 2, "11 fields"),
    ("NBestList2.0\n(-1) A ( st: 0 et: 1 g: 0 b: 0 )\n", 2, "'a:'"),
    ("NBestList2.0\n(-1) A ( st: 0 et: 1 g: nan a: 0 )\n", 2, "finite"),
    ("-1 -2 x A\n", 1, "word count"),
    ("-1 -2\n", 1, "nwords"),
    ("-1 inf 1 A\n", 1, "finite"),
    ("-1 -1 1 A\nNBestList1.0\n", 2, "header inside"),
    ("NBestList1.0 extra\n(-1) A\n", 1, "header"),
])
def test_srilm_errors_name_the_line(text: str, line: int | None, words: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        read_srilm_nbest(text, source="lists/u1.nbest")
    assert info.value.line == line and words in str(info.value) and info.value.source == "lists/u1.nbest"
    assert info.value.key == "u1"


# ------------------------------------------------------------------------------------ ESPnet
def write_espnet(root: Path, folders: dict[int, dict[str, str]]) -> Path:
    for k, files in folders.items():
        (root / f"{k}best_recog").mkdir(parents=True)
        for name, content in files.items():
            (root / f"{k}best_recog" / name).write_text(content, encoding="utf-8")
    return root


SMALL_ESPNET = {
    1: {"text": "u1 A B C\nu2 X\nu3\n", "score": "u1 tensor(-1.5)\nu2 tensor(-2.0)\nu3 -7\n",
        "scores": 'u1 {"decoder": "tensor(-0.5)", "ctc": "tensor(-0.25)"}\nu2 {"decoder": -1, "ctc": "-2.5"}\n'
                  "u3 {'decoder': tensor(-3.0, device='cuda:0'), 'ctc': tensor(-4.0)}\n"},
    2: {"text": "u1 A B D\nu3 Y\n", "score": "u1 tensor(-1.75)\nu3 tensor(-8.0)\n",
        "scores": 'u1 {"decoder": "tensor(-0.75)", "ctc": "tensor(-0.125)"}\nu3 {"decoder": -5, "ctc": -6}\n'},
}


def test_espnet_small_folder(tmp_path: Path) -> None:
    root = write_espnet(tmp_path / "decode", SMALL_ESPNET)
    assert is_espnet_nbest_dir(root) and not is_espnet_nbest_dir(root / "1best_recog")
    lists = read_espnet_nbest(root)
    assert [n.key for n in lists] == ["u1", "u2", "u3"]
    assert [len(n.hypotheses) for n in lists] == [2, 1, 2]  # u2 is missing from 2best_recog
    assert lists[0].hypotheses[1] == NBestHypothesis(("A", "B", "D"), {"decoder": -0.75, "ctc": -0.125}, -1.75)
    assert lists[1].hypotheses[0].scores == {"decoder": -1.0, "ctc": -2.5}
    assert lists[2].hypotheses[0] == NBestHypothesis((), {"decoder": -3.0, "ctc": -4.0}, -7.0)  # empty, repr form
    # the totals tell u1's combination (2 decoder + 2 ctc); u2 has one hypothesis for two weights;
    # u3's totals would need a negative weight
    assert [first_pass_weights(n) for n in lists] == [{"decoder": 2.0, "ctc": 2.0}, None, None]
    lattices = read_lattice_file(root)  # a folder: auto-detected as espnet-nbest
    assert [lattice.key for lattice in lattices] == ["u1", "u2", "u3"]
    assert sorted(w for w, _, _ in paths(lattices[0])) == [("A", "B", "C"), ("A", "B", "D")]


def test_espnet_without_scores_file_uses_the_total(tmp_path: Path) -> None:
    folders = {k: {n: c for n, c in files.items() if n != "scores"} for k, files in SMALL_ESPNET.items()}
    lists = read_espnet_nbest(write_espnet(tmp_path / "d", folders))
    assert [h.scores for h in lists[0].hypotheses] == [{"score": -1.5}, {"score": -1.75}]
    assert lists[2].hypotheses[0].scores == {"score": -7.0}


@pytest.mark.parametrize(("change", "file", "line", "words"), [
    ({4: {"text": "u1 A\n", "score": "u1 1\n", "scores": 'u1 {"decoder": 1, "ctc": 1}\n'}}, None, None,
     "3best_recog is missing"),
    ({1: {"text": "u1 A\nu1 B\n"}}, "1best_recog/text", 2, "twice"),
    ({1: {"scores": 'u1 {"decoder": "tensor(abc)", "ctc": 1}\nu2 {"decoder": 1, "ctc": 1}\nu3 {"decoder": 1, "ctc": 1}\n'}},
     "1best_recog/scores", 1, "not a number"),
    ({1: {"scores": 'u1 {"decoder": 1}\nu2 {"decoder": 1, "ctc": 1}\nu3 {"decoder": 1, "ctc": 1}\n'}},
     "2best_recog/scores", 1, "score names ['ctc', 'decoder'], but the 1best hypothesis has ['decoder']"),
    ({1: {"scores": 'u1 [1, 2]\nu2 {"decoder": 1, "ctc": 1}\nu3 {"decoder": 1, "ctc": 1}\n'}},
     "1best_recog/scores", 1, "object"),
    ({1: {"scores": 'u1 {"decoder": NaN, "ctc": 1}\nu2 {"decoder": 1, "ctc": 1}\nu3 {"decoder": 1, "ctc": 1}\n'}},
     "1best_recog/scores", 1, "finite"),
    ({2: {"text": "u1 A\nu3 B\nu9 C\n"}}, "2best_recog/text", 3, "not in 1best_recog"),
    ({2: {"text": "u1 A B D\n"}}, "2best_recog/scores", 2, "not in 2best_recog/text"),
    ({2: {"scores": 'u1 {"decoder": 1, "ctc": 1}\n'}}, "2best_recog/text", 2, "not in 2best_recog/scores"),
    ({3: {"text": "u2 Z\n", "score": "u2 1\n", "scores": 'u2 {"decoder": 1, "ctc": 1}\n'}}, "3best_recog/text", 1,
     "no hypothesis in 2best_recog"),
])
def test_espnet_errors_name_file_and_line(tmp_path: Path, change: dict, file: str | None, line: int | None,
                                          words: str) -> None:
    folders = {k: dict(files) for k, files in SMALL_ESPNET.items()}
    for k, files in change.items():
        folders.setdefault(k, {}).update(files)
    root = write_espnet(tmp_path / "d", folders)
    with pytest.raises(LatticeFormatError) as info:
        read_espnet_nbest(root)
    assert words in str(info.value) and info.value.line == line
    assert info.value.source == str(root / file if file else root)


def test_espnet_missing_pieces(tmp_path: Path) -> None:
    with pytest.raises(LatticeFormatError, match="not a directory"):
        read_espnet_nbest(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LatticeFormatError, match="no 1best_recog"):
        read_espnet_nbest(tmp_path / "empty")
    root = write_espnet(tmp_path / "noscore", {1: {"text": "u1 A\n"}})
    with pytest.raises(LatticeFormatError, match="no such file") as info:
        read_espnet_nbest(root)
    assert info.value.source == str(root / "1best_recog" / "score")
    (root / "1best_recog" / "score").write_bytes(b"u1 \xff\n")
    with pytest.raises(LatticeFormatError, match="UTF-8"):
        read_espnet_nbest(root)


def test_real_espnet_nbest() -> None:
    require_shared(ESPNET_DIR / "1best_recog" / "text")
    lists = read_espnet_nbest(ESPNET_DIR)
    assert len(lists) == 2703 and max(len(n.hypotheses) for n in lists) == 30
    first = lists[0]
    assert first.key == "1272-128104-0000"
    assert first.hypotheses[0].words == tuple(
        "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES AND WE ARE GLAD TO WELCOME HIS GOSPEL".split())
    assert first.hypotheses[0].scores == {"decoder": -0.3654, "ctc": -0.0041, "lm": -77.3508}
    assert any(not h.words for n in lists for h in n.hypotheses)  # 3081-166546-0008 has an empty hypothesis
    sample = lists[::27]  # a hundred lists made lattices, validated and walked (all 2,703 take 17 s)
    lattices = [nbest_to_lattice(n) for n in sample]
    assert [lattice.key for lattice in lattices] == [n.key for n in sample]
    # each lattice has exactly one final state per hypothesis, and an arc per word of a merged prefix tree
    assert all(int(lattice.finals.shape[0]) == len(n.hypotheses) for lattice, n in zip(lattices, sample))
    for lattice, nbest in zip(lattices, sample):
        lattice.validate()
        found = sorted(paths(lattice), key=lambda p: p[2])
        assert [words for words, _, _ in found] == [h.words for h in nbest.hypotheses]
        assert all(scores == pytest.approx(h.scores) for (_, scores, _), h in zip(found, nbest.hypotheses))


# ------------------------------------------------------------------------------------ JSON
JSON_EXAMPLE = {"key": "utt1", "hypotheses": [
    {"words": "A B C", "scores": {"decoder": -1.2, "ctc": -0.5, "lm": -20.1}},
    {"words": ["A", "B", "D"], "scores": {"decoder": -1.5, "ctc": -0.75, "lm": -19}},
    {"words": "", "scores": {"decoder": -9, "ctc": -9, "lm": -1}}]}


def test_json_reads_and_round_trips() -> None:
    (nbest,) = nbest_from_json(json.dumps(JSON_EXAMPLE), source="req")
    assert nbest.key == "utt1" and [h.words for h in nbest.hypotheses] == [("A", "B", "C"), ("A", "B", "D"), ()]
    assert nbest.hypotheses[1].scores == {"decoder": -1.5, "ctc": -0.75, "lm": -19.0}
    assert nbest_from_json(json.loads(json.dumps(nbest_to_json(nbest)))) == [nbest]
    several = nbest_from_json({"nbest": [JSON_EXAMPLE, {**JSON_EXAMPLE, "key": "utt2"}]})
    assert [n.key for n in several] == ["utt1", "utt2"]
    assert [n.key for n in nbest_from_json([JSON_EXAMPLE])] == ["utt1"]
    (lattice,) = read_lattices(json.dumps(JSON_EXAMPLE).encode())  # auto: nbest-json
    assert lattice.meta == {"nbest": 3} and set(lattice.scores) == {"decoder", "ctc", "lm"}


def _edited(path: list, value: object) -> dict:
    obj = json.loads(json.dumps(JSON_EXAMPLE))
    target = obj
    for step in path[:-1]:
        target = target[step]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return obj


_DROP = object()


@pytest.mark.parametrize(("obj", "field", "words"), [
    (_edited(["key"], ""), "key", "non-empty string"),
    (_edited(["key"], _DROP), "key", "missing"),
    (_edited(["hypotheses"], []), "hypotheses", "non-empty list"),
    (_edited(["extra"], 1), "extra", "unknown"),
    (_edited(["hypotheses", 1, "score"], {}), "hypotheses[1].score", "unknown"),
    (_edited(["hypotheses", 0, "words"], _DROP), "hypotheses[0].words", "missing"),
    (_edited(["hypotheses", 0, "words"], 7), "hypotheses[0].words", "string"),
    (_edited(["hypotheses", 0, "words"], ["A", "B C"]), "hypotheses[0].words[1]", "white space"),
    (_edited(["hypotheses", 2, "scores", "ctc"], "x"), "hypotheses[2].scores.ctc", "number"),
    (_edited(["hypotheses", 2, "scores", "ctc"], True), "hypotheses[2].scores.ctc", "number"),
    (_edited(["hypotheses", 2, "scores", "ctc"], math.inf), "hypotheses[2].scores.ctc", "finite"),
    (_edited(["hypotheses", 2, "scores", "ctc"], 10 ** 400), "hypotheses[2].scores.ctc", "too large"),
    (_edited(["hypotheses", 2, "scores", "ctc"], _DROP), "hypotheses[2].scores", "score names"),
    (_edited(["hypotheses", 1], "A B"), "hypotheses[1]", "JSON object"),
    ({"nbest": [JSON_EXAMPLE, _edited(["key"], 3)]}, "nbest[1].key", "string"),
    ([JSON_EXAMPLE, _edited(["hypotheses", 0, "scores"], [1])], "[1].hypotheses[0].scores", "object"),
    ({"nbest": [], "x": 1}, "x", "unknown"),
    (5, None, "JSON object"),
    ("[", None, "not valid JSON"),
])
def test_json_errors_name_the_path(obj: object, field: str | None, words: str) -> None:
    with pytest.raises(LatticeFormatError) as info:
        nbest_from_json(obj, source="body")
    assert info.value.field == field and words in str(info.value) and info.value.source == "body"


def test_json_invalid_text_names_the_line() -> None:
    with pytest.raises(LatticeFormatError) as info:
        nbest_from_json('{"key": "u",\n "hypotheses": [,]}', source="body")
    assert info.value.line == 2 and "not valid JSON" in str(info.value)


# ------------------------------------------------------------------------------------ dispatch
def test_guess_format_picks_nbest_and_keeps_the_old_formats() -> None:
    assert guess_format(json.dumps(JSON_EXAMPLE)) == "nbest-json"
    assert guess_format(json.dumps([JSON_EXAMPLE]).encode()) == "nbest-json"
    assert guess_format(json.dumps({"nbest": [JSON_EXAMPLE]})) == "nbest-json"
    assert guess_format(NBEST2) == "srilm-nbest"
    assert guess_format(b"NBestList1.0\n(-1) A\n") == "srilm-nbest"
    assert guess_format("-12.5 -3.25 2 A B\n-13 -2 1 A\n") == "srilm-nbest"
    lattice_json = {"key": "u", "start": 0, "arcs": [[0, 1, "a", -1.0, 0.0]], "finals": [[1, 0.0, 0.0]],
                    "meta": {"hypotheses": 3}}
    assert guess_format(json.dumps(lattice_json)) == "json"
    assert guess_format(json.dumps({"lattices": [lattice_json]})) == "json"
    assert guess_format("0 1 2 2\n1 2 3 3 0.5\n2\n") == "openfst"
    assert guess_format("0 1 1 1\n1\n") == "openfst"  # acceptor arc "0 1 1 1" is no SRILM line
    assert guess_format("utt1\n0 1 hello 1.5,2.5,\n1\n\n") == "kaldi"
    assert guess_format("VERSION=1.0\nUTTERANCE=x\nN=2 L=1\nI=0\nI=1\nJ=0 S=0 E=1 W=a a=-1 l=-2\n") == "htk"
    assert {"nbest-json", "srilm-nbest", "espnet-nbest"} <= set(READ_FORMATS)


def test_read_lattices_dispatches_srilm_with_the_key_from_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "spk1-utt3.nbest"
    path.write_text("-2 -1 2 <s> A B </s>\n-3 -1 1 A\n", encoding="utf-8")
    (lattice,) = read_lattice_file(path)
    assert lattice.key == "spk1-utt3"
    assert sorted(w for w, _, _ in paths(lattice)) == [("A",), ("A", "B")]
    with pytest.raises(LatticeFormatError, match="directory format"):
        read_lattices("x", "espnet-nbest")
    with pytest.raises(LatticeFormatError, match="score names") as info:
        read_lattices('{"key": "k", "hypotheses": [{"words": "A"}, {"words": "B", "scores": {"x": 1}}]}',
                      "nbest-json", source="b")
    assert info.value.source == "b" and info.value.field == "hypotheses[1].scores"


# ------------------------------------------------------------------------------------ fuzzing
_TOKENS = st.sampled_from(["NBestList1.0", "NBestList2.0", "(", ")", "(-12)", "(1e999)", "(x)", "st:", "et:", "g:",
                           "a:", "-1.5", "3", "0", "1", "2", "nan", "inf", "<s>", "</s>", "A", "B", "1e999", "-0"])
_LINES = st.lists(st.lists(_TOKENS, max_size=14).map(" ".join), max_size=5).map("\n".join)


def _check_nbest(nbest: NBestList) -> None:
    lattice = nbest_to_lattice(nbest)
    assert lattice.validate() is lattice and lattice.finals.numel() == len(nbest.hypotheses)


def _assert_reads_as(lattice: Lattice, expected: list[NBestHypothesis]) -> None:
    """The lattice's paths are exactly the expected hypotheses (words, named scores), by rank; a
    list without scores has zero ``acoustic`` and ``graph`` scores (the module docstring)."""
    found = sorted(paths(lattice), key=lambda p: p[2])
    assert [rank for _, _, rank in found] == list(range(len(expected)))
    for (words, scores, _), hypothesis in zip(found, expected):
        assert words == hypothesis.words
        assert scores == pytest.approx(hypothesis.scores or {"acoustic": 0.0, "graph": 0.0}, rel=1e-6, abs=1e-9)


# Valid SRILM lists written by the test, with the hypotheses it expects, computed here from the
# manual page's definitions (not with the reader's constants): bytelog b -> b * 1024 / 10000.5
# nats, log10 x -> x * ln(10) nats.
_SRILM_WORDS = st.lists(st.sampled_from(["A", "B", "C", "<unk>", "x'y"]), max_size=4)
_BYTELOG = st.integers(-10**6, 10**4)


@st.composite
def srilm_lists(draw) -> tuple[list[str], list[NBestHypothesis]]:
    """(lines of a valid list, blank lines included; the hypotheses it holds)."""
    fmt = draw(st.sampled_from(["NBestList1.0", "NBestList2.0", "plain"]))
    lines, expected = ([] if fmt == "plain" else [fmt]), []
    for _ in range(draw(st.integers(1, 4))):
        words = draw(_SRILM_WORDS)
        if fmt == "NBestList1.0":
            total = draw(_BYTELOG)
            lines.append(" ".join([f"({total})", *words]))
            scores = {"score": total * 1024 / 10000.5}
        elif fmt == "NBestList2.0":
            units, lm, acoustic = [], 0, 0
            for i, word in enumerate(words):
                g, a = draw(_BYTELOG), draw(_BYTELOG)
                units.append(f"{word} ( st: {i}.5 et: {i + 1}.25 g: {g} a: {a} )")  # each after the last
                lm, acoustic = lm + g, acoustic + a
            lines.append(" ".join([f"({draw(_BYTELOG)})", *units]))
            scores = {"acoustic": acoustic * 1024 / 10000.5, "lm": lm * 1024 / 10000.5}
        else:
            a, g = draw(st.integers(-10**5, 0)) / 100, draw(st.integers(-10**5, 0)) / 100
            lines.append(" ".join([str(a), str(g), str(len(words)), *words]))
            scores = {"acoustic": a * math.log(10), "lm": g * math.log(10)}
        expected.append(NBestHypothesis(tuple(words), scores))
        lines.extend([""] * draw(st.integers(0, 2)))
    return lines, expected


@st.composite
def broken_srilm_lists(draw) -> tuple[str, int]:
    """(a valid list with one hypothesis line broken, the 1-based number of that line)."""
    lines, _ = draw(srilm_lists())
    rows = [i for i, line in enumerate(lines) if line and not line.startswith("NBestList")]
    row = draw(st.sampled_from(rows))
    fields = lines[row].split()
    if lines[0].startswith("NBestList"):
        fields[0] = draw(st.sampled_from(["(x)", "(nan)", "-12", "(1e999)"]))
    else:
        index, value = draw(st.sampled_from([(0, "x"), (1, "inf"), (0, "1e999"), (2, "-1"), (2, "2.0"),
                                             (2, str(len(fields) - 2))]))  # a count one too many
        fields[index] = value
    lines[row] = " ".join(fields)
    return "\n".join(lines), row + 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(srilm_lists())
def test_fuzz_srilm_valid_lists_read_as_written(case: tuple[list[str], list[NBestHypothesis]]) -> None:
    lines, expected = case
    text = "\n".join(lines)
    nbest = read_srilm_nbest(text, source="dir/utt9.nbest")
    assert nbest.key == "utt9" and [h.words for h in nbest.hypotheses] == [h.words for h in expected]
    for got, want in zip(nbest.hypotheses, expected):
        assert got.scores == pytest.approx(want.scores, rel=1e-9, abs=1e-12)
    (lattice,) = read_lattices(text, "srilm-nbest")
    _assert_reads_as(lattice, expected)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_srilm_lists())
def test_fuzz_srilm_a_broken_line_is_named(case: tuple[str, int]) -> None:
    text, line = case
    with pytest.raises(LatticeFormatError) as info:
        read_lattices(text, "srilm-nbest", source="l.nbest")
    assert info.value.line == line and info.value.source == "l.nbest", (text, str(info.value))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LINES | st.text(max_size=80))
def test_fuzz_srilm(text: str) -> None:
    """Random text: a located error, or lists that agree with their own lattices."""
    try:
        nbest = read_srilm_nbest(text, source="f.nbest")
    except LatticeFormatError as err:
        assert err.source == "f.nbest"
        assert err.line is not None or not text.strip() or "score names" in err.reason or "no hypotheses" in err.reason
        return
    _check_nbest(nbest)
    _assert_reads_as(read_lattices(text, "srilm-nbest")[0], list(nbest.hypotheses))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.floats(allow_nan=True) | st.sampled_from(["a", "A B", "", "x y"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["key", "hypotheses", "words", "scores", "nbest", "lm", "x"]), children, max_size=4),
    max_leaves=25)


@st.composite
def json_nbest(draw) -> tuple[object, list[list[NBestHypothesis]], str]:
    """(a valid JSON n-best object, its lists' hypotheses, the field prefix of list i as '{}')."""
    names = draw(st.lists(st.sampled_from(["decoder", "ctc", "lm", "a b"]), unique=True, max_size=3))
    with_total = draw(st.booleans())
    lists, expected = [], []
    for i in range(draw(st.integers(1, 3))):
        items, hyps = [], []
        for _ in range(draw(st.integers(1, 4))):
            words = tuple(draw(st.lists(st.sampled_from(["A", "B", "C", "é", "<unk>"]), max_size=4)))
            scores = {name: draw(st.floats(-1e4, 1e4, allow_nan=False)) for name in names}
            item = {"words": " ".join(words) if draw(st.booleans()) else list(words), "scores": scores}
            total = draw(st.floats(-1e4, 1e4)) if with_total else None
            if with_total:
                item["total"] = total
            if not scores and draw(st.booleans()):
                del item["scores"]
            items.append(item)
            hyps.append(NBestHypothesis(words, scores, total))
        lists.append({"key": f"utt{i}", "hypotheses": items})
        expected.append(hyps)
    form = draw(st.sampled_from(["object", "list", "nbest"]))
    if form == "object":
        return lists[0], expected[:1], "{}"
    return (lists if form == "list" else {"nbest": lists}), expected, "[{}]." if form == "list" else "nbest[{}]."


@st.composite
def broken_json_nbest(draw) -> tuple[object, str]:
    """(a valid JSON n-best object with one field broken, the JSON path of that field)."""
    obj, expected, prefix = draw(json_nbest())
    lists = [obj] if prefix == "{}" else obj if isinstance(obj, list) else obj["nbest"]
    i = draw(st.integers(0, len(lists) - 1))
    j = draw(st.integers(0, len(lists[i]["hypotheses"]) - 1))
    item, where = lists[i]["hypotheses"][j], f"hypotheses[{j}]"
    kind = draw(st.sampled_from(["words", "word", "unknown", "score", "key"]))
    if kind == "words":
        item["words"], field = draw(st.sampled_from([5, None, {"a": 1}, True])), f"{where}.words"
    elif kind == "word":
        item["words"], field = ["A", draw(st.sampled_from(["", "a b", 3]))], f"{where}.words[1]"
    elif kind == "unknown":
        item["wrods"], field = "A", f"{where}.wrods"
    elif kind == "score" and item.get("scores"):
        name = sorted(item["scores"])[0]
        item["scores"][name] = draw(st.sampled_from(["x", None, True, [1]]))
        field = f"{where}.scores" + (f".{name}" if name.isidentifier() else f'["{name}"]')
    else:
        lists[i]["key"], field = draw(st.sampled_from(["", 7, None])), "key"
    return obj, prefix.format(i) + field if prefix != "{}" else field


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_nbest())
def test_fuzz_json_valid_lists_read_as_written(case) -> None:
    obj, expected, _ = case
    lists = nbest_from_json(json.dumps(obj))
    assert [nbest.key for nbest in lists] == [f"utt{i}" for i in range(len(expected))]
    assert [list(nbest.hypotheses) for nbest in lists] == expected  # JSON floats come back exactly
    for lattice, hyps in zip(read_lattices(json.dumps(obj), "nbest-json"), expected):
        _assert_reads_as(lattice, hyps)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_json_nbest())
def test_fuzz_json_a_broken_field_is_named(case) -> None:
    obj, field = case
    with pytest.raises(LatticeFormatError) as info:
        read_lattices(json.dumps(obj), "nbest-json")
    assert info.value.field == field, (obj, str(info.value))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_JSON)
def test_fuzz_json(obj: object) -> None:
    """Random structures: an error naming its field, or lists that survive the writer."""
    try:
        lists = nbest_from_json(obj)
    except LatticeFormatError as err:
        assert err.field or not isinstance(obj, (dict, list)) or obj == [] or obj == {"nbest": []}, str(err)
        return
    for nbest in lists:
        _check_nbest(nbest)
        assert nbest_from_json(json.loads(json.dumps(nbest_to_json(nbest)))) == [nbest]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=60) | st.text(max_size=60).map(str.encode), st.sampled_from(["nbest-json", "srilm-nbest"]))
def test_fuzz_bytes_into_read_lattices(data: bytes, fmt: str) -> None:
    try:
        lattices = read_lattices(data, fmt)
    except LatticeFormatError:
        return
    assert all(lattice.validate() is lattice for lattice in lattices)


_ESPNET_LINE = st.lists(st.sampled_from(["u1", "u2", "A", "tensor(-1.5)", "tensor(x)", "-2", "nan", '{"lm": -1}',
                                         "{'lm': tensor(-2.0)}", '{"lm": "tensor(-1)"}', "{", "[1]", '{"": 1}']),
                        max_size=4).map(" ".join)
_ESPNET_FILE = st.lists(_ESPNET_LINE, max_size=3).map("\n".join).map(str.encode) | st.binary(max_size=20)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(["text", "score", "scores"]), _ESPNET_FILE, max_size=3),
                min_size=1, max_size=3), st.sampled_from([1, 2]))
def test_fuzz_espnet(folders: list[dict[str, bytes]], first: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for k, files in enumerate(folders, first):
            (Path(tmp) / f"{k}best_recog").mkdir()
            for name, content in files.items():
                (Path(tmp) / f"{k}best_recog" / name).write_bytes(content)
        try:
            lists = read_espnet_nbest(tmp)
        except LatticeFormatError:
            return
    assert first == 1
    for nbest in lists:
        _check_nbest(nbest)


def _scores_or_error(text: str) -> dict[str, float] | str:
    from lattices.formats.nbest import _espnet_scores

    def fail(message: str) -> LatticeFormatError:
        return LatticeFormatError(message, source="scores", line=1, key="u")

    try:
        return _espnet_scores(text, fail)
    except LatticeFormatError as err:
        return str(err)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["decoder", "ctc", "lm", "a_1", "é"]),
                          st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                                    st.sampled_from(["1e999", "-0", "1.2.3", "0x10", "1_000", "+.5e-3", "nan", "", "-"]))),
                min_size=1, max_size=4))
def test_espnets_own_score_lines_read_as_the_general_way_reads_them(entries) -> None:
    """The one-match path for lines as ESPnet writes them gives the general reader's scores, or
    its error (a value that is no finite float takes the general way)."""
    import re
    from lattices.formats import nbest

    text = "{" + ", ".join(f'"{name}": "tensor({value})"' for name, value in entries) + "}"
    fast = _scores_or_error(text)
    saved, nbest._PLAIN_SCORES = nbest._PLAIN_SCORES, re.compile(r"(?!)")
    try:
        general = _scores_or_error(text)
    finally:
        nbest._PLAIN_SCORES = saved
    assert fast == general


def test_espnets_own_score_line_takes_the_one_match_path() -> None:
    from lattices.formats import nbest

    line = '{"decoder": "tensor(-9.8537)", "ctc": "tensor(-8.9511)", "lm": "tensor(-121.6522)"}'
    assert nbest._PLAIN_SCORES.fullmatch(line)
    assert _scores_or_error(line) == {"decoder": -9.8537, "ctc": -8.9511, "lm": -121.6522}
