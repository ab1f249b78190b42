"""``afp rescore --old-lm ARPA``: the n-gram that built G is subtracted exactly from the graph score."""

from __future__ import annotations

import json

import pytest

from service.cli import main
from tests.factories import saved_model
from tests.lm.ngram_reference import parse_arpa
from tests.lm.test_ngram import HAND

PRONUNCIATION = {"a": 0.25, "b": 0.5, "c": 0.125}  # costs the graph adds to the old LM's (Kaldi's L and H)


def archive(model) -> str:
    """A Kaldi CompactLattice with two paths, 'a b c' and 'b c' (no merged histories), whose graph
    costs are exactly the ARPA model's costs plus pronunciation costs."""
    def cost(history, word):
        return -model.logprob([model.id(w) for w in history], model.id(word)) + PRONUNCIATION.get(word, 0.0)

    lines = ["utt1"]
    paths = {(0, 1, 2, 3): ["a", "b", "c"], (0, 4, 5): ["b", "c"]}
    for states, words in paths.items():
        history = ["<s>"]
        for (src, dst), word in zip(zip(states, states[1:]), words):
            lines.append(f"{src} {dst} {word} {cost(history, word):.10f},{10 + len(history)},")
            history.append(word)
        lines.append(f"{states[-1]} {cost(history, '</s>'):.10f},0,")
    return "\n".join(lines) + "\n\n"


def test_old_lm_is_subtracted_exactly(tmp_path, capsys):
    model = parse_arpa(HAND)
    arpa = tmp_path / "G.arpa"
    arpa.write_text(HAND)
    lattice = tmp_path / "lat.txt"
    lattice.write_text(archive(model))
    model_dir = saved_model(tmp_path / "m", cell="gru", rho=2)
    argv = ["rescore", "--model", str(model_dir), "--json", "--nbest", "2", "--lm-weight", "0",
            "--old-lm-weight", "0.5", "--acoustic-scale", "0", str(lattice)]
    assert main([*argv, "--old-lm", str(arpa)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["old_lm_score"] == "old-lm scorer"
    for hyp in row["nbest"]:
        exact = sum(model.logprob([model.id(w) for w in ["<s>", *hyp["words"]][:i + 1]], model.id(w))
                    for i, w in enumerate([*hyp["words"], "</s>"]))
        assert hyp["old_lm"] == pytest.approx(exact, abs=1e-6)
        # what is left of the graph score is the pronunciation cost, at full weight
        assert hyp["scores"]["graph"] == pytest.approx(-sum(PRONUNCIATION[w] for w in hyp["words"]), abs=1e-6)
        assert hyp["score"] == pytest.approx(hyp["scores"]["graph"] + 0.5 * exact, abs=1e-6)
    # without --old-lm the whole graph score is the old LM and 0.5 scales the pronunciations too
    assert main(argv) == 0
    (plain,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for hyp in plain["nbest"]:
        assert hyp["score"] == pytest.approx(0.5 * hyp["old_lm"], abs=1e-6)


def test_bad_arpa_is_one_line(tmp_path, capsys):
    arpa = tmp_path / "G.arpa"
    arpa.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1 </s>\n\\end\\\n")
    lattice = tmp_path / "lat.txt"
    lattice.write_text("utt1\n0 1 a 1,1,\n1 0,0,\n\n")
    assert main(["rescore", "--model", str(saved_model(tmp_path / "m", rho=2)), "--old-lm", str(arpa),
                 str(lattice)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("afp: error:") and "G.arpa" in err and "Traceback" not in err


def test_the_server_takes_the_old_lms_the_command_line_takes_with_its_answers(tmp_path, capsys):
    """An n-gram model directory as the old LM (afp ngram --store), given to afp rescore
    --old-lm and to the server (AFP_OLD_LM): the same words and scores from both doors."""
    from afp.compare import compare_answers
    from tests.service.test_app import client_for

    arpa = tmp_path / "G.arpa"
    arpa.write_text(HAND)
    assert main(["ngram", "--arpa", str(arpa), "--store", str(tmp_path / "G")]) == 0
    capsys.readouterr()
    text = archive(parse_arpa(HAND))
    (tmp_path / "lat.txt").write_text(text)
    model_dir = saved_model(tmp_path / "m", cell="gru", rho=2)
    options = {"nbest": 2, "lm_weight": 0.5, "old_lm_weight": 0.5}
    assert main(["rescore", "--model", str(model_dir), "--json", "--nbest", "2", "--lm-weight", "0.5",
                 "--old-lm-weight", "0.5", "--old-lm", str(tmp_path / "G"), str(tmp_path / "lat.txt")]) == 0
    cli = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert cli[0]["old_lm_score"] == "old-lm scorer"
    with client_for(model_dir, old_lm=tmp_path / "G") as client:
        reply = client.post("/v1/rescore", json={"format": "kaldi", "lattice": text, **options})
    assert reply.status_code == 200
    found = compare_answers(cli, reply.json()["results"], ignore={"seconds", "timing"})
    assert found.same and found.largest == 0.0, found.difference
