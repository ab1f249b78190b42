"""One answer from every door: the same lattices and n-best lists, with the same options, rescored
through ``afp rescore``, ``afp rescore --workers 2``, ``POST /v1/rescore``, ``afp tune``'s tuner at
a fixed point and ``afp rescore-cuts`` give the same best words and scores (within
:data:`afp.compare.SCORE_TOLERANCE`, 1e-4).

The inputs carry what has split the doors before: out-of-vocabulary words, a literal ``<unk>``
with an unknown-word penalty, an old LM subtracted exactly (``--old-lm``), several LM weights,
lattice and n-best input, Viterbi and MBR decoding; an AFP model and a mixture directory (the AFP
model and an n-gram, as the bundled defaults are).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from afp.compare import SCORE_TOLERANCE
from lattices.formats import read_lattice_file
from afp.mixtures import write_mixture
from service.cli import main
from tests.factories import nbest_to_json, saved_model
from tests.lm.ngram_reference import NgramScorer, read_arpa
from tests.lm.test_ngram import HAND
from tests.service.test_app import client_for

# Kaldi CompactLattices (graph,acoustic costs): OOV words (zork, quux), a literal <unk>, silence
LATTICES = """utt1
0 1 the 1.5,10,
0 1 a 1.0,12,
1 2 cat 0.5,8,
1 2 zork 0.4,8.5,
2 3 sat 0.5,40,
2 3 <unk> 0.7,1,
3 0,0,

utt2
0 1 the 1,10,
1 2 dog 2,11,
1 2 <unk> 1.5,11.5,
2 3 !SIL 0,3,
3 4 ran 1,45,
3 4 quux 0.8,1,
4

