"""``afp rescore`` on n-best lists: ESPnet directories, exactness against ``afp score``, first pass, warnings."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from service.cli import main
from tests.factories import require_shared, SHARED_DATA, WORDS, espnet_subset, saved_model

ESPNET = SHARED_DATA / "nbest" / "librispeech-espnet" / "dev_clean"


@pytest.fixture()
def model_dir(tmp_path):
    return saved_model(tmp_path / "model", cell="gru", mode="afp", rho=2)


def write_espnet(directory: Path, lists: dict[str, list[tuple[str, dict[str, float]]]],
                 weights: dict[str, float] | None = None) -> Path:
    """An ESPnet decode directory: kbest_recog/{text,score,scores}, the total being the scores'
    sum under ``weights`` (default 1 each)."""
    weights = weights or {}
    depth = max(len(h) for h in lists.values())
    for k in range(1, depth + 1):
        folder = directory / f"{k}best_recog"
        folder.mkdir(parents=True)
        rows = [(key, hyps[k - 1]) for key, hyps in lists.items() if len(hyps) >= k]
        (folder / "text").write_text("".join(f"{key} {words}\n" for key, (words, _) in rows))
        (folder / "score").write_text("".join(f"{key} tensor({sum(weights.get(n, 1.0) * v for n, v in s.items()):.4f})\n" for key, (_, s) in rows))
        (folder / "scores").write_text("".join(
            f"{key} {json.dumps({n: f'tensor({v:.4f})' for n, v in s.items()})}\n" for key, (_, s) in rows))
    return directory


def random_lists(count: int, seed: int = 0) -> dict[str, list[tuple[str, dict[str, float]]]]:
    rng = random.Random(seed)
    out = {}
    for u in range(count):
        base = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]
        hyps = []
        for _ in range(rng.randint(1, 5)):
            words = list(base)
            if rng.random() < 0.7:
                words[rng.randrange(len(words))] = rng.choice([*WORDS, "zebra"])
            hyps.append((" ".join(words), {"decoder": -rng.uniform(0, 5), "ctc": -rng.uniform(0, 5),
                                           "lm": -rng.uniform(5, 20)}))
        out[f"spk-utt{u:02d}"] = hyps
    return out


def run(capsys, argv, status=0):
    assert main(argv) == status
    captured = capsys.readouterr()
    return [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")], captured


def scores_of(capsys, model_dir, tmp_path, sentences):
    text = tmp_path / "sentences.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in sentences))
    rows, _ = run(capsys, ["score", "--model", str(model_dir), "--text", str(text), "--json"])
    return [r["logprob"] for r in rows]


def test_every_hypothesis_lm_logprob_is_afp_score(capsys, tmp_path, model_dir):
    directory = write_espnet(tmp_path / "decode", random_lists(15))
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--nbest", "10",
                           "--score-weights", "decoder=0.6,ctc=0.4", str(directory)])
    assert len(rows) == 15
    hyps = [h for r in rows for h in r["nbest"]]
    expected = scores_of(capsys, model_dir, tmp_path, [h["words"] for h in hyps])
    assert [h["lm_logprob"] for h in hyps] == pytest.approx(expected, abs=1e-4)
    assert all(set(h["scores"]) == {"decoder", "ctc", "lm"} for h in hyps)


def test_show_first_pass_marks_changes(capsys, tmp_path, model_dir):
    lists = {"u1": [("the cat sat", {"lm": -1.0, "decoder": -10.0}), ("the cat ran", {"lm": -50.0, "decoder": -1.0})],
             "u2": [("a dog", {"lm": -1.0, "decoder": -1.0})]}
    directory = write_espnet(tmp_path / "decode", lists)
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--format", "espnet-nbest",
                               "--old-lm-weight", "1", "--lm-weight", "0", "--show-first-pass", str(directory)])
    assert captured.out.splitlines() == ["u1 the cat sat", "=u1 the cat sat", "u2 a dog", "=u2 a dog"]
    # without the old LM, the decoder score alone prefers "ran"
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--old-lm-weight", "0", "--lm-weight", "0",
                               "--show-first-pass", str(directory)])
    assert captured.out.splitlines()[:2] == ["u1 the cat ran", "*u1 the cat sat"]


def test_mostly_unknown_words_warn_once_per_job(capsys, tmp_path, model_dir):
    lists = {f"u{i}": [("THE CAT SAT", {"lm": -1.0})] for i in range(3)}
    directory = write_espnet(tmp_path / "decode", lists)
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), str(directory)])
    assert "unknown to the model" not in captured.err  # looked up in the model's case by default: said once
    assert captured.err.count("3 of its distinct words are in another case than the model's") == 1
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--keep-case", str(directory)])
    assert captured.err.count("unknown to the model") == 1
    assert "3 of the 3 are known in another case" in captured.err and "is the case of the input" in captured.err
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), str(write_espnet(
        tmp_path / "lower", {"u": [("the cat sat", {"lm": -1.0})]}))])
    assert "unknown to the model" not in captured.err


def test_unknown_words_known_in_no_other_case_get_no_case_hint(capsys, tmp_path, model_dir):
    lists = {"u": [("zork quux frob", {"lm": -1.0})]}
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), str(write_espnet(tmp_path / "d", lists))])
    assert captured.err.count("unknown to the model") == 1
    assert "case" not in captured.err


def test_unknown_score_name_is_one_line(capsys, tmp_path, model_dir):
    directory = write_espnet(tmp_path / "decode", random_lists(2))
    _, captured = run(capsys, ["rescore", "--model", str(model_dir), "--score-weights", "acustic=1",
                               str(directory)], status=2)
    assert "no score named acustic" in captured.err and "Traceback" not in captured.err


def test_real_espnet_lists_are_exact(capsys, tmp_path, model_dir):
    """The first 8 utterances of the real dev_clean lists: lm_logprob equals afp score (every hypothesis)."""
    require_shared(ESPNET)
    subset = espnet_subset(ESPNET, tmp_path / "dev_clean", 8)
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--nbest", "30", "--keep-case",
                           "--score-weights", "decoder=0.6,ctc=0.4", "--old-lm-weight", "0.6", "--lm-weight", "0",
                           str(subset)])  # --keep-case: afp score scores text as written
    assert len(rows) == 8
    assert rows[0]["first_pass"]["words"] == (ESPNET / "1best_recog" / "text").read_text().split("\n")[0].split()[1:]
    hyps = [h for r in rows for h in r["nbest"]]
    assert len(hyps) > 8  # distinct word sequences of 30-best lists
    expected = scores_of(capsys, model_dir, tmp_path, [h["words"] for h in hyps])
    assert [h["lm_logprob"] for h in hyps] == pytest.approx(expected, abs=1e-3)


def test_untuned_weights_keep_the_first_pass_and_warn_once(capsys, tmp_path, model_dir):
    directory = write_espnet(tmp_path / "decode", random_lists(4))
    rows, captured = run(capsys, ["rescore", "--model", str(model_dir), "--json", str(directory)])
    assert captured.err.count("the weights are untuned (the first pass's LM 'lm' at 1, the new LM at 0.25)") == 1
    assert {(r["old_lm_weight"], r["lm_weight"]) for r in rows} == {(1.0, 0.25)}
    assert "afp tune --refs REFS --save weights.json DEV" in captured.err
    for chosen in (["--old-lm-weight", "1"], ["--lm-weight", "0.3", "--old-lm-weight", "0.5"]):
        _, captured = run(capsys, ["rescore", "--model", str(model_dir), *chosen, str(directory)])
        assert "untuned" not in captured.err  # weights someone chose


def test_untuned_weights_are_the_recognisers_own_combination(capsys, tmp_path, model_dir):
    """An ESPnet list's totals (0.6 decoder + 0.4 ctc + 0.6 lm) give the untuned weights: the old LM
    at 0.6 (not 1, which outweighs the recogniser's LM and raised dev WER 1.70 -> 2.10 on the
    LibriSpeech lists) and the new LM at a quarter of that; with the new LM at 0 every list's
    answer is the recogniser's own 1-best."""
    weights = {"decoder": 0.6, "ctc": 0.4, "lm": 0.6}

    def total(hyp: tuple[str, dict[str, float]]) -> float:
        return sum(weights[n] * v for n, v in hyp[1].items())

    lists = {key: sorted(hyps, key=total, reverse=True)  # the recogniser's order, 4 totals for 3 weights
             for key, hyps in random_lists(30, seed=3).items() if len(hyps) >= 4}
    assert len(lists) >= 8
    directory = write_espnet(tmp_path / "decode", lists, weights)
    rows, captured = run(capsys, ["rescore", "--model", str(model_dir), "--json", str(directory)])
    assert "the first pass's LM 'lm' at 0.6, the new LM at 0.15" in captured.err
    assert {(r["old_lm_weight"], round(r["lm_weight"], 9)) for r in rows} == {(0.6, 0.15)}
    assert all(r["score_weights"] == {"decoder": 0.6, "ctc": 0.4} for r in rows)
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--lm-weight", "0", str(directory)])
    assert [r["best"]["rank"] for r in rows] == [1] * len(lists)
    assert all(not r["changed"] for r in rows)
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--lm-weight", "0",
                           "--old-lm-weight", "1", str(directory)])
    assert any(r["changed"] for r in rows)  # the old default's weight was not the recogniser's


def test_real_espnet_lists_give_their_recogniser_weights_and_first_pass(capsys, tmp_path, model_dir):
    require_shared(ESPNET)
    from lattices.formats.nbest import first_pass_weights, read_espnet_nbest

    lists = read_espnet_nbest(ESPNET)
    assert len(lists) == 2703
    assert {json.dumps(first_pass_weights(n)) for n in lists} == {
        json.dumps({"decoder": 0.6, "ctc": 0.4, "lm": 0.6})}
    subset = espnet_subset(ESPNET, tmp_path / "subset", 40)
    rows, _ = run(capsys, ["rescore", "--model", str(model_dir), "--json", "--lm-weight", "0", str(subset)])
    assert len(rows) == 40 and all(not r["changed"] for r in rows)
    assert [r["best"]["words"] for r in rows] == [
        line.split()[1:] for line in (ESPNET / "1best_recog" / "text").read_text().splitlines()[:40]]
