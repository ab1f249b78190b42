"""The joint weight search: exact line searches, a descent that never gets worse, weights files,
and the significance tests."""

from __future__ import annotations

import json
import math
import random

import numpy
import pytest

from afp import mert
from afp.significance import compare
from afp.weights import TunedWeights, WeightsFileError
from lattices.rescore import RescoreOptions

NAMES = ("decoder", "old_lm", "new_lm", "unk", "words")


def random_problem(seed: int, utterances: int = 40, hypotheses: int = 6) -> mert.Problem:
    rng = numpy.random.default_rng(seed)
    tables = [mert.Table(parts=rng.normal(size=(hypotheses, len(NAMES))) * [3, 8, 8, 1, 4],
                         errors=rng.integers(0, 5, size=hypotheses), acoustic_scale=0.1) for _ in range(utterances)]
    return mert.Problem(tables, NAMES, {"decoder": 1.0})


def brute_errors(problem: mert.Problem, point: dict, name: str, values: numpy.ndarray) -> numpy.ndarray:
    return numpy.array([problem.errors({**point, name: float(v)}) for v in values])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", ["lm_weight", "old_lm_weight", "word_penalty", "unk_penalty", "score:decoder"])
def test_the_line_search_finds_the_exact_minimum_of_the_step_function(seed, name):
    problem = random_problem(seed)
    point = {"lm_weight": 0.7, "old_lm_weight": 0.5, "word_penalty": 0.3, "unk_penalty": -1.0, "score:decoder": 1.0}
    value, errors = mert.line_search(problem, point, name)
    lo, hi = mert.range_of(name)
    grid = numpy.linspace(lo, hi, 801)
    dense = brute_errors(problem, point, name, grid)
    assert errors == problem.errors({**point, name: value})  # what it says is what it gets
    assert errors <= dense.min()  # no grid value is better: the minimum is exact, not sampled
    assert errors <= problem.errors(point)  # the current point is a candidate
    assert lo <= value <= hi


def pairwise_steps(errors: numpy.ndarray, a: numpy.ndarray, g: numpy.ndarray, lo: float, hi: float):
    """The reference: every pairwise crossing inside (lo, hi) cuts, the winner of each piece is the
    first argmax at its midpoint, equal neighbours merged."""
    with numpy.errstate(divide="ignore", invalid="ignore"):
        cross = (a[:, None] - a[None, :]) / (g[None, :] - g[:, None])
    cuts = numpy.unique(cross[numpy.isfinite(cross) & (cross > lo) & (cross < hi)])
    edges = numpy.concatenate([[lo], cuts, [hi]])
    winners = numpy.argmax(a[None, :] + ((edges[:-1] + edges[1:]) / 2)[:, None] * g[None, :], axis=1)
    values = errors[winners]
    keep = numpy.concatenate([[True], values[1:] != values[:-1]])
    return cuts[keep[1:]].tolist(), values[keep].tolist()


