"""afp tune: one scoring pass, and every grid point's WER equal to rescoring with those weights."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
import torch

from lattices.formats.nbest import NBestHypothesis, NBestList, nbest_to_lattice
from lattices.rescore import RescoreOptions, rescore
from lm.checkpoint import LoadedModel, load_checkpoint
from lm.scorer import LMScorer
from service.cli import main
from afp.tune import GRID_NAMES, Grid, Tuner, tune
from afp.wer import word_errors
from tests.factories import nbest_to_json, replacing_options, WORDS, make_model, random_lattice, saved_model, tiny_vocab

VOCAB = tiny_vocab()
GRID = Grid(lm_weights=(0.0, 0.5, 1.0, 2.0), old_lm_weights=(0.0, 1.0), word_penalties=(0.0, 2.0),
            unk_penalties=(0.0, -3.0))


def lm_scorer(seed: int = 1) -> LMScorer:
    model = make_model(VOCAB, seed=seed, cell="gru", mode="afp", rho=2)
    return LMScorer(LoadedModel(model.config, VOCAB, model))


def dev_set(count: int, seed: int = 0) -> tuple[list[NBestList], dict[str, list[str]]]:
    """Random n-best lists whose reference is one of the hypotheses (not always the first)."""
    rng = random.Random(seed)
    lists, refs = [], {}
    for u in range(count):
        base = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        hyps = []
        for _ in range(rng.randint(2, 6)):
            words = list(base)
            for _ in range(rng.randint(0, 2)):
                op = rng.random()
                if op < 0.4 and words:
                    words[rng.randrange(len(words))] = rng.choice([*WORDS, "zebra"])
                elif op < 0.7:
                    words.insert(rng.randrange(len(words) + 1), rng.choice(WORDS))
                elif words:
                    del words[rng.randrange(len(words))]
            hyps.append(NBestHypothesis(tuple(words), {"decoder": -rng.uniform(0, 5), "lm": -rng.uniform(5, 20)}))
        key = f"utt{u}"
        refs[key] = list(rng.choice(hyps).words) if rng.random() < 0.8 else base
        lists.append(NBestList(key, tuple(hyps)))
    return lists, refs


def engine_errors(lattices, refs, scorer, point, options) -> int:
    options = replacing_options(lm_weights=(point["lm_weight"],), old_lm_weight=point["old_lm_weight"],
                             word_penalty=point["word_penalty"], unk_penalty=point["unk_penalty"],
                             score_weights=options.score_weights, acoustic_scale=options.acoustic_scale)
    return sum(word_errors(refs[lat.key], rescore(lat, scorer, options)[0].best.words).errors for lat in lattices)


def test_every_grid_point_equals_rescoring_with_its_weights():
    lists, refs = dev_set(25)
    scorer = lm_scorer()
    options = replacing_options(score_weights={"decoder": 0.5})
    tuner = Tuner(scorer, options, refs)
    tuner.add(nbest_to_lattice(n) for n in lists)
    assert all(u.hyp_parts is not None for u in tuner.utterances)  # n-best lists take the fast path
    points = GRID.points()
    fast = tuner.evaluate(points)
    lattices = [nbest_to_lattice(n) for n in lists]
    assert [int(e) for e in fast] == [engine_errors(lattices, refs, scorer, p, options) for p in points]
    assert len(set(fast.tolist())) > 1  # the grid matters on this data


def test_first_pass_oracle_and_report():
    lists, refs = dev_set(30, seed=4)
    tuner = Tuner(lm_scorer(), replacing_options(), refs, mbr=True)
    tuner.add(nbest_to_lattice(n) for n in lists)
    first = sum(word_errors(refs[n.key], list(n.hypotheses[0].words)).errors for n in lists)
    oracle = sum(min(word_errors(refs[n.key], list(h.words)).errors for h in n.hypotheses) for n in lists)
    ref_words = sum(len(refs[n.key]) for n in lists)
    report = tune(tuner, GRID, mbr=True)
    assert report["first_pass_wer"] == pytest.approx(100 * first / ref_words)
    assert report["oracle_wer"] == pytest.approx(100 * oracle / ref_words)
    assert report["oracle_wer"] <= report["best"]["wer"] <= min(r["wer"] for r in report["grid"])
    assert len(report["grid"]) == 32 and all("mbr_wer" in r for r in report["grid"])
    assert report["best"]["errors"]["errors"] == round(report["best"]["wer"] * ref_words / 100)


@pytest.mark.parametrize("seed", range(2))
def test_lattices_take_the_search_path_with_the_same_answers(seed):
    lattices = [random_lattice(seed * 10 + i, key=f"l{i}") for i in range(4)]
    scorer = lm_scorer(seed)
    options = replacing_options(acoustic_scale=0.1)
    first = [rescore(lat, scorer, options)[0].best.words for lat in lattices]
    refs = {lat.key: words[:-1] + ["extra"] for lat, words in zip(lattices, first)}
    tuner = Tuner(scorer, options, refs)
    tuner.add(lattices)
    assert all(u.scored is not None for u in tuner.utterances)  # none is a tree: every one is searched
    points = GRID.points()[:6]
    assert [int(e) for e in tuner.evaluate(points)] == [engine_errors(lattices, refs, scorer, p, options)
                                                        for p in points]


def test_the_case_decision_counts_every_utterance():
    """A dev set whose first utterance has no cased letters ("42"), the rest lower-case hypotheses
    of upper-case references, added one utterance at a time: words compare without regard to case
    for every utterance, the first included."""
    def listed(key, *hyps):
        return nbest_to_lattice(NBestList(key, tuple(NBestHypothesis(tuple(words), {"decoder": -1.0 - i, "lm": -5.0})
                                                     for i, words in enumerate(hyps))))

    refs = {"u0": ["42"], "u1": ["THE", "CAT"], "u2": ["A", "DOG"]}
    tuner = Tuner(lm_scorer(), replacing_options(), refs)
    tuner.add([listed("u0", ["42"], ["42", "42"])])
    assert tuner.ignore_case is False  # "42" says nothing about case yet
    tuner.add([listed("u1", ["the", "cat"], ["a", "cat"])])
    tuner.add([listed("u2", ["a", "dog"], ["the", "dog"], ["a", "dog"])])
    assert tuner.ignore_case is True
    assert [u.first_pass.errors for u in tuner.utterances] == [0, 0, 0]
    assert [u.error_counts.tolist() for u in tuner.utterances] == [[0, 1], [0, 1], [0, 1, 0]]
    assert [u.group_errors.tolist() for u in tuner.utterances] == [[0, 1], [0, 1], [0, 1]]
    assert tuner.oracle().errors == 0 and tuner.first_pass().ref_words == 5
    report = tune(tuner, Grid(lm_weights=(0.0,), old_lm_weights=(0.0,), word_penalties=(0.0,), unk_penalties=(0.0,)))
    assert report["ignore_case"] is True and report["first_pass_wer"] == 0.0 and report["best"]["wer"] == 0.0


def test_cli_json_contract_and_plot(tmp_path, capsys):
    lists, refs = dev_set(12, seed=2)
    nbest_file = tmp_path / "dev.json"
    nbest_file.write_text(json.dumps({"nbest": [nbest_to_json(n) for n in lists]}))
    refs_file = tmp_path / "text"
    refs_file.write_text("".join(f"{k} {' '.join(v)}\n" for k, v in refs.items()))
    model = saved_model(tmp_path / "model", cell="gru", rho=2)
    plot = tmp_path / "wer.png"
    code = main(["tune", "--model", str(model), "--refs", str(refs_file), "--score-weights", "decoder=0.6",
                 "--lm-weights", "0:1:0.5", "--old-lm-weights", "0,1", "--unk-penalties", "0,-5", "--mbr",
                 "--plot", str(plot), "--json", str(nbest_file)])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["best"]) >= {"lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "wer"}
    assert len(report["grid"]) == 3 * 2 * 1 * 2 and report["utterances"] == 12
    assert report["score_weights"] == {"decoder": 0.6}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every grid point's WER, decoded again here by brute force over each list's hypotheses
    # (total = 0.6 decoder + old_lm_weight lm + lm_weight (new LM + unk_penalty per unknown word)
    # + word_penalty per word, the new LM from the model's own whole-sentence forward pass) and
    # scored with kaldialign; the best is the grid's first point of fewest errors
    import kaldialign

    loaded = load_checkpoint(model)
    ref_words = sum(len(refs[n.key]) for n in lists)
    assert report["ref_words"] == ref_words
    new_lm = {h.words: whole_sentence_logprob(loaded, h.words) for n in lists for h in n.hypotheses}
    unknown = {h.words: sum(not loaded.vocab.is_known(w) for w in h.words) for n in lists for h in n.hypotheses}
    brute = []
    for row in report["grid"]:
        errors = 0
        for n in lists:
            totals = [0.6 * h.scores["decoder"] + row["old_lm_weight"] * h.scores["lm"]
                      + row["lm_weight"] * (new_lm[h.words] + row["unk_penalty"] * unknown[h.words])
                      + row["word_penalty"] * len(h.words) for h in n.hypotheses]
            chosen = n.hypotheses[max(range(len(totals)), key=lambda i: (totals[i], -i))]
            result = kaldialign.edit_distance(refs[n.key], list(chosen.words))
            errors += result["sub"] + result["ins"] + result["del"]
        brute.append(errors)
        assert row["errors"] == errors and row["wer"] == pytest.approx(100 * errors / ref_words), row
    assert len(set(brute)) > 1  # the grid matters on this data: the argmin means something
    first_best = report["grid"][brute.index(min(brute))]
    assert {k: report["best"][k] for k in GRID_NAMES} == {k: first_best[k] for k in GRID_NAMES}
    assert report["best"]["wer"] == pytest.approx(100 * min(brute) / ref_words)
    assert report["best"]["errors"]["errors"] == min(brute)


def whole_sentence_logprob(loaded, words) -> float:
    """ln P(words </s> | <s>) from the model's forward pass over the whole sentence (not the
    rescoring engine's context scoring)."""
    ids = [loaded.vocab.bos_id, *loaded.vocab.encode(list(words)), loaded.vocab.eos_id]
    with torch.no_grad():
        values = loaded.model.token_logprobs(torch.tensor([ids[:-1]]), torch.tensor([ids[1:]]),
                                             torch.tensor([len(ids) - 1]))
    return float(values.double().sum())


