"""N-best minimum Bayes risk decoding: distances, posteriors, expected errors, the choice."""

from __future__ import annotations

import math
import random

import pytest
import torch

from lattices.mbr import edit_distance_matrix, expected_errors, mbr_choice, posteriors
from tests.factories import levenshtein, DEVICES, WORDS


def test_levenshtein_reference_itself():
    assert levenshtein([], []) == 0 and levenshtein([], ["a", "b"]) == 2 and levenshtein(["a"], []) == 1
    assert levenshtein("a b c".split(), "a x c d".split()) == 2
    assert levenshtein("a b".split(), "b a".split()) == 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_edit_distance_matrix_matches_pure_python(seed):
    rng = random.Random(seed)
    vocab = WORDS[:4]  # a small vocabulary makes partial matches (and some equal lists) likely
    hyps = [[rng.choice(vocab) for _ in range(rng.randint(0, 7))] for _ in range(12)]
    d = edit_distance_matrix(hyps)
    assert d.dtype == torch.float64 and d.shape == (12, 12)
    expected = torch.tensor([[levenshtein(a, b) for b in hyps] for a in hyps], dtype=torch.float64)
    assert torch.equal(d, expected)
    assert torch.equal(d, d.T) and not d.diagonal().any()


def test_edit_distance_matrix_edge_cases():
    assert edit_distance_matrix([]).shape == (0, 0)
    assert edit_distance_matrix([["a"]]).tolist() == [[0.0]]
    assert edit_distance_matrix([[], ["a", "b"], ["a", "b"]]).tolist() == [[0, 2, 2], [2, 0, 0], [2, 0, 0]]
    with pytest.raises(TypeError, match="list of words"):
        edit_distance_matrix(["a b", ["a"]])


# [A X C] is the MAP hypothesis, but the other three agree with "A B C" in two words of three:
#   D = [[0,1,2,2],[1,0,1,1],[2,1,0,2],[2,1,2,0]]
# with scale 1, p ~ (0.269, 0.244, 0.244, 0.244): E ~ (1.22, 0.76, 1.27, 1.27): "A B C" wins.
CONSENSUS = [["A", "X", "C"], ["A", "B", "C"], ["A", "B", "C2"], ["A2", "B", "C"]]
CONSENSUS_SCORES = torch.tensor([1.0, 0.9, 0.9, 0.9], dtype=torch.float64)


def test_consensus_hypothesis_beats_the_map_outlier():
    d = edit_distance_matrix(CONSENSUS)
    assert d.tolist() == [[0, 1, 2, 2], [1, 0, 1, 1], [2, 1, 0, 2], [2, 1, 2, 0]]
    assert int(CONSENSUS_SCORES.argmax()) == 0
    assert int(mbr_choice(CONSENSUS_SCORES, d)) == 1
    p = torch.softmax(CONSENSUS_SCORES, 0)
    expected = torch.tensor([p[1] + 2 * p[2] + 2 * p[3], p[0] + p[2] + p[3], 2 * p[0] + p[1] + 2 * p[3],
                             2 * p[0] + p[1] + 2 * p[2]])
    assert torch.allclose(expected_errors(CONSENSUS_SCORES, d), expected)


@pytest.mark.parametrize("scale", [1e3, 1e8, 1e300])
def test_huge_scale_gives_the_top_scoring_hypothesis(scale):
    d = edit_distance_matrix(CONSENSUS)
    assert int(mbr_choice(CONSENSUS_SCORES, d, scale=scale)) == 0
    torch.manual_seed(0)
    scores = torch.randn(20, 4, dtype=torch.float64)
    assert torch.equal(mbr_choice(scores, d, scale=scale), scores.argmax(dim=1))


def test_posteriors_are_a_softmax_and_zero_for_minus_inf():
    scores = torch.tensor([0.0, -math.inf, math.log(3.0)])
    p = posteriors(scores)
    assert p.dtype == torch.float64 and torch.allclose(p, torch.tensor([0.25, 0.0, 0.75], dtype=torch.float64))
    assert torch.allclose(posteriors(scores, scale=0.0), torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64))
    assert torch.allclose(posteriors(scores, scale=2.0), torch.tensor([0.1, 0.0, 0.9], dtype=torch.float64))


