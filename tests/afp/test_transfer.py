"""afp.transfer: weights tuned on one set, applied to the other, compared utterance by utterance.

Two tiny sets of two-hypothesis tables whose decisions are worked out by hand (below), and random
lattices rescored by the engine as ``afp rescore --weights`` does."""

from __future__ import annotations

import random

import pytest
import torch

from afp.transfer import BASELINE, FIRST_PASS, apply_weights, transfer, tune_weights
from afp.tune import Tuner, joint_tune, utterance_errors
from lattices.rescore import RescoreOptions
from tests.factories import WORDS, random_lattice, saved_model

NAMES = ("decoder", "old_lm", "new_lm", "unk", "words")
#: the two weights the hand-worked cases leave free: only the new LM's weight moves
HOLD = {"old_lm_weight": 0.0, "word_penalty": 0.0, "unk_penalty": 0.0}


def _parts(decoder: float, new_lm: float) -> list[float]:
    return [decoder, 0.0, new_lm, 0.0, 2.0]  # two words each, no old LM, no unknown word


def _tuner(utterances: list[tuple[str, list[str], list[list[str]], list[list[float]]]]) -> Tuner:
    tuner = Tuner(None, RescoreOptions(), {key: ref for key, ref, _, _ in utterances})
    for key, ref, words, parts in utterances:
        tuner.add_table(key, ref, words, torch.tensor(parts, dtype=torch.float64), NAMES)
    return tuner


def hand_sets() -> dict[str, Tuner]:
    """Set A: three times the same choice, the right hypothesis (second) wins iff lm_weight > 0.5
    (-1 > -2 w), so A's search ends somewhere in (0.5, 3]. Set B, first hypothesis first:
    b0 right second, wins iff w > 0.1 (-0.1 > -w); b1 wrong second, wins iff w > 0.2; b2 the first
    always wins (-5 < 0). B's own best is w in (0.1, 0.2), where A decides as its first pass."""
    a = [(f"a{i}", ["a", "b"], [["a", "c"], ["a", "b"]], [_parts(0.0, -2.0), _parts(-1.0, 0.0)]) for i in range(3)]
    b = [("b0", ["x", "y"], [["x", "z"], ["x", "y"]], [_parts(0.0, -1.0), _parts(-0.1, 0.0)]),
         ("b1", ["p", "q"], [["p", "q"], ["p", "r"]], [_parts(0.0, -1.0), _parts(-0.2, 0.0)]),
         ("b2", ["m", "n"], [["m", "n"], ["m", "o"]], [_parts(0.0, 0.0), _parts(-5.0, 0.0)])]
    return {"A": _tuner(a), "B": _tuner(b)}


def test_each_direction_applies_the_other_sets_point_with_the_hand_worked_outcome():
    sets = hand_sets()
    found = {(x.tuned_on, x.applied_to): x for x in transfer(sets, hold=HOLD, restarts=2)}
    assert set(found) == {("A", "B"), ("B", "A")}

    a_to_b = found["A", "B"]
    assert 0.5 < a_to_b.tuned.point["lm_weight"] <= 3.0
    assert {k: a_to_b.tuned.point[k] for k in HOLD} == HOLD
    assert a_to_b.tuned.wer == 0.0  # every A utterance right at its own point
    decoded = a_to_b.decoded
    assert decoded.keys == ("b0", "b1", "b2")
    assert decoded.words == (("x", "y"), ("p", "r"), ("m", "n"))
    assert decoded.errors == (0, 1, 0) and decoded.ref_words == (2, 2, 2)
    assert decoded.wer == pytest.approx(100 / 6)
    first = decoded.against[FIRST_PASS]  # B's first pass: b0 wrong, b1 and b2 right
    assert (first.wer_a, first.wer_b, first.utterances) == (pytest.approx(100 / 6), pytest.approx(100 / 6), 3)

    b_to_a = found["B", "A"]
    assert 0.1 < b_to_a.tuned.point["lm_weight"] < 0.2  # B's own optimum, exactly found
    assert b_to_a.tuned.wer == 0.0
    assert b_to_a.decoded.errors == (1, 1, 1)  # too small a weight for A: its first pass again
    assert b_to_a.decoded.against[FIRST_PASS].difference == 0.0
    assert b_to_a.to_json()["wer"] == pytest.approx(50.0)