def test_cli_errors_are_one_line(tmp_path, capsys):
    lists, refs = dev_set(3)
    nbest_file = tmp_path / "dev.json"
    nbest_file.write_text(json.dumps([nbest_to_json(n) for n in lists]))
    refs_file = tmp_path / "text"
    refs_file.write_text("utt0 the cat\n")  # utt1, utt2 have no reference
    model = saved_model(tmp_path / "model", cell="gru", rho=2)
    assert main(["tune", "--model", str(model), "--refs", str(refs_file), str(nbest_file)]) == 2
    assert "utt1" in capsys.readouterr().err
    assert main(["tune", "--model", str(model), "--refs", str(refs_file), "--lm-weights", "a,b",
                 str(nbest_file)]) == 2
    assert "--lm-weights" in capsys.readouterr().err


def test_joint_tune_never_ends_above_the_first_pass_and_its_weights_reproduce_it(tmp_path, capsys):
    """The CLI's default search: from the first pass's own weights (recovered from the lists),
    never above its WER on the tuning set; --save / rescore --weights reproduces the WER."""
    lists, refs = dev_set(24, seed=7)
    rng = random.Random(3)
    recogniser = []  # each list in the order of the recogniser's own combination, 0.6 decoder + 0.4 ctc + 0.6 lm
    for nbest in lists:
        hyps = [{"words": " ".join(h.words), "scores": {"decoder": h.scores["decoder"], "ctc": -rng.uniform(0, 5),
                                                        "lm": h.scores["lm"]}} for h in nbest.hypotheses]
        total = [0.6 * h["scores"]["decoder"] + 0.4 * h["scores"]["ctc"] + 0.6 * h["scores"]["lm"] for h in hyps]
        recogniser.append({"key": nbest.key, "hypotheses": [h for _, h in sorted(zip(total, hyps), key=lambda x: -x[0])]})
    directory = tmp_path / "dev.json"
    directory.write_text(json.dumps(recogniser))
    ref_path = tmp_path / "refs.txt"
    ref_path.write_text("".join(f"{k} {' '.join(v)}\n" for k, v in refs.items()))
    model = saved_model(tmp_path / "model", cell="gru", rho=2)
    weights = tmp_path / "w.json"
    assert main(["tune", "--model", str(model), "--refs", str(ref_path), "--score-weights", "decoder=0.6,ctc=0.4",
                 "--folds", "2", "--restarts", "1", "--save", str(weights), "--json", str(directory)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best"]["wer"] <= report["first_pass_wer"] and report["start"]["wer"] == report["first_pass_wer"]
    assert report["start"]["reproduces_first_pass"] == 1.0
    assert report["cross_validated"]["folds"] == 2 and "against_first_pass" in report["best"]
    saved = json.loads(weights.read_text())
    chosen = report["chosen"]["point"]
    assert saved["lm_weight"] == chosen["lm_weight"] and saved["old_lm_weight"] == chosen["old_lm_weight"]
    # the dev set as a count and a digest of its keys, the command without its inputs (issue 40)
    keys = "\n".join(sorted(refs)).encode()
    assert saved["tuned"]["inputs"] == {"count": 1, "utterances": 24, "keys_sha256": hashlib.sha256(keys).hexdigest()}
    assert str(directory) not in saved["tuned"]["command"] and saved["tuned"]["command"].endswith("<1 inputs>")
    expected = report["start"]["wer"] if report["chosen"]["is_first_pass"] else report["best"]["wer"]
    assert main(["rescore", "--model", str(model), "--weights", str(weights), "--json", str(directory)]) == 0
    out = tmp_path / "hyps.jsonl"
    out.write_text(capsys.readouterr().out)
    assert main(["wer", "--refs", str(ref_path), "--json", str(out)]) == 0
    (system,) = json.loads(capsys.readouterr().out)["systems"]
    assert system["wer"] == pytest.approx(expected, abs=1e-9)
    assert main(["rescore", "--model", str(model), "--weights", str(weights), "--lm-weight", "1", str(directory)]) == 2
    assert "give it or --lm-weight, not both" in capsys.readouterr().err


def test_a_baseline_better_than_every_point_saves_nothing(tmp_path, capsys):
    """--baseline (a recogniser's own 1-best): its WER is reported; a baseline that is the
    references themselves (0 errors) beats any point the search finds on noisy lists, so --save
    refuses and writes nothing; the baseline that is the first pass's own 1-best never does."""
    lists, refs = dev_set(12, seed=5)
    directory = tmp_path / "dev.json"
    directory.write_text(json.dumps([{"key": n.key, "hypotheses": [{"words": " ".join(h.words), "scores": h.scores}
                                                                   for h in n.hypotheses]} for n in lists]))
    ref_path = tmp_path / "refs.txt"
    ref_path.write_text("".join(f"{k} {' '.join(v)}\n" for k, v in refs.items()))
    model = saved_model(tmp_path / "model", cell="gru", rho=2)
    common = ["tune", "--model", str(model), "--refs", str(ref_path), "--folds", "1", "--restarts", "1", "--json"]
    perfect = tmp_path / "perfect.txt"
    perfect.write_text(ref_path.read_text())
    assert main([*common, "--baseline", str(perfect), "--save", str(tmp_path / "w.json"), str(directory)]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["baseline"]["wer"] == 0.0 and report["baseline"]["chosen_wer"] > 0
    assert report["chosen"]["point"] is None and "nothing written" in err and not (tmp_path / "w.json").exists()
    first = tmp_path / "first.txt"  # the lists' first hypotheses: the recogniser's 1-best
    first.write_text("".join(f"{n.key} {' '.join(n.hypotheses[0].words)}\n" for n in lists))
    assert main([*common, "--baseline", str(first), "--save", str(tmp_path / "w.json"), str(directory)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["chosen_wer"] <= report["baseline"]["wer"] and (tmp_path / "w.json").is_file()


def test_a_tuned_point_rescores_the_lattices_the_tuner_searched():
    """Real PocketSphinx lattices (dense: reduced before expansion) at points that weigh the old
    LM or the word penalty otherwise than the first pass (tuned weights: old LM near 0).
    Rescoring at such a point reduces each lattice exactly as the tuner did under its own options,
    so every best path the tuner's search sees is the one rescoring returns (issue 40: they once
    differed, 22.40% tuned against 22.75% rescored on dev_clean, 17.23 against 17.64% on dev_other)."""
    import gzip
    from pathlib import Path

    from lattices.formats.pocketsphinx import read_pocketsphinx

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "pocketsphinx"
    lattices = [read_pocketsphinx(gzip.decompress(p.read_bytes()).decode(), p.name)
                for p in sorted(folder.glob("*.slf.gz"))[:3]]
    scorer = lm_scorer()
    options = RescoreOptions(target_expanded_arcs=1_000)
    refs = {lat.key: rescore(lat, scorer, options)[0].best.words[1:] for lat in lattices}
    tuner = Tuner(scorer, options, refs)
    tuner.add(lattices)
    assert all(u.scored is not None and "stages" in u.scored.stats for u in tuner.utterances)  # reduced
    for point in ({"lm_weight": 1.0, "old_lm_weight": 0.0, "word_penalty": 0.0, "unk_penalty": -5.0},
                  {"lm_weight": 0.3, "old_lm_weight": 0.05, "word_penalty": -1.0, "unk_penalty": 0.0},
                  {"lm_weight": 0.5, "old_lm_weight": 1.0, "word_penalty": 6.0, "unk_penalty": 0.0}):
        searched = _tuner_best_words(tuner, point)
        rescored = [rescore(lat, scorer, options.at_point(point))[0] for lat in lattices]
        assert all(r.pruned is not None for r in rescored)
        assert [[(s["stage"], s["arcs"]) for s in r.stats["stages"]] for r in rescored] == \
            [[(s["stage"], s["arcs"]) for s in u.scored.stats["stages"]] for u in tuner.utterances]  # the same lattices
        assert searched == [r.best.words for r in rescored]


def _tuner_best_words(tuner: Tuner, point: dict) -> list[list[str]]:
    """The words the tuner decides at ``point`` (its report's, :func:`afp.tune.point_stats`)."""
    from lattices.rescore import rescore_scored

    return [rescore_scored(u.scored, tuner.options.at_point(point))[0].best.words for u in tuner.utterances]
