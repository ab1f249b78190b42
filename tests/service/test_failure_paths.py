"""Every failure path ends in a clear error: a 422 with the API's error body, or one ``afp: error``
line and a non-zero status for that input only; never a traceback or a 500."""

from __future__ import annotations

import os

import pytest

from lattices.formats import read_lattice_file
from lm.vocab import Vocabulary
from service.app import json_depth
from service.cli import main
from tests.factories import WORDS, saved_model


# utt1: every path goes through "#1", which the model blocks; utt2 is fine
BLOCKED = """utt1
0 1 the 1.5,10,
1 2 #1 0.5,8,
2 3 cat 0.5,9,
3 0,0,

utt2
0 1 the 1,10,
1 2 dog 2,11,
2 0,0,

"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model read from a Kaldi-like table: ``<eps>``, ``#0`` and ``#1`` are in it, never predicted."""
    vocab = Vocabulary(("<eps>", "<s>", "</s>", "<unk>", "#0", "#1", *WORDS))
    return saved_model(tmp_path_factory.mktemp("m") / "model", vocab, cell="gru", mode="afp", rho=2)


def test_cli_blocked_word_fails_its_lattice_and_the_job_goes_on(capsys, tmp_path, model_dir):
    archive, out = tmp_path / "lats.txt", tmp_path / "rescored.txt"
    archive.write_text(BLOCKED)
    assert main(["rescore", "--model", str(model_dir), str(archive), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["utt1\tERROR", "utt2 the dog"]
    assert "word '#1' on arc 1 (state 1 -> 2) is a disambiguation symbol" in captured.err
    assert "Traceback" not in captured.err
    assert [lattice.key for lattice in read_lattice_file(out, "kaldi")] == ["utt2"]


def test_http_blocked_word_is_a_422_naming_it(client):
    r = client.post("/v1/rescore", content=BLOCKED, headers={"content-type": "text/plain"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["kind"], error["key"], error["field"]) == ("lattice_format", "utt1", "words")
    assert "'#1'" in error["message"] and "never predicts" in error["message"]


@pytest.mark.parametrize("path, body, content_type, message", [
    ("/v1/rescore", b"", "text/plain", "the request body is empty"),
    ("/v1/rescore", b" \n", "text/plain", "the request body is empty"),
    ("/v1/rescore", b"", "application/json", "the request body is empty"),
    ("/v1/perplexity", b"", "application/json", "the request body is empty"),
    ("/v1/rescore", b'{"lattice": "\xff"}', "application/json", "the body is not UTF-8 text (byte 13)"),
    ("/v1/perplexity", b'{"sentences": ["\xff"]}', "application/json", "the body is not UTF-8 text (byte 16)"),
    ("/v1/perplexity", b'{"sentences": [', "application/json", "the body is not valid JSON: Expecting value (line 1"),
])
def test_unreadable_bodies_get_accurate_422s(client, path, body, content_type, message):
    r = client.post(path, content=body, headers={"content-type": content_type})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["kind"] == "invalid_request" and r.json()["error"]["message"].startswith(message)


@pytest.mark.parametrize("path", ["/v1/rescore", "/v1/perplexity"])
@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"lattice": ' + b"[" * 1000 + b"]" * 1000 + b"}",
                                  b'{"sentences": ' + b"[" * 65 + b"]" * 65 + b"}"])
def test_deeply_nested_json_is_a_422_on_every_json_endpoint(client, path, body):
    for headers in ({"content-type": "application/json"}, {}):  # FastAPI reads a body without a type as JSON
        r = client.post(path, content=body, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == {"kind": "invalid_request", "message": "the JSON body nests [ and { more than 64 "
                                                                           "levels deep (AFP_MAX_JSON_DEPTH)"}


def test_deeply_nested_json_lattice_text_is_a_422(client):
    r = client.post("/v1/rescore", content=b"[" * 100_000, headers={"content-type": "text/plain"})
    assert r.status_code == 422 and r.json()["error"]["kind"] == "lattice_format"
    assert "nested too deeply" in r.json()["error"]["message"]


def test_json_depth_counts_brackets_outside_strings_only():
    assert json_depth(b"") == json_depth(b'"[[["') == json_depth(b"1") == 0
    assert json_depth(b'{"a": [[1], {"b": []}]}') == 4
    assert json_depth(b'["]]]]", [[[1]]]]') == 4  # closing brackets in a string hide nothing
    assert json_depth(b'["\\\\", "\\"[[", [1]]') == 2  # escaped backslash, escaped quote
    assert json_depth(b"[" * 100_000) == 100_000


def test_closed_stdout_ends_quietly(monkeypatch, capsys, tmp_path, model_dir):
    """``afp rescore ... | head``: the reader goes away; no traceback, no error line, status 141."""
    archive = tmp_path / "lats.txt"
    archive.write_text("".join(f"utt{i}\n0 1 the 1,10,\n1 2 cat 1,10,\n2 0,0,\n\n" for i in range(5)))
    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr("sys.stdout", stdout)
    try:
        assert main(["rescore", "--model", str(model_dir), str(archive)]) == 141
    finally:
        monkeypatch.undo()
        stdout.close()
    captured = capsys.readouterr()
    assert "error" not in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize("flag, value, field", [("--lm-weight", "nan", "lm_weights"),
                                                ("--acoustic-scale", "inf", "acoustic_scale"),
                                                ("--word-penalty", "-inf", "word_penalty"),
                                                ("--unk-penalty", "nan", "unk_penalty")])
def test_cli_non_finite_weights_are_one_error_line(capsys, tmp_path, model_dir, flag, value, field):
    archive = tmp_path / "lats.txt"
    archive.write_text(BLOCKED)
    assert main(["rescore", "--model", str(model_dir), str(archive), f"{flag}={value}"]) == 2
    captured = capsys.readouterr()
    assert f"{field} must be finite" in captured.err and "Traceback" not in captured.err and captured.out == ""
