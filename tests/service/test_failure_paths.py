"""Every failure path ends in a clear error: a 422 with the API's error body, or one ``afp: error``
line and a non-zero status for that input only; never a traceback or a 500."""

from __future__ import annotations

import json
import os

import pytest

from lattices.formats import read_lattice_file
from lm.vocab import Vocabulary
from service.app import json_depth
from service.cli import main
from tests.factories import WORDS, saved_model


# utt1: every path goes through "#1", a disambiguation symbol (skipped like an epsilon); utt2 is fine
DISAMBIGUATED = """utt1
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


def test_cli_disambiguation_symbols_are_skipped_not_scored(capsys, tmp_path, model_dir):
    archive, out = tmp_path / "lats.txt", tmp_path / "rescored.txt"
    archive.write_text(DISAMBIGUATED)
    assert main(["rescore", "--model", str(model_dir), str(archive), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["utt1 the cat", "utt2 the dog"]
    assert "error" not in captured.err and "unknown to the model" not in captured.err
    assert [lattice.key for lattice in read_lattice_file(out, "kaldi")] == ["utt1", "utt2"]


def test_http_disambiguation_symbols_are_skipped_not_scored(client):
    r = client.post("/v1/rescore", content=DISAMBIGUATED, headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    assert [row["best"]["words"] for row in r.json()["results"]] == [["the", "cat"], ["the", "dog"]]
    assert [row["best"]["unk"] for row in r.json()["results"]] == [0, 0]


def test_a_word_the_model_never_predicts_fails_its_lattice_naming_it(model_dir):
    """Only reachable from Python, with a skip list that leaves ``<s>`` in: every path of utt1
    goes through it, so no path has a finite score."""
    from lattices.formats import read_lattices
    from lattices.lattice import LatticeFormatError
    from lattices.rescore import RescoreOptions, rescore
    from lm.checkpoint import load_checkpoint
    from lm.scorer import LMScorer

    lattice = read_lattices(DISAMBIGUATED.replace("#1", "<s>"), "kaldi", source="test")[0]
    scorer = LMScorer(load_checkpoint(model_dir))
    with pytest.raises(LatticeFormatError, match=r"word '<s>' on arc 1 \(state 1 -> 2\) is the sentence-start "
                                                 r"symbol the language model never predicts") as err:
        rescore(lattice, scorer, RescoreOptions(skip_words=frozenset({"<eps>"})))
    assert (err.value.key, err.value.field) == ("utt1", "words")


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
    archive.write_text(DISAMBIGUATED)
    assert main(["rescore", "--model", str(model_dir), str(archive), f"{flag}={value}"]) == 2
    captured = capsys.readouterr()
    assert f"{field} must be finite" in captured.err and "Traceback" not in captured.err and captured.out == ""


JSON = {"content-type": "application/json"}
LONG = "X" * 1_000_000


@pytest.mark.parametrize("path, body, message", [
    ("/v1/perplexity", b'{"sentences": [' + b"1" * 5000 + b"]}", "the body is not usable JSON: it holds an integer of "
                                                                 "more than 4300 digits"),
    ("/v1/rescore", b'{"lattice": "x", "nbest": ' + b"1" * 5000 + b"}", "the body is not usable JSON: it holds an integer"),
    ("/v1/perplexity", b'{"sentences": ["A"], "sentences": ["B"]}', "the body is not usable JSON: the key 'sentences' "
                                                                  "appears twice in one object"),
    ("/v1/perplexity", b'{"sentences": ["\\ud800 YEAH"]}', "the JSON body holds a lone UTF-16 surrogate escape \\ud800"),
    ("/v1/rescore", b'{"lattice": "utt\\n0 1 \\udfff 1,1,\\n1\\n"}', "the JSON body holds a lone UTF-16 surrogate escape "
                                                                   "\\udfff"),
    ("/v1/rescore", b'{"lattice": "x", "lm_weight": 1e999}', "lm_weight: Input should be a finite number"),
    ("/v1/rescore", b'{"lattice": "x", "unk_penalty": NaN}', "unk_penalty: Input should be a finite number"),
])
def test_every_way_json_parsing_can_fail_is_a_422(client, path, body, message):
    r = client.post(path, content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith(message), r.json()


def test_a_surrogate_pair_is_text_and_accepted(client):
    r = client.post("/v1/perplexity", content=b'{"sentences": ["\\ud83d\\ude00 the"]}', headers=JSON)
    assert r.status_code == 200, r.text
    assert r.json()["oov"] == 1


@pytest.mark.parametrize("body, run", [
    (f"utt\n0 1 the {LONG},1,\n1\n\n", 1_000_002),  # the field "LONG,1," is quoted
    (f"utt\n{LONG} 1 the 1,1,\n1\n\n", 1_000_002),
    (LONG, 1_000_000),  # the line itself
    (f"VERSION=1.0\nN=2 L=1\nI=0 W=!NULL\nI=1 W=the\nJ=0 S=0 E=1 a={LONG}\n", 1_000_002)])  # "a=LONG"
def test_error_bodies_quote_only_a_short_excerpt_of_a_huge_line(client, body, run):
    r = client.post("/v1/rescore", content=body.encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 422, r.text[:300]
    assert len(r.content) < 1000, r.text[:300]
    assert f"({run} characters)" in r.text


def test_weights_that_overflow_are_a_422_naming_the_weight(client):
    lattice = DISAMBIGUATED.split("\n\n")[1] + "\n"
    r = client.post("/v1/rescore", json={"lattice": lattice, "lm_weight": 1e308})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "lm_weight" and "overflow" in error["message"] and "lm_weight = 1e+308" in error["message"]


@pytest.mark.parametrize("field, value", [("acoustic_scale", -1), ("old_lm_weight", -0.5), ("lm_weight", [0.5, -1]),
                                          ("score_weights", {"acoustic": -1})])
def test_weights_below_zero_are_a_422_naming_the_field(client, field, value):
    lattice = DISAMBIGUATED.split("\n\n")[1] + "\n"
    r = client.post("/v1/rescore", json={"lattice": lattice, field: value})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"].split(".")[0] == field
    assert "greater than or equal to 0" in r.json()["error"]["message"]


def test_cli_weights_that_overflow_or_are_negative_are_one_error_line(capsys, tmp_path, model_dir):
    archive = tmp_path / "lats.txt"
    archive.write_text(DISAMBIGUATED)
    for flag, value, text in (("--lm-weight", "1e308", "the weighted scores overflow: lm_weight = 1e+308"),
                              ("--acoustic-scale", "-1", "acoustic_scale must not be negative")):
        assert main(["rescore", "--model", str(model_dir), str(archive), f"{flag}={value}"]) == 2
        captured = capsys.readouterr()
        assert text in captured.err and "Traceback" not in captured.err and "no final state" not in captured.err


def test_a_json_request_sent_without_its_content_type_is_told_so(client):
    lattice = DISAMBIGUATED.split("\n\n")[1] + "\n"
    for headers in ({"content-type": "application/x-www-form-urlencoded"}, {"content-type": "text/plain"}):
        r = client.post("/v1/rescore", content=json.dumps({"lattice": lattice}).encode(), headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"].startswith("this body is a JSON RescoreRequest: send it with Content-Type: "
                                                       "application/json")
    r = client.post("/v1/perplexity", content=b'{"sentences": ["the"]}', headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "send a JSON object (Content-Type: application/json)" in r.json()["error"]["message"]


def test_a_gzip_body_without_content_encoding_is_recognised(client):
    import gzip

    for path in ("/v1/rescore", "/v1/perplexity"):
        r = client.post(path, content=gzip.compress(DISAMBIGUATED.encode()), headers={"content-type": "text/plain"})
        assert r.status_code == 422, r.text
        assert "gzip-compressed" in r.json()["error"]["message"] and "Content-Encoding: gzip" in r.json()["error"]["message"]


def test_query_options_take_score_weights_as_name_equals_weight(client):
    text = {"content-type": "text/plain"}
    r = client.post("/v1/rescore?score_weights=acoustic=0.5", content=DISAMBIGUATED, headers=text)
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["score_weights"] == {"acoustic": 0.5}
    two = client.post("/v1/rescore?score_weights=acoustic=0.5,%20ctc=0.4", content=DISAMBIGUATED, headers=text)
    assert two.status_code == 422 and "no score named ctc" in two.json()["error"]["message"]  # both were read
    bad = client.post("/v1/rescore?score_weights=acoustic:0.5", content=DISAMBIGUATED, headers=text)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "score_weights"
    assert "expected NAME=WEIGHT,NAME=WEIGHT" in bad.json()["error"]["message"]


def test_query_options_with_a_json_body_are_refused_not_ignored(client):
    r = client.post("/v1/rescore?nbest=5", json={"lattice": DISAMBIGUATED})
    assert r.status_code == 422 and r.json()["error"]["field"] == "nbest"


@pytest.mark.parametrize("body, message, field", [
    ({"lattice": 5}, "lattice: must be a string, an object or a list, got 5", "lattice"),
    ({"lattice": [], "format": "json"}, "lattice: List should have at least 1 item", "lattice"),
    ({"lattice": [{"key": "a"}], "format": "openfst"}, "lattice: a openfst lattice is sent as a string (its text), "
                                                       "got a list of 1 entry", "lattice"),
    ({"lattice": "x", "format": "k2"}, "lattice: a k2 lattice is sent as a JSON object", "lattice"),
    ({"lattice": "x", "lm_weight": [0.5, -1]}, "lm_weight.1: Input should be greater than or equal to 0", "lm_weight.1"),
    ({"lattice": "x", "lm_weight": "a"}, 'lm_weight: must be a number or a list, got "a"', "lm_weight"),
])
def test_validation_errors_say_what_the_field_takes_and_what_came(client, body, message, field):
    r = client.post("/v1/rescore", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith(message) and r.json()["error"]["field"] == field


def test_a_405_names_the_allowed_methods(client):
    for method, path, allowed in (("TRACE", "/v1/rescore", "POST"), ("DELETE", "/v1/perplexity", "POST"),
                                  ("POST", "/v1/models", "GET")):
        r = client.request(method, path)
        assert r.status_code == 405 and r.headers["allow"] == allowed
        assert r.json()["error"]["kind"] == "http_error"


def test_the_schema_documents_query_options_and_the_format_rule(client):
    spec = client.get("/openapi.json").json()
    parameters = {p["name"]: p for p in spec["paths"]["/v1/rescore"]["post"]["parameters"]}
    assert {"nbest", "lm_weight", "score_weights", "unk_penalty", "decode", "mbr_nbest", "mbr_scale", "old_lm_score",
            "format"} <= set(parameters)
    assert all(p["in"] == "query" and not p["required"] for p in parameters.values())
    request = spec["components"]["schemas"]["RescoreRequest"]
    rules = {tuple(rule["if"]["properties"]["format"]["enum"]): rule["then"]["properties"]["lattice"]["type"]
             for rule in request["allOf"]}
    assert rules == {("kaldi", "htk", "pocketsphinx", "openfst", "srilm-nbest"): "string", ("k2",): ["object", "array"]}


def test_mostly_unknown_words_warn_over_http_as_in_the_cli(client):
    text = "u\n0 1 THE 1,1,\n1 2 CAT 1,1,\n2\n\nv\n0 1 ZORK 1,1,\n1\n\n"
    matched = client.post("/v1/rescore", json={"lattice": text}).json()  # by default THE, CAT are looked up as the, cat
    assert [w for w in matched["warnings"] if "unknown to the model" in w][0].startswith("lattice 'v': 100%")
    r = client.post("/v1/rescore", json={"lattice": text, "match_case": False})
    assert r.status_code == 200, r.text
    (warning,) = [w for w in r.json()["warnings"] if "unknown to the model" in w]  # once per request
    assert warning.startswith("lattice 'u': 100% of its distinct words are unknown to the model")
    assert "known in another case (CAT -> cat)" in warning
    fine = client.post("/v1/rescore", json={"lattice": "u\n0 1 the 1,1,\n1 2 cat 1,1,\n2\n\n"})
    assert not [w for w in fine.json()["warnings"] if "unknown to the model" in w]