"""

# n-best lists (the nbest-json form): named scores, the recogniser's LM as "lm"
NBEST = [
    {"key": "utt3", "hypotheses": [
        {"words": "the cat sat", "scores": {"decoder": -3.0, "ctc": -2.5, "lm": -9.0}},
        {"words": "the <unk> sat", "scores": {"decoder": -0.5, "ctc": -0.4, "lm": -8.5}},
        {"words": "a cat zork", "scores": {"decoder": -2.9, "ctc": -2.4, "lm": -12.0}},
        {"words": "the cat", "scores": {"decoder": -3.5, "ctc": -3.1, "lm": -7.0}}]},
    {"key": "utt4", "hypotheses": [
        {"words": "big dog ran", "scores": {"decoder": -4.0, "ctc": -3.0, "lm": -10.0}},
        {"words": "big quux ran", "scores": {"decoder": -0.9, "ctc": -0.2, "lm": -11.0}},
        {"words": "a big dog ran", "scores": {"decoder": -4.4, "ctc": -3.1, "lm": -12.5}}]},
]
REFERENCES = {"utt1": "the cat sat", "utt2": "the dog ran", "utt3": "the cat sat", "utt4": "big dog ran"}
LM_WEIGHTS = (0.5, 1.0)

CASES = {
    # name: (input file, format, options as CLI flags, the same as HTTP fields)
    "lattice-viterbi": ("lattices.txt", "kaldi", ["--unk-penalty", "-3", "--old-lm-weight", "0.5"],
                        {"unk_penalty": -3, "old_lm_weight": 0.5}),
    # the same lattices in upper case, for a lower-case model: every door looks the words up in the
    # model's case (match_case) and answers with the input's own spellings
    "lattice-other-case": ("lattices-upper.txt", "kaldi", ["--unk-penalty", "-3", "--old-lm-weight", "0.5"],
                           {"unk_penalty": -3, "old_lm_weight": 0.5}),
    "lattice-mbr": ("lattices.txt", "kaldi", ["--unk-penalty", "-3", "--decode", "mbr", "--mbr-scale", "0.5"],
                    {"unk_penalty": -3, "decode": "mbr", "mbr_scale": 0.5}),
    "nbest-viterbi": ("nbest.json", "nbest-json", ["--score-weights", "decoder=0.6,ctc=0.4", "--old-lm-weight", "0.3",
                                                   "--unk-penalty", "-2", "--word-penalty", "0.5"],
                      {"score_weights": {"decoder": 0.6, "ctc": 0.4}, "old_lm_weight": 0.3, "unk_penalty": -2,
                       "word_penalty": 0.5}),
    "nbest-mbr": ("nbest.json", "nbest-json", ["--score-weights", "decoder=0.6,ctc=0.4", "--old-lm-weight", "0.3",
                                               "--decode", "mbr"],
                  {"score_weights": {"decoder": 0.6, "ctc": 0.4}, "old_lm_weight": 0.3, "decode": "mbr"}),
}

Answer = dict[tuple[str, float], tuple[list[str], float]]


def upper_case(text: str) -> str:
    """A Kaldi text archive with its words (not ``<unk>``, ``!SIL``, the keys) in upper case."""
    lines = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) == 4 and parts[2] not in ("<unk>", "!SIL"):
            parts[2] = parts[2].upper()
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("parity")
    saved_model(root / "model", cell="gru", mode="afp", rho=2)
    (root / "lattices.txt").write_text(LATTICES)
    (root / "lattices-upper.txt").write_text(upper_case(LATTICES))
    (root / "nbest.json").write_text(json.dumps(NBEST))
    (root / "refs.txt").write_text("".join(f"{key} {words}\n" for key, words in REFERENCES.items()))
    (root / "G.arpa").write_text(HAND)
    write_mixture(root / "mixture", [root / "model", root / "G.arpa"], [0.7, 0.3])
    return root


MODELS = ("model", "mixture")  # an AFP model directory; a mixture directory of it and G.arpa


def cli_answer(capsys, root: Path, name: str, extra: list[str], model: str = "model") -> Answer:
    path, fmt, flags, _ = CASES[name]
    argv = ["rescore", "--model", str(root / model), "--format", fmt, "--json", "--old-lm", str(root / "G.arpa"),
            *[a for w in LM_WEIGHTS for a in ("--lm-weight", str(w))], *flags, *extra, str(root / path)]
    assert main(argv) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return {(r["key"], r["lm_weight"]): (r["best"]["words"], r["best"]["score"]) for r in rows}


def http_answer(root: Path, name: str, model: str = "model") -> Answer:
    path, fmt, _, fields = CASES[name]
    text = (root / path).read_text()
    lattice = json.loads(text) if fmt == "nbest-json" else text
    with client_for(root / model, old_lm=str(root / "G.arpa")) as client:
        r = client.post("/v1/rescore", json={"format": fmt, "lattice": lattice, "lm_weight": list(LM_WEIGHTS),
                                             **fields})
    assert r.status_code == 200, r.text
    return {(x["key"], x["lm_weight"]): (x["best"]["words"], x["best"]["score"]) for x in r.json()["results"]}


def tune_answer(root: Path, name: str, model: str = "model") -> Answer:
    """``afp tune``'s tuner made as the command makes it (:func:`service.cli._tune_job`,
    :func:`afp.tune_job.load_tuner`), with the case's flags that ``afp tune`` takes; the weights it
    tunes are the point it decides at."""
    from afp.tune_job import load_tuner
    from afp.wer import read_references
    from service.cli import _tune_job, build_parser

    path, fmt, flags, fields = CASES[name]
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    takes = commands.choices["tune"]._option_string_actions
    given = [word for flag, value in zip(flags[::2], flags[1::2]) if flag in takes for word in (flag, value)]
    argv = ["tune", "--model", str(root / model), "--format", fmt, "--old-lm", str(root / "G.arpa"), "--refs",
            str(root / "refs.txt"), *given, *(["--mbr"] if fields.get("decode") == "mbr" else []), str(root / path)]
    args = parser.parse_args(argv)
    args.argv = argv
    job = _tune_job(args)
    tuner = load_tuner(job, read_references(job.refs))
    out: Answer = {}
    for weight in LM_WEIGHTS:
        point = {"lm_weight": weight, "old_lm_weight": fields.get("old_lm_weight", 1.0),  # no totals: the old LM at 1
                 "word_penalty": fields.get("word_penalty", 0.0), "unk_penalty": fields.get("unk_penalty", 0.0)}
        for key, words, score in tuner.decisions(point, mbr=fields.get("decode") == "mbr"):
            out[(key, weight)] = (words, score)
    return out


def cuts_answer(capsys, root: Path, name: str, model: str = "model") -> Answer:
    from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet, load_manifest

    path, fmt, flags, _ = CASES[name]
    keys = [k for k in REFERENCES if k in (root / path).read_text()]
    recordings = RecordingSet.from_recordings(
        [Recording(id=k, sources=[], sampling_rate=16000, num_samples=16000, duration=1.0) for k in keys])
    supervisions = SupervisionSet.from_segments(
        [SupervisionSegment(id=f"sup-{k}", recording_id=k, start=0, duration=1.0, text=REFERENCES[k]) for k in keys])
    cuts = CutSet.from_manifests(recordings=recordings, supervisions=supervisions)
    cuts = CutSet.from_cuts(c.with_custom("lattice", str(root / path)).with_custom("lattice_format", fmt)
                            .with_custom("lattice_key", c.recording_id) for c in cuts)
    manifest, out = root / f"cuts-{name}.jsonl.gz", root / f"out-{name}.jsonl.gz"
    cuts.to_file(manifest)
    argv = ["rescore-cuts", "--model", str(root / model), "--old-lm", str(root / "G.arpa"),
            *[a for w in LM_WEIGHTS for a in ("--lm-weight", str(w))], *flags, "--cuts", str(manifest), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    answer: Answer = {}
    for cut in load_manifest(out):
        for weight in LM_WEIGHTS:
            words = cut.custom["hypotheses"][f"{weight:g}"].split()
            score = cut.custom["rescore"]["per_lm_weight"][f"{weight:g}"]["score"]
            answer[(cut.recording_id, weight)] = (words, score)
    return answer


def assert_same(expected: Answer, got: Answer, door: str) -> None:
    assert sorted(got) == sorted(expected), door
    for key, (words, score) in expected.items():
        assert got[key][0] == words, (door, key, got[key][0], words)
        assert SCORE_TOLERANCE.equal(got[key][1], score), (door, key, got[key][1], score)


def brute_force_answer(root: Path, name: str, model: str) -> Answer:
    """The expected answer of a Viterbi lattice case, computed without the engine: every path of
    each lattice enumerated, its words scored as a sentence by the model and by the old LM
    (``afp.Model.score``, the ``afp score`` path), and combined by the formula of
    :mod:`lattices.scored` (acoustic at 0.1, the graph score's rest at 1, the old LM at
    ``old_lm_weight``, the new LM and its unknown-word penalty at the LM weight)."""
    import afp
    from tests.factories import all_paths

    path, fmt, _, fields = CASES[name]
    new_lm, old_lm = afp.load_model(root / model), afp.load_model(root / "G.arpa")
    out: Answer = {}
    for lattice in read_lattice_file(root / path, fmt):
        paths = []
        for arcs, final in all_paths(lattice):
            words = [lattice.symbols[w] for w in lattice.words[arcs].tolist() if lattice.symbols[w] not in ("<eps>", "!SIL")]
            new, old = new_lm.score([words])[0], old_lm.score([words])[0]
            acoustic = float(lattice.acoustic[arcs].sum() + lattice.final_acoustic[final])
            graph = float(lattice.graph[arcs].sum() + lattice.final_graph[final])
            paths.append((words, acoustic, graph, old.logprob, new.logprob, new.unknown))
        for weight in LM_WEIGHTS:
            totals = [(0.1 * ac + (g - old) + fields.get("old_lm_weight", 1.0) * old
                       + weight * (new + fields.get("unk_penalty", 0.0) * unk), words)
                      for words, ac, g, old, new, unk in paths]
            score, words = max(totals, key=lambda t: t[0])
            out[(lattice.key, weight)] = (words, score)
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name", list(CASES))
def test_every_door_gives_the_same_answer(capsys, setup, name, model):
    reference = cli_answer(capsys, setup, name, [], model)
    if name == "lattice-viterbi":  # and the answer is the right one, not only the same one
        assert_same(brute_force_answer(setup, name, model), reference, "brute force")
    if name == "lattice-other-case":  # the lower-case answer, in the input's spellings
        lower = brute_force_answer(setup, "lattice-viterbi", model)
        spelled = {k: ([w if w == "<unk>" else w.upper() for w in words], score) for k, (words, score) in lower.items()}
        assert_same(spelled, reference, "brute force, other case")
    assert len(reference) == 2 * len(LM_WEIGHTS)
    words = {w for words, _ in reference.values() for w in words}
    assert words & {"<unk>", "zork", "quux"}, "the inputs' unknown words were never chosen: the test would not see them"
    assert_same(reference, cli_answer(capsys, setup, name, ["--workers", "2", "--batch-pairs", "7"], model),
                "--workers 2")
    assert_same(reference, http_answer(setup, name, model), "POST /v1/rescore")
    assert_same(reference, tune_answer(setup, name, model), "afp tune")
    assert_same(reference, cuts_answer(capsys, setup, name, model), "afp rescore-cuts")
    if model == "mixture":  # the n-gram part counts: the mixture is not the AFP model's answer
        plain = cli_answer(capsys, setup, name, [], "model")
        assert any(abs(plain[k][1] - reference[k][1]) > 1e-3 for k in reference)


def test_the_models_own_unknown_word_penalty_is_every_doors_default(tmp_path, capsys):
    """A model that recorded 100 distinct training words mapped to <unk>: every door's default
    unk_penalty is -log 100; an explicit one wins."""
    import math

    import afp

    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    config = json.loads((model / "config.json").read_text())
    config["training"]["unk_types"] = 100
    (model / "config.json").write_text(json.dumps(config))
    lattice = tmp_path / "lat.txt"
    lattice.write_text("u\n0 1 the 1,1,\n0 1 zork 1,1,\n1 2 cat 1,1,\n2\n\n")
    expected = -math.log(100)
    assert main(["rescore", "--model", str(model), "--json", str(lattice)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["unk_penalty"] == pytest.approx(expected)
    with client_for(model) as client:
        r = client.post("/v1/rescore", json={"lattice": lattice.read_text()}).json()["results"][0]
        assert r["unk_penalty"] == pytest.approx(expected)
        explicit = client.post("/v1/rescore", json={"lattice": lattice.read_text(), "unk_penalty": 0}).json()
        assert explicit["results"][0]["unk_penalty"] == 0
    assert afp.load_model(model).rescore(str(lattice))[0][0].unk_penalty == pytest.approx(expected)
    assert main(["rescore", "--model", str(model), "--unk-penalty", "-1", "--json", str(lattice)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["unk_penalty"] == -1


def test_untuned_defaults_are_the_same_at_every_door(tmp_path, capsys):
    """Lists that carry the recogniser's totals (0.6 decoder + 0.4 ctc + 0.6 lm): with no weights
    given, an ESPnet folder through ``afp rescore``, the same lists as nbest-json through the CLI,
    ``POST /v1/rescore`` and ``afp.Model.rescore`` all keep that combination (old LM 0.6, the new
    LM at a quarter of it) and choose the same words with the same scores."""
    import afp
    from lattices.formats.nbest import nbest_from_json, read_espnet_nbest
    from tests.service.test_nbest_cli import write_espnet

    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    weights = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}
    lists = {n["key"]: [(h["words"], h["scores"]) for h in n["hypotheses"]] for n in NBEST}
    folder = write_espnet(tmp_path / "decode", lists, weights)
    as_json = [nbest_to_json(n) for n in read_espnet_nbest(folder)]
    assert all("total" in h for n in as_json for h in n["hypotheses"])
    assert nbest_from_json(as_json)[0].hypotheses[0].total is not None
    (tmp_path / "lists.json").write_text(json.dumps(as_json))

    def answers(rows: list[dict]) -> list[tuple]:
        return [(r["key"], r["best"]["words"], round(r["best"]["score"], 4), r["old_lm_weight"],
                 round(r["lm_weight"], 9), r["score_weights"]) for r in rows]

    runs = []
    for source, fmt in ((folder, "espnet-nbest"), (tmp_path / "lists.json", "nbest-json")):
        assert main(["rescore", "--model", str(model), "--json", "--format", fmt, str(source)]) == 0
        runs.append(answers([json.loads(line) for line in capsys.readouterr().out.splitlines()]))
    with client_for(model) as client:
        r = client.post("/v1/rescore", json={"format": "nbest-json", "lattice": as_json})
        assert r.status_code == 200, r.text
        runs.append(answers(r.json()["results"]))
        assert any("the first pass's LM 'lm' at 0.6" in w for w in r.json()["warnings"])
    runs.append(answers([res[0].to_json() for res in afp.load_model(model).rescore(str(folder))]))
    assert runs[0][0][3:] == (0.6, 0.15, {"decoder": 0.6, "ctc": 0.4})
    assert all(run == runs[0] for run in runs[1:]), runs


@pytest.mark.parametrize("target", [None, 1_000])
def test_a_dense_lattice_is_made_small_alike_at_every_door(tmp_path, capsys, target):
    """A real PocketSphinx lattice (dense: its order-3 expansion bound is 276 times its links) at the
    default target (20,000) and at ``--target-arcs 1000`` / ``target_arcs`` / ``target_arcs=``:
    ``afp rescore``, ``--workers 2``, ``POST /v1/rescore`` and ``afp.Model.rescore`` reduce it to the
    same lattice (the same stages and pruning report) and choose the same words with the same score."""
    import gzip

    import afp

    model = saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)
    source = sorted((Path(__file__).parent / "fixtures" / "pocketsphinx").glob("*0920.slf.gz"))[0]
    lattice = tmp_path / "utt.slf"
    lattice.write_bytes(gzip.decompress(source.read_bytes()))
    flags = [] if target is None else ["--target-arcs", str(target)]
    fields = {} if target is None else {"target_arcs": target}

    def answer(row: dict) -> tuple:
        stages = [(s["stage"], s["states"], s["arcs"]) for s in row["stages"]]
        return (row["best"]["words"], round(row["best"]["score"], 4), row["expanded_arcs"], stages,
                {k: v for k, v in row["pruned"].items()})

    runs = []
    for extra in ([], ["--workers", "2"]):
        assert main(["rescore", "--model", str(model), "--json", *flags, *extra, str(lattice)]) == 0
        runs.append(answer(json.loads(capsys.readouterr().out.splitlines()[0])))
    with client_for(model) as client:
        r = client.post("/v1/rescore", json={"format": "pocketsphinx", "lattice": lattice.read_text(), **fields})
        assert r.status_code == 200, r.text
        runs.append(answer(r.json()["results"][0]))
    runs.append(answer(afp.load_model(model).rescore(str(lattice), **fields)[0][0].to_json()))
    assert all(run == runs[0] for run in runs[1:]), runs
    assert runs[0][2] <= (target or 20_000) and [s[0] for s in runs[0][3]][:3] == ["input", "determinize", "minimize"]
    assert ("budget" in runs[0][4]) == (target is not None)  # at 20,000 the minimal lattice fits unfitted
