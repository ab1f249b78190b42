"""examples/pocketsphinx_client.py end to end on real speech (the five LibriVox utterances of
Debian's pocketsphinx-testdata, shipped in tests/fixtures/librivox): PocketSphinx decodes them,
and the lattices it writes are rescored with the PocketSphinx recipe's own command (the bundled
models/librispeech, through the Python API) and through a running server, with the same answers;
what the recipe shows the client printing is what it prints. Skipped where PocketSphinx is not
installed (it is in the test extra)."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pocketsphinx")

from lattices.formats.pocketsphinx import read_pocketsphinx  # noqa: E402
from lattices.oracle import oracle_errors  # noqa: E402
from afp.wer import read_hypotheses  # noqa: E402
from tests.service.test_server_process import start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
AUDIO = sorted((REPO / "tests" / "fixtures" / "librivox").glob("*.wav"))
LATTICES = REPO / "tests" / "fixtures" / "pocketsphinx"
RECIPE = REPO / "docs" / "recipes" / "pocketsphinx.md"
MODEL = "models/librispeech"
#: the recipe's command, run here as written (the shell expands the glob to AUDIO, in name order)
COMMAND = f"python examples/pocketsphinx_client.py --model {MODEL} tests/fixtures/librivox/*.wav"


def run_client(*argv: str, audio: list[Path] = AUDIO) -> str:
    done = subprocess.run([sys.executable, str(REPO / "examples" / "pocketsphinx_client.py"), *argv,
                           *(str(p.relative_to(REPO)) for p in audio)], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def printed_rows(stdout: str) -> list[dict]:
    """The client's text form (``KEY``, ``  decoder:  WORDS``, ``  rescored: WORDS`` per file) as
    the rows of its ``--json`` form."""
    lines = stdout.splitlines()
    assert len(lines) % 3 == 0, stdout
    rows = []
    for key, decoder, rescored in zip(lines[::3], lines[1::3], lines[2::3]):
        assert decoder.startswith("  decoder:  ") and rescored.startswith("  rescored: "), stdout
        rows.append({"key": key, "decoder": decoder.split()[1:], "rescored": rescored.split()[1:]})
    return rows


def recipe_example() -> list[str]:
    """The lines of the recipe's example of what the client prints (its ```text block right after
    the block with the command)."""
    page = RECIPE.read_text(encoding="utf-8")
    assert COMMAND in page, f"{RECIPE.name} no longer runs {COMMAND!r}: update this test with it"
    shown = re.search(r"^```text\n(.*?)^```", page[page.index(COMMAND):], re.M | re.S)
    assert shown, f"{RECIPE.name} shows no output of the client"
    return shown.group(1).rstrip("\n").split("\n")


@pytest.fixture(scope="module")
def printed() -> str:
    """What the recipe's command prints: run once, it decodes and rescores five dense lattices."""
    return run_client("--model", MODEL)


def test_the_recipe_shows_what_the_client_prints(printed):
    shown, lines = recipe_example(), printed.splitlines()
    assert len(shown) >= 3 and shown[0] in lines, f"the recipe shows {shown}; the client prints:\n{printed}"
    at = lines.index(shown[0])
    assert lines[at:at + len(shown)] == shown, f"the recipe shows {shown}; the client prints:\n{printed}"


def test_the_client_decodes_real_speech_and_rescores_through_the_api_and_the_server(printed):
    assert len(AUDIO) == 5
    local = printed_rows(printed)
    decoder = read_hypotheses(LATTICES / "hyp.trn")
    assert [row["key"] for row in local] == [p.stem for p in AUDIO]
    for row in local:
        assert row["decoder"] == decoder[row["key"]]  # the decoder's own 1-best, as when the fixtures were made
        text = gzip.decompress((LATTICES / f"{row['key']}.slf.gz").read_bytes()).decode()
        lattice = read_pocketsphinx(text, f"{row['key']}.slf")
        assert row["rescored"] and oracle_errors(lattice, row["rescored"])[0] == 0  # a path of its lattice
    assert any(row["rescored"] != row["decoder"] for row in local)  # the model changes some answers
    # through a server, the two shortest files (decoding is most of the client's time)
    short = sorted(sorted(AUDIO, key=lambda p: p.stat().st_size)[:2])  # in name order, as the shell globs
    process, url = start_server(REPO / MODEL, "--processes", "1", "--no-access-log")
    try:
        remote = [json.loads(line) for line in
                  run_client("--server", url, "--wait", "30", "--json", audio=short).splitlines()]
    finally:
        process.terminate()
        process.wait(30)
    assert [row["key"] for row in remote] == [p.stem for p in short]
    assert remote == [row for row in local if row["key"] in {p.stem for p in short}]  # one answer at every door,
    # in both of the client's forms