@pytest.mark.parametrize("integers", [False, True])
def test_the_envelope_steps_are_those_of_every_pairwise_crossing(integers):
    """Och's upper envelope gives the same steps as all H^2 crossings, equal lines and equal
    slopes included (integer heights and slopes make many: the first hypothesis must win)."""
    rng = numpy.random.default_rng(7)
    for _ in range(3000):
        h = int(rng.integers(1, 12))
        if integers:
            a, g = rng.integers(-3, 4, h).astype(float), rng.integers(-2, 3, h).astype(float)
        else:
            a, g = rng.normal(size=h), rng.normal(size=h)
        errors = rng.integers(0, 4, h)
        lo, hi = sorted(rng.integers(-4, 5, 2).astype(float))
        cuts, values = mert._steps(errors, a, g, lo, hi + 0.5)
        want_cuts, want_values = pairwise_steps(errors, a, g, lo, hi + 0.5)
        assert values == want_values and cuts == pytest.approx(want_cuts, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_search_never_ends_worse_than_its_start(seed):
    problem = random_problem(seed + 10)
    start = {"lm_weight": 0.0, "old_lm_weight": 1.0, "word_penalty": 0.0, "unk_penalty": 0.0}
    found = mert.search(problem, start, list(mert.BASE), restarts=2, seed=seed)
    assert found.errors <= found.start_errors == problem.errors(start)
    assert found.errors == problem.errors(found.point)


def test_simplest_picks_round_numbers_inside_the_interval():
    assert mert.simplest(0.55, 0.62) == 0.6
    assert mert.simplest(0.3827, 0.6827) == 0.5
    assert mert.simplest(-3.2, -2.9) == -3.0
    assert mert.simplest(0.5801, 0.5803) == 0.5802
    for _ in range(200):
        a = random.uniform(-5, 5)
        b = a + random.uniform(1e-4, 3)
        assert a < mert.simplest(a, b) < b


def test_edges_are_reported_only_where_the_bound_is_not_natural():
    assert mert.edges({"lm_weight": 0.0, "word_penalty": 10.0, "unk_penalty": 0.0, "old_lm_weight": 3.0},
                      ["lm_weight", "word_penalty", "unk_penalty", "old_lm_weight"]) == ["word_penalty", "old_lm_weight"]


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_matched_pairs_statistic_worked_out_by_hand():
    """Four utterances of 10 words: A makes 2, 1, 3, 0 errors, B 1, 1, 1, 0. d = B - A = -1, 0,
    -2, 0: mean -3/4, sample variance (1/16 + 9/16 + 25/16 + 9/16) / 3 = 11/12, so
    Z = (-3/4) / (sqrt(11/12) / 2) = -1.5667 and the two-sided p = 2 (1 - Phi(1.5667)) = 0.1172
    (a normal table gives Phi(1.5667) = 0.9414): not significant, whatever the bootstrap says."""
    result = compare([2, 1, 3, 0], [1, 1, 1, 0], [10, 10, 10, 10])
    z = -0.75 / (math.sqrt(11 / 12) / 2)
    assert result.mapsswe_z == pytest.approx(z, rel=1e-12) and result.mapsswe_z == pytest.approx(-1.5667, abs=1e-4)
    assert result.mapsswe_p == pytest.approx(2 * (1 - normal_cdf(abs(z))), rel=1e-9)
    assert result.mapsswe_p == pytest.approx(0.1172, abs=1e-4)
    assert (result.wer_a, result.wer_b, result.difference) == (15.0, 7.5, -7.5)
    assert (result.utterances, result.ref_words) == (4, 40) and not result.significant
    worse = compare([1, 1, 1, 0], [2, 1, 3, 0], [10, 10, 10, 10])  # the other way round: the sign turns
    assert worse.mapsswe_z == pytest.approx(-z, rel=1e-12) and worse.mapsswe_p == pytest.approx(result.mapsswe_p)
    assert worse.difference == 7.5


def test_significance_of_identical_and_of_clearly_different_systems():
    errors = [random.Random(1).randint(0, 4) for _ in range(500)]
    words = [20] * 500
    same = compare(errors, errors, words)
    assert (same.difference, same.mapsswe_z, same.mapsswe_p, same.bootstrap_low, same.bootstrap_high, same.poi) == \
        (0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    assert not same.significant
    # one error fewer in every utterance: d = -1 everywhere (no spread, so Z = -inf and p = 0), and
    # every bootstrap draw of the 500 utterances gives exactly -n / (20 n) = -5 points
    one_fewer = compare([e + 1 for e in errors], errors, words)
    assert one_fewer.difference == pytest.approx(-100 * 500 / 10_000) == -5.0
    assert (one_fewer.mapsswe_z, one_fewer.mapsswe_p) == (-math.inf, 0.0)
    assert one_fewer.bootstrap_low == pytest.approx(-5.0) and one_fewer.bootstrap_high == pytest.approx(-5.0)
    assert one_fewer.poi == 1.0 and one_fewer.significant
    one_more = compare(errors, [e + 1 for e in errors], words)  # the other way round
    assert one_more.difference == pytest.approx(5.0) and one_more.mapsswe_z == math.inf
    assert one_more.bootstrap_low == pytest.approx(5.0) and one_more.poi == 0.0 and one_more.significant
    better = compare(errors, [max(0, e - 1) for e in errors], words)
    assert better.difference < 0 and better.mapsswe_p < 1e-6 and better.bootstrap_high < 0 and better.poi == 1.0
    assert better.significant
    with pytest.raises(ValueError, match="different lengths"):
        compare([1, 2], [1], [3, 3])


def test_balanced_changes_are_not_significant():
    """B gains an error on half the utterances and loses one on the other half (d = +1, -1, ...):
    mean 0, so Z = 0 and p = 1 exactly, difference 0. The bootstrap's difference over n = 500
    draws is 100 * sum(d) / (20 n) with sum(d) of spread sqrt(n) (each d is +-1), so its 95%
    interval is about +-1.96 * 100 / (20 sqrt(500)) = +-0.438 points (1000 draws: within 15%),
    and B is better in about half the draws (those with sum(d) < 0; sum(d) = 0 in ~3.6%)."""
    errors = [2 + i % 3 for i in range(500)]
    coin = compare(errors, [e + (1 if i % 2 else -1) for i, e in enumerate(errors)], [20] * 500)
    assert (coin.difference, coin.mapsswe_z, coin.mapsswe_p) == (0.0, 0.0, 1.0) and not coin.significant
    half_width = 1.96 * 100 / (20 * math.sqrt(500))
    assert coin.bootstrap_low == pytest.approx(-half_width, rel=0.15)
    assert coin.bootstrap_high == pytest.approx(half_width, rel=0.15)
    assert 0.4 < coin.poi < 0.6


def test_a_weights_file_round_trips_and_applies(tmp_path):
    point = {"lm_weight": 0.35, "old_lm_weight": 0.6, "word_penalty": 0.5, "unk_penalty": -4.0, "score:decoder": 0.6}
    path = tmp_path / "w.json"
    TunedWeights.from_options(RescoreOptions().at_point(point), {"wer": 3.4}).write(path)
    weights = TunedWeights.read(path)
    assert json.loads(path.read_text())["format"] == "afp-weights/1"
    options = weights.apply(RescoreOptions(nbest=5, lm_weights=(1.0, 2.0)))
    assert options.lm_weights == (0.35,) and options.old_lm_weight == 0.6 and options.word_penalty == 0.5
    assert options.unk_penalty == -4.0 and dict(options.score_weights) == {"decoder": 0.6} and options.nbest == 5


@pytest.mark.parametrize("data, message", [
    ([], "expected a JSON object"), ({"format": "x"}, "field format"), ({"lm_weight": "a"}, "field lm_weight"),
    ({"lm_weight": float("inf")}, "finite number"), ({"score_weights": [1]}, "score_weights"),
    ({"decode": "map"}, "field decode"), ({"lm_wieght": 1}, "unknown field(s) lm_wieght"),
])
def test_bad_weights_files_name_the_field(data, message):
    with pytest.raises(WeightsFileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TunedWeights.from_json(data, "w.json")