def test_minus_inf_hypothesis_has_no_weight_and_is_never_chosen():
    d = edit_distance_matrix(CONSENSUS)
    # without "A B C" the live ones are [A X C], [A B C2], [A2 B C]; "A B C" would still be their
    # least-errors compromise (E ~ 1.00 against 1.29, 1.36, 1.36), but it is not a hypothesis
    scores = torch.tensor([1.0, -math.inf, 0.9, 0.9], dtype=torch.float64)
    errors = expected_errors(scores, d)
    assert float(errors[1]) < float(errors[[0, 2, 3]].min())
    assert int(mbr_choice(scores, d)) == 0
    assert float(posteriors(scores)[1]) == 0.0
    # a dead hypothesis's distances do not count in anyone's expected errors
    far = d.clone()
    far[1, :] = far[:, 1] = 100.0
    far[1, 1] = 0.0
    assert torch.allclose(expected_errors(scores, far)[[0, 2, 3]], errors[[0, 2, 3]])


def test_all_minus_inf_and_bad_input_are_value_errors():
    d = edit_distance_matrix(CONSENSUS)
    with pytest.raises(ValueError, match="-inf"):
        mbr_choice(torch.full((4,), -math.inf), d)
    rows = torch.zeros(3, 4)
    rows[1] = -math.inf
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        mbr_choice(rows, d)
    with pytest.raises(ValueError, match="NaN"):
        mbr_choice(torch.tensor([0.0, math.nan, 0.0, 0.0]), d)
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        mbr_choice(torch.zeros(3), d)
    with pytest.raises(ValueError, match="scale"):
        mbr_choice(CONSENSUS_SCORES, d, scale=-1.0)
    with pytest.raises(ValueError, match="K = 0"):
        mbr_choice(torch.zeros(0), torch.zeros(0, 0))


def test_ties_go_to_the_higher_score_then_the_lower_index():
    # hypotheses 1 and 2 have the same words: the same expected errors, whatever the scores
    hyps = [["a", "b"], ["a", "c"], ["a", "c"], ["d", "c"]]
    d = edit_distance_matrix(hyps)
    assert int(mbr_choice(torch.tensor([0.0, 0.5, 0.7, 0.0]), d)) == 2
    assert int(mbr_choice(torch.tensor([0.0, 0.7, 0.5, 0.0]), d)) == 1
    assert int(mbr_choice(torch.tensor([0.0, 0.6, 0.6, 0.0]), d)) == 1
    # two hypotheses, equal posteriors: equal expected errors, the first wins
    two = edit_distance_matrix([["a"], ["b"]])
    assert int(mbr_choice(torch.tensor([0.3, 0.3]), two)) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_rows_give_the_same_as_one_by_one(device):
    rng = random.Random(5)
    hyps = [[rng.choice(WORDS[:5]) for _ in range(rng.randint(1, 6))] for _ in range(9)]
    d = edit_distance_matrix(hyps)
    torch.manual_seed(5)
    scores = (3 * torch.randn(40, 9, dtype=torch.float64)).to(device)
    scores[3, 4] = scores[7, 0] = -math.inf
    for scale in (0.0, 0.3, 1.0, 10.0):
        choice = mbr_choice(scores, d, scale)
        errors = expected_errors(scores, d, scale)
        assert choice.shape == (40,) and choice.dtype == torch.int64 and choice.device == scores.device
        assert errors.shape == (40, 9) and errors.device == scores.device
        for g in range(40):
            assert int(choice[g]) == int(mbr_choice(scores[g], d, scale))
            assert torch.allclose(errors[g], expected_errors(scores[g], d, scale))
        # the choice has the least expected errors among live hypotheses (checked naively)
        cpu_scores, cpu_errors = scores.cpu(), errors.cpu()
        for g in range(40):
            live = [k for k in range(9) if cpu_scores[g, k] > -math.inf]
            assert cpu_errors[g, int(choice[g])] <= min(cpu_errors[g, k] for k in live) + 1e-9
        assert int(choice[3]) != 4 and int(choice[7]) != 0


def test_mbr_never_has_more_expected_errors_than_viterbi():
    torch.manual_seed(1)
    rng = random.Random(1)
    hyps = [[rng.choice(WORDS[:4]) for _ in range(rng.randint(2, 6))] for _ in range(15)]
    d = edit_distance_matrix(hyps)
    scores = torch.randn(50, 15, dtype=torch.float64)
    errors = expected_errors(scores, d)
    rows = torch.arange(50)
    assert (errors[rows, mbr_choice(scores, d)] <= errors[rows, scores.argmax(dim=1)] + 1e-12).all()
    # and it differs from Viterbi on some of these rows (the test can see a difference)
    assert (mbr_choice(scores, d) != scores.argmax(dim=1)).any()
