"""The Python API (``afp``): the README's example runs as written, and the API gives the command
line's numbers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import afp
from service.cli import main

REPO = Path(__file__).resolve().parents[2]


def readme_python_blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_readme_python_example_runs_as_written():
    blocks = readme_python_blocks()
    assert blocks, "the README has no python example"
    for block in blocks:  # in a fresh interpreter, from the repository root, as a user runs it
        done = subprocess.run([sys.executable, "-c", block], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "utt-example-1" in done.stdout


def test_the_api_gives_the_cli_numbers(capsys):
    model = afp.load_model()
    assert main(["rescore", "--json", "--nbest", "2", "--lm-weight", "0.5", "--unk-penalty", "-2",
                 str(REPO / "examples" / "lattice.txt")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    results = model.rescore(str(REPO / "examples" / "lattice.txt"), nbest=2, lm_weight=0.5, unk_penalty=-2)
    assert [r[0].to_json()["best"]["words"] for r in results] == [row["best"]["words"] for row in rows]
    assert [r[0].best.score for r in results] == pytest.approx([row["best"]["score"] for row in rows], abs=1e-9)
    assert main(["score", "--json", "--text", str(REPO / "examples" / "conversation.txt")]) == 0
    cli = [json.loads(line)["logprob"] for line in capsys.readouterr().out.splitlines()]
    lines = (REPO / "examples" / "conversation.txt").read_text().splitlines()
    assert [s.logprob for s in model.score(lines)] == pytest.approx(cli, abs=1e-9)


def test_bad_options_and_failed_lattices_are_clear_errors():
    model = afp.load_model()
    with pytest.raises(TypeError, match="unknown rescoring option"):
        model.rescore(str(REPO / "examples" / "lattice.txt"), lm_wieght=0.5)
    with pytest.raises(afp.RescoreFailed, match="exceeds the budget") as err:
        model.rescore(str(REPO / "examples" / "lattice.txt"), max_arcs=3)
    assert err.value.key == "utt-example-1"