def test_others_and_a_baseline_are_compared_on_the_applied_set():
    sets = hand_sets()
    baselines = {"B": {"b0": ["x", "y"], "b1": ["p", "q"], "b2": ["m", "x"]}}  # one error, in b2
    others = {"perfect": {"B": [0, 0, 0]}, "only A": {"A": [0, 0, 0]}}
    (a_to_b,) = [x for x in transfer(sets, hold=HOLD, restarts=0, baselines=baselines, others=others)
                 if x.applied_to == "B"]
    against = a_to_b.decoded.against
    assert set(against) == {FIRST_PASS, BASELINE, "perfect"}  # "only A" has no errors on B
    assert against[BASELINE].wer_a == pytest.approx(100 / 6) and against["perfect"].wer_a == 0.0
    assert against["perfect"].wer_b == pytest.approx(100 / 6)
    with pytest.raises(ValueError, match="no hypothesis for 1 utterance"):
        apply_weights(sets["B"], a_to_b.tuned.point, baseline={"b0": ["x"], "b1": ["p"]})
    with pytest.raises(ValueError, match="no weight named lm"):
        tune_weights(sets["A"], hold={"lm": 0.0})


def test_the_joint_search_applies_what_afp_tune_would_save():
    sets = hand_sets()
    found = {x.tuned_on: x for x in transfer(sets, restarts=1, folds=1)}
    for name, applied in found.items():
        report = joint_tune(sets[name], restarts=1, folds=1)
        assert applied.tuned.point == report["chosen"]["point"]
        assert applied.tuned.reason == report["chosen"]["reason"]
        other = sets[applied.applied_to]
        assert list(applied.decoded.errors) == utterance_errors(other, applied.tuned.point)


def test_nothing_is_applied_where_the_tuned_point_loses_to_the_baseline_unless_asked():
    sets = hand_sets()
    sets["A"] = _tuner([("a0", ["q"], [["a", "c"], ["a", "b"]], [_parts(0.0, -2.0), _parts(-1.0, 0.0)]),
                        *((f"a{i}", ["a", "b"], [["a", "c"], ["a", "b"]], [_parts(0.0, -2.0), _parts(-1.0, 0.0)])
                          for i in (1, 2))])
    perfect = {"A": {"a0": ["q"], "a1": ["a", "b"], "a2": ["a", "b"]}}  # no weights can match it on a0
    (skipped,) = [x for x in transfer(sets, restarts=0, folds=1, baselines=perfect) if x.tuned_on == "A"]
    assert skipped.tuned.point is None and skipped.decoded is None and "none" in skipped.tuned.reason
    assert "wer" not in skipped.to_json()
    (forced,) = [x for x in transfer(sets, restarts=0, folds=1, baselines=perfect, apply_best=True)
                 if x.tuned_on == "A"]
    assert forced.tuned.point is not None and forced.decoded is not None
    assert forced.tuned.reason.startswith("the tuned point, applied although afp tune would save nothing")


@pytest.mark.parametrize("target_arcs", [0, 12])
def test_applied_words_are_what_the_engine_returns_with_the_saved_weights(tmp_path, target_arcs):
    """Random lattices (not tables: the line searches' lattice path), an AFP model, ``afp rescore``'s
    options: each applied set's words are ``afp rescore --weights`` 's best paths, the weights as
    ``afp tune --save`` writes them. Decided by the tuner's scored lattices where the reduction is
    weight-free (no expansion budget); from the inputs, scored again under the weights, always
    (a budget of 12 arcs prunes each lattice under the weights applied)."""
    from afp import load_model
    from afp.options import build_options
    from afp.weights import TunedWeights
    from lattices.rescore import rescore

    model = load_model(saved_model(tmp_path / "m", cell="gru", mode="afp", rho=2), device="cpu")
    fields = {"target_arcs": target_arcs}
    base = build_options(fields, unk_default=model.loaded.default_unk_penalty)
    rng = random.Random(3)
    lattices = {name: [random_lattice(seed, key=f"{name}{seed}") for seed in range(first, first + 6)]
                for name, first in (("one", 0), ("two", 50))}
    tuners = {}
    for name, group in lattices.items():
        tuners[name] = Tuner(model.scorer, base, {lat.key: [rng.choice(WORDS) for _ in range(3)] for lat in group})
        tuners[name].add(group)
    again = {x.tuned_on: x for x in transfer(tuners, restarts=0, folds=1, inputs=lattices)}
    for applied in transfer(tuners, restarts=0, folds=1):
        options = build_options(fields, weights=TunedWeights.from_options(base.at_point(applied.tuned.point)),
                                unk_default=model.loaded.default_unk_penalty)
        engine = tuple(tuple(rescore(lat, model.scorer, options)[0].best.words) for lat in lattices[applied.applied_to])
        rescored = again[applied.tuned_on].decoded
        assert rescored.words == engine and len(rescored.seconds) == 6 and min(rescored.seconds) > 0
        if not target_arcs:
            assert applied.decoded.words == engine and applied.decoded.seconds is None
    with pytest.raises(ValueError, match="no input for 6 utterance"):
        apply_weights(tuners["one"], applied.tuned.point, inputs=lattices["two"])
