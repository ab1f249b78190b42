"""examples/pocketsphinx_client.py end to end on real speech (the five LibriVox utterances of
Debian's pocketsphinx-testdata, shipped in tests/fixtures/librivox): PocketSphinx decodes them,
and the lattices it writes are rescored through the Python API and through a running server,
with the same answers. Skipped where PocketSphinx is not installed (it is in the test extra)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pocketsphinx")

from lattices.formats.pocketsphinx import read_pocketsphinx  # noqa: E402
from lattices.oracle import oracle_errors  # noqa: E402
from afp.wer import read_hypotheses  # noqa: E402
from tests.factories import saved_model  # noqa: E402
from tests.service.test_server_process import start_server  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
AUDIO = sorted((REPO / "tests" / "fixtures" / "librivox").glob("*.wav"))
LATTICES = REPO / "tests" / "fixtures" / "pocketsphinx"


def run_client(*argv: str) -> list[dict]:
    done = subprocess.run([sys.executable, str(REPO / "examples" / "pocketsphinx_client.py"), "--json", *argv,
                           *map(str, AUDIO)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("client") / "model", cell="gru", mode="afp", rho=2)


def test_the_client_decodes_real_speech_and_rescores_through_the_api_and_the_server(model):
    assert len(AUDIO) == 5
    local = run_client("--model", str(model))
    decoder = read_hypotheses(LATTICES / "hyp.trn")
    assert [row["key"] for row in local] == [p.stem for p in AUDIO]
    for row in local:
        assert row["decoder"] == decoder[row["key"]]  # the decoder's own 1-best, as when the fixtures were made
        text = gzip.decompress((LATTICES / f"{row['key']}.slf.gz").read_bytes()).decode()
        lattice = read_pocketsphinx(text, f"{row['key']}.slf")
        assert row["rescored"] and oracle_errors(lattice, row["rescored"])[0] == 0  # a path of its lattice
    process, url = start_server(model, "--no-access-log")
    try:
        remote = run_client("--server", url, "--wait", "30")
    finally:
        process.terminate()
        process.wait(30)
    assert remote == local  # one answer at every door
