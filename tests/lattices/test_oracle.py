"""Oracle word errors and stage reports (lattices.oracle): exact against brute force (every path's
Levenshtein distance to the reference, by kaldialign) on many small random lattices."""

from __future__ import annotations

import random

import kaldialign
import pytest

from lattices.determinize import determinize
from lattices.lattice import Lattice
from lattices.minimize import minimize
from lattices.oracle import count_paths, oracle_errors, stage_report

SYMBOLS = ("<eps>", "the", "cat", "sat", "The", "!SIL", "on", "mat")
WORDS = ["the", "cat", "sat", "on", "mat", "dog"]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    return kaldialign.edit_distance(ref, hyp)["total"]


def random_lattice(seed: int) -> Lattice:
    rng = random.Random(seed)
    n = rng.randint(2, 9)

    def arc(s: int, d: int) -> tuple[int, int, int, float, float]:
        return (s, d, rng.randrange(len(SYMBOLS)), -rng.random(), 0.0)

    arcs = [arc(s, s + 1) for s in range(n - 1)]
    for _ in range(rng.randint(0, 12)):
        s = rng.randrange(n - 1)
        arcs.append(arc(s, rng.randrange(s + 1, n)))
    finals = {s: (0.0, 0.0) for s in range(1, n) if rng.random() < 0.3}
    finals[n - 1] = (0.0, 0.0)
    return Lattice.from_arcs("t", arcs, finals, SYMBOLS)


def path_words(lattice: Lattice, skip: set[str], fold) -> list[list[str]]:
    """The words of every complete path (without epsilons and ``skip`` symbols), folded."""
    out: dict[int, list[int]] = {}
    for a, s in enumerate(lattice.src.tolist()):
        out.setdefault(s, []).append(a)
    finals = set(lattice.finals.tolist())
    found = []

    def walk(state: int, words: list[str]) -> None:
        if state in finals:
            found.append(words)
        for a in out.get(state, []):
            symbol = lattice.symbols[int(lattice.words[a])]
            keep = int(lattice.words[a]) != 0 and symbol not in skip
            walk(int(lattice.dst[a]), words + [fold(symbol)] if keep else words)

    walk(lattice.start, [])
    return found


def test_tiny_lattice():
    # 0 -the-> 1 -!SIL-> 2 -cat-> 3 -sat-> 4 ; 1 -sat-> 3 ; 3 -<eps>-> 4 ; final 4
    # paths: "the cat sat", "the cat", "the sat sat", "the sat"
    lattice = Lattice.from_arcs("t", [(0, 1, 1, 0.0, 0.0), (1, 2, 5, 0.0, 0.0), (2, 3, 2, 0.0, 0.0),
                                      (3, 4, 3, 0.0, 0.0), (1, 3, 3, 0.0, 0.0), (3, 4, 0, 0.0, 0.0)],
                                {4: (0.0, 0.0)}, SYMBOLS)
    assert oracle_errors(lattice, "THE cat sat".split()) == (0, ["the", "cat", "sat"])
    assert oracle_errors(lattice, "THE cat sat".split(), case_insensitive=False)[0] == 1
    assert oracle_errors(lattice, "the dog sat on".split())[0] == 2  # dog -> cat, on deleted
    assert oracle_errors(lattice, [])[0] == 2  # "the sat": two insertions
    assert oracle_errors(lattice, "!SIL the sat".split()) == (0, ["the", "sat"])  # skipped in the reference too
    assert count_paths(lattice) == 4


@pytest.mark.parametrize("case_insensitive", [True, False])
def test_oracle_errors_match_brute_force(case_insensitive):
    rng = random.Random(1)
    fold = str.lower if case_insensitive else (lambda word: word)
    for seed in range(150):
        lattice = random_lattice(seed)
        reference = [rng.choice(WORDS + ["THE"]) for _ in range(rng.randint(0, 6))]
        errors, words = oracle_errors(lattice, reference, skip={"!SIL"}, case_insensitive=case_insensitive)
        candidates = path_words(lattice, {"!SIL"}, lambda word: word)
        ref = [fold(word) for word in reference]
        assert errors == min(edit_distance(ref, [fold(w) for w in hyp]) for hyp in candidates), seed
        assert words in candidates  # a real path of the lattice ...
        assert edit_distance(ref, [fold(w) for w in words]) == errors  # ... that has the errors


def test_reduction_stages_keep_the_oracle_and_are_reported():
    rng = random.Random(3)
    for seed in range(40):
        lattice = random_lattice(seed)
        reference = [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
        errors, _ = oracle_errors(lattice, reference)
        det = determinize(lattice, [1.0, 1.0])
        small = minimize(det)
        report = stage_report("determinize", det, 0.25, reference)
        minimized = stage_report("minimize", small, 0.25, reference)
        assert report.oracle_errors == minimized.oracle_errors == errors
        assert (minimized.states, minimized.arcs) == (small.num_states, small.num_arcs)
        assert minimized.paths == count_paths(small) == len({tuple(p) for p in path_words(lattice, {"!SIL"}, str)})
        assert report.seconds == 0.25 and report.reference_words == len(reference)
    assert stage_report("input", lattice, 0.5).to_dict() == {
        "stage": "input", "states": lattice.num_states, "arcs": lattice.num_arcs, "seconds": 0.5,
        "paths": count_paths(lattice), "oracle_errors": None, "reference_words": None}
