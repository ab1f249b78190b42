"""The request schema of ``POST /v1/rescore``, the flags of ``afp rescore`` and the engine agree
on every option, by behaviour: each published default, sent or given explicitly, builds the
options of sending nothing; a request or command with no option answers what the Python API
answers with its defaults; and the engine and the query string take what the schema takes at the
edge of every published bound (the schema's option fields and the flags are generated from one
table, ``lattices.options.OPTIONS``: comparing them with that table would check the generator
against its own input)."""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest

import service.engine
from afp.compare import compare_answers
from lattices.options import MAX_LM_WEIGHTS, MAX_MBR_NBEST, OPTIONS, RescoreOptions, option_spec
from lattices.rescore import rescore
from service.app import create_app
from service.cli import build_parser, main
from service.settings import Settings
from tests.service.test_app import VOLATILE, assert_same_answer, library_answer

# a Kaldi lattice with two word sequences
LATTICE = "u\n0 1 the 1,10,\n0 1 a 3,10,\n1 2 cat 1,10,\n2\n\n"
REQUEST_FIELDS = [spec.name for spec in OPTIONS if spec.http]
#: a dense PocketSphinx lattice: its expansion is made small, so the determinization, pruning and
#: target options change its answer
DENSE = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "pocketsphinx").glob("*0920.slf.gz"))[0]


@pytest.fixture(scope="module")
def published() -> dict:
    """The option fields of the RescoreRequest schema the server publishes (the app is built, not started)."""
    schema = create_app(Settings()).openapi()
    return schema["components"]["schemas"]["RescoreRequest"]["properties"]


def values_of(prop: dict) -> tuple[list[dict], bool]:
    """A property's non-null schemas, and whether it takes null."""
    members = prop.get("anyOf", [prop])
    return [m for m in members if m.get("type") != "null"], any(m.get("type") == "null" for m in members)


@pytest.fixture()
def built(monkeypatch) -> list[RescoreOptions]:
    """The options each request of the module's server hands the engine (then rescored as usual)."""
    seen: list[RescoreOptions] = []

    def capture(lattice, scorer, options, **kwargs):
        seen.append(dataclasses.replace(options, deadline=None))
        return rescore(lattice, scorer, options, **kwargs)

    monkeypatch.setattr(service.engine, "rescore", capture)
    return seen


def query_text(value) -> str:
    return {True: "true", False: "false"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def test_each_published_default_sent_explicitly_builds_the_options_of_sending_nothing(client, published, built):
    """What the schema says a field defaults to is what the server does when it is left out: sent
    explicitly (in a JSON body, and as a query parameter where it is not null), it builds the same
    engine options as a request without it. Every request option of the table must be published."""
    assert client.post("/v1/rescore", json={"lattice": LATTICE}).status_code == 200
    (nothing,) = built
    for name in REQUEST_FIELDS:
        default = published[name]["default"]
        r = client.post("/v1/rescore", json={"lattice": LATTICE, name: default})
        assert r.status_code == 200, (name, default, r.text)
        assert built[-1] == nothing, (name, default)
        if default is not None:
            r = client.post("/v1/rescore", params={name: query_text(default)}, content=LATTICE,
                            headers={"content-type": "text/plain"})
            assert r.status_code == 200, (name, default, r.text)
            assert built[-1] == nothing, (name, default, "query")


def option_flags_with_defaults() -> list[tuple[list[str], str]]:
    """``afp rescore``'s option flags whose help names a default, each as the arguments that give
    that default explicitly (``--nbest 1``; ``--auto-prune`` for "default on")."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    options = {spec.name for spec in OPTIONS}
    out = []
    for action in sub.choices["rescore"]._actions:
        found = re.search(r"\(default ([^)]+)\)", action.help or "")
        if action.dest in options and found:
            said = found.group(1)
            argv = [action.option_strings[0]] if said == "on" else [action.option_strings[0], said]
            out.append((argv, action.dest))
    return out


def test_each_flags_documented_default_given_explicitly_builds_the_options_of_no_flag(model_dir, tmp_path,
                                                                                      monkeypatch):
    """``afp rescore --help`` says "(default X)" of a flag: ``--flag X`` builds the engine options of
    leaving the flag out."""
    seen: list[RescoreOptions] = []

    def capture(lattices, scorer, options, **kwargs):
        seen.append(options)
        return iter(())

    monkeypatch.setattr("afp.jobs.rescore_all", capture)
    (tmp_path / "lat.txt").write_text(LATTICE)
    argv = ["rescore", "--model", str(model_dir), "--device", "cpu", "--quiet", str(tmp_path / "lat.txt")]
    flags = option_flags_with_defaults()
    assert {dest for _, dest in flags} >= {"nbest", "determinize_beam", "decode", "mbr_nbest", "prune_if_too_large"}
    assert main(argv) == 0
    (nothing,) = seen
    for given, dest in flags:
        assert main([*argv[:-1], *given, argv[-1]]) == 0, given
        assert seen[-1] == nothing, (given, dest)


def test_no_option_at_any_door_is_the_python_apis_default_answer(client, library, model_dir, tmp_path, capsys):
    """A JSON body with only the lattice, a raw body with no query parameter and ``afp rescore
    --json`` with no option flag answer what ``afp.Model.rescore`` answers with its defaults, on a
    dense lattice (made small by the default determinization and target) and on a Kaldi archive."""
    from tests.service.test_rescore_cli import ARCHIVE

    dense = gzip.decompress(DENSE.read_bytes()).decode()
    for text, fmt in ((dense, "pocketsphinx"), (ARCHIVE, "kaldi")):
        expected = library_answer(library, text, fmt)
        body = client.post("/v1/rescore", json={"format": fmt, "lattice": text})
        assert body.status_code == 200, body.text
        assert_same_answer(body.json()["results"], expected)
        raw = client.post("/v1/rescore", content=text, headers={"content-type": "text/plain"})  # format auto
        assert raw.status_code == 200, raw.text
        assert_same_answer(raw.json()["results"], expected)
        path = tmp_path / fmt / "request"  # a lattice without a key is named after its file, as after the request
        path.parent.mkdir()
        path.write_text(text)
        assert main(["rescore", "--model", str(model_dir), "--json", "--format", fmt, str(path)]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        want = [result.to_json() for result in expected]
        assert [sorted(line) for line in lines] == [sorted(w) for w in want]
        found = compare_answers(want, lines, ignore=VOLATILE)
        assert found.same, (fmt, found.difference)
        if fmt == "pocketsphinx":  # the defaults that make a dense lattice small were in play
            assert [stage["stage"] for stage in expected[0].stats["stages"]][:2] == ["input", "determinize"]


def bounds(published: dict) -> list[tuple[str, str, float]]:
    """(field, minimum or maximum, the bound) of every published numeric bound of an option."""
    out = []
    for name in REQUEST_FIELDS:
        for member in values_of(published[name])[0]:
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if key in member:
                    out.append((name, key, member[key]))
    return out


def test_the_engine_takes_what_the_schema_takes_at_every_published_bound(published):
    found = bounds(published)
    assert {(n, k) for n, k, _ in found} >= {("nbest", "minimum"), ("mbr_nbest", "maximum"), ("prune_beam", "minimum"),
                                             ("target_arcs", "minimum"), ("mbr_scale", "minimum")}
    assert not [b for b in found if b[1].startswith("exclusive")]  # every bound is inclusive, as the engine's
    for name, key, bound in found:
        spec = option_spec(name)
        if spec.kind in ("weight", "weights", "named_weights"):
            continue  # weights: a member's items, below
        if (name, key) == ("nbest", "maximum"):
            continue  # the server's own limit, AFP_MAX_NBEST, not the engine's (test_the_servers_nbest_limit_is_in_its_schema)
        step = 1 if spec.kind == "count" else 1e-6
        beyond = bound - step if key == "minimum" else bound + step
        RescoreOptions(**{spec.field: bound})  # the bound itself is taken
        with pytest.raises(ValueError, match=spec.field):
            RescoreOptions(**{spec.field: beyond})
    for name in ("lm_weight", "old_lm_weight", "acoustic_scale", "score_weights"):  # weights of a log-probability
        field = option_spec(name).field
        zero, negative = {"lm_weight": ((0.0,), (-1e-6,)), "score_weights": ({"a": 0.0}, {"a": -1e-6})}.get(
            name, (0.0, -1e-6))
        RescoreOptions(**{field: zero})
        with pytest.raises(ValueError, match="must not be negative"):
            RescoreOptions(**{field: negative})


def test_the_engine_takes_the_published_number_of_lm_weights_and_values(published):
    (one, many), _ = values_of(published["lm_weight"])
    most, least, low = many["maxItems"], many["minItems"], one["minimum"]
    RescoreOptions(lm_weights=(1.0,) * most)
    with pytest.raises(ValueError, match=f"at most {most}"):
        RescoreOptions(lm_weights=(1.0,) * (most + 1))
    RescoreOptions(lm_weights=(1.0,) * least)
    with pytest.raises(ValueError, match="at least one"):
        RescoreOptions(lm_weights=(1.0,) * (least - 1))
    RescoreOptions(lm_weights=(low,))
    with pytest.raises(ValueError, match="must not be negative"):
        RescoreOptions(lm_weights=(low - 1e-6,))
    for name in ("decode", "determinize"):
        (member,), _ = values_of(published[name])
        assert len(member["enum"]) >= 2
        for value in member["enum"]:
            RescoreOptions(**{name: value})
        with pytest.raises(ValueError, match=name):
            RescoreOptions(**{name: "other"})


def test_a_query_string_is_taken_and_refused_at_the_published_bounds_as_a_json_body(client):
    """Each numeric bound the query parameters publish: a raw-body request with the option at the
    bound in its query string is answered, one step beyond it is refused naming the option, as a
    JSON body with the same value is; ``lm_weight`` is taken as often as its maxItems says."""
    schema = create_app(Settings()).openapi()
    parameters = {p["name"]: p["schema"] for p in schema["paths"]["/v1/rescore"]["post"]["parameters"]}
    checked = set()
    for name in REQUEST_FIELDS:
        if name not in parameters or option_spec(name).kind in ("weight", "weights", "named_weights"):
            continue
        for member in values_of(parameters[name])[0]:
            for key in ("minimum", "maximum"):
                if key not in member or (name, key) == ("nbest", "maximum"):  # nbest's: the server's AFP_MAX_NBEST
                    continue
                step = 1 if member.get("type") == "integer" else 1e-6
                for value, taken in ((member[key], True), (member[key] + (step if key == "maximum" else -step), False)):
                    raw = client.post("/v1/rescore", params={name: str(value)}, content=LATTICE,
                                      headers={"content-type": "text/plain"})
                    body = client.post("/v1/rescore", json={"lattice": LATTICE, name: value})
                    assert raw.status_code == body.status_code == (200 if taken else 422), (name, value, raw.text)
                    if not taken:
                        assert raw.json()["error"]["field"] == body.json()["error"]["field"] == name, (name, value)
                checked.add((name, key))
    assert {("mbr_nbest", "maximum"), ("prune_beam", "minimum"), ("target_arcs", "minimum"),
            ("mbr_scale", "minimum"), ("nbest", "minimum")} <= checked
    most = parameters["lm_weight"]["maxItems"]
    for count, status in ((most, 200), (most + 1, 422)):
        r = client.post("/v1/rescore", params=[("lm_weight", "0.5")] * count, content=LATTICE,
                        headers={"content-type": "text/plain"})
        assert r.status_code == status, (count, r.text)
    assert r.json()["error"]["field"] == "lm_weight"


# ------------------------------------------------------------------ the limits every door now shares
def test_beam_zero_is_a_beam_at_every_door(client, tmp_path, model_dir, capsys):
    """``prune_beam`` 0 (keep the best paths only) was refused over HTTP alone (> 0 there, >= 0 in the engine)."""
    r = client.post("/v1/rescore", json={"lattice": LATTICE, "prune_beam": 0})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["best"]["words"] == ["the", "cat"]
    (tmp_path / "lat.txt").write_text(LATTICE)
    assert main(["rescore", "--model", str(model_dir), "--prune-beam", "0", str(tmp_path / "lat.txt")]) == 0
    assert capsys.readouterr().out == "u the cat\n"
    r = client.post("/v1/rescore", json={"lattice": LATTICE, "prune_beam": -0.5})
    assert r.status_code == 422 and r.json()["error"]["field"] == "prune_beam"


def test_mbr_nbest_is_capped_at_every_door(client, tmp_path, model_dir, capsys):
    """``mbr_nbest`` over 300 was refused over HTTP alone; the engine now refuses it for every door."""
    import afp

    r = client.post("/v1/rescore", json={"lattice": LATTICE, "mbr_nbest": MAX_MBR_NBEST + 1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "mbr_nbest"
    assert client.post("/v1/rescore", json={"lattice": LATTICE, "mbr_nbest": MAX_MBR_NBEST}).status_code == 200
    (tmp_path / "lat.txt").write_text(LATTICE)
    with pytest.raises(SystemExit) as exit_:
        main(["rescore", "--model", str(model_dir), "--mbr-nbest", str(MAX_MBR_NBEST + 1), str(tmp_path / "lat.txt")])
    assert exit_.value.code == 2 and "--mbr-nbest: must be a whole number from 1 to 300" in capsys.readouterr().err
    with pytest.raises(ValueError, match="^mbr_nbest must be a whole number from 1 to 300, got 301") as err:
        afp.load_model(model_dir, device="cpu").rescore(str(tmp_path / "lat.txt"), mbr_nbest=301)
    assert err.value.field == "mbr_nbest"


def test_too_many_lm_weights_are_refused_at_every_door(client, tmp_path, model_dir, capsys):
    r = client.post("/v1/rescore", json={"lattice": LATTICE, "lm_weight": [0.5] * (MAX_LM_WEIGHTS + 1)})
    assert r.status_code == 422 and r.json()["error"]["field"] == "lm_weight"
    (tmp_path / "lat.txt").write_text(LATTICE)
    flags = [word for _ in range(MAX_LM_WEIGHTS + 1) for word in ("--lm-weight", "0.5")]
    assert main(["rescore", "--model", str(model_dir), *flags, str(tmp_path / "lat.txt")]) == 2
    assert f"give at most {MAX_LM_WEIGHTS} weights" in capsys.readouterr().err


def test_whole_numbers_are_whole_numbers_over_http(client):
    """A count is an integer in a JSON body (not a boolean or a float, as for the engine), and
    the text of one in a query string (``target_arcs`` was refused there)."""
    for value in (True, 2.0, "2"):
        r = client.post("/v1/rescore", json={"lattice": LATTICE, "nbest": value})
        assert r.status_code == 422 and r.json()["error"]["field"] == "nbest", value
    r = client.post("/v1/rescore?nbest=2&target_arcs=1000&mbr_nbest=5", content=LATTICE,
                    headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    assert len(r.json()["results"][0]["nbest"]) == 2
    r = client.post("/v1/rescore?nbest=" + "9" * 5000, content=LATTICE, headers={"content-type": "text/plain"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "nbest"


def test_a_request_and_the_engine_say_the_same_of_a_bad_count():
    """Refusals name the option as the door spells it (the builder renames the engine's field)."""
    from afp.options import OptionValueError, build_options

    with pytest.raises(OptionValueError, match="^target_arcs must be a whole number of expanded arcs, at least 1 "
                                               r"\(0: no target"):
        build_options({"target_arcs": -1})
    assert dataclasses.replace(RescoreOptions(), target_expanded_arcs=0).target_expanded_arcs is None


def test_the_servers_nbest_limit_is_in_its_schema(model_dir):
    """AFP_MAX_NBEST is published as the maximum of nbest, in the JSON body and the query string,
    and a request over it gets the 422 the schema announces."""
    from tests.service.test_app import client_for

    with client_for(model_dir, max_nbest=7) as client:
        schema = client.get("/openapi.json").json()
        assert schema["components"]["schemas"]["RescoreRequest"]["properties"]["nbest"]["maximum"] == 7
        (query,) = [p for p in schema["paths"]["/v1/rescore"]["post"]["parameters"] if p["name"] == "nbest"]
        assert query["schema"]["maximum"] == 7
        reply = client.post("/v1/rescore", json={"format": "kaldi", "lattice": "u\n0 1 a 1,1,\n1 0,0,\n", "nbest": 8})
        assert reply.status_code == 422 and "over the limit 7" in reply.json()["error"]["message"]


def test_the_servers_request_limits_are_in_its_schema_and_hold_where_it_says(model_dir):
    """Every request limit is published (``info["x-afp-limits"]``), and the published numbers are
    the ones a request meets: as many sentences as ``maxItems`` (and as x-afp-limits says) are
    scored, one more is refused; a lattice over max_lattice_arcs and a body over max_body_bytes
    are refused."""
    from tests.service.test_app import client_for

    with client_for(model_dir, max_sentences=3, max_lattice_arcs=2, max_body_bytes=4096) as client:
        schema = client.get("/openapi.json").json()
        limits = schema["info"]["x-afp-limits"]
        assert {"max_body_bytes", "max_lattices", "max_lattice_arcs", "max_expanded_arcs", "max_nbest",
                "max_sentences", "max_sentence_words", "request_timeout_s"} <= set(limits)
        most = schema["components"]["schemas"]["PerplexityRequest"]["properties"]["sentences"]["maxItems"]
        assert most == limits["max_sentences"]
        assert client.post("/v1/perplexity", json={"sentences": ["the cat"] * most}).status_code == 200
        assert client.post("/v1/perplexity", json={"sentences": ["the cat"] * (most + 1)}).status_code == 422
        arcs = "u\n" + "".join(f"0 1 {w} 1,1,\n" for w in ["a", "b", "c"][:limits["max_lattice_arcs"] + 1]) + "1 0,0,\n"
        assert client.post("/v1/rescore", json={"format": "kaldi", "lattice": arcs}).status_code == 422
        assert client.post("/v1/rescore", content=b"x" * (limits["max_body_bytes"] + 1),
                           headers={"Content-Type": "text/plain"}).status_code == 413


def test_the_score_weights_query_pattern_takes_what_the_parser_takes(client):
    """The published pattern and afp.options.parse_score_weights agree: empty (no named weights)
    and NAME=W lists are taken, a name without a weight is not; an empty query value is answered."""
    import re

    from afp.options import OptionsError, parse_score_weights

    (param,) = [p for p in client.get("/openapi.json").json()["paths"]["/v1/rescore"]["post"]["parameters"]
                if p["name"] == "score_weights"]
    pattern = re.compile(param["schema"]["pattern"])
    for text in ("", "  ", "decoder=0.6", "decoder=0.6, ctc = 0.4"):
        assert pattern.search(text) and isinstance(parse_score_weights(text), dict), text
    for text in ("decoder", "decoder=", "=0.5"):
        assert not pattern.search(text), text
        with pytest.raises(OptionsError):
            parse_score_weights(text)
    reply = client.post("/v1/rescore?score_weights=", content="u\n0 1 a 1,1,\n1 0,0,\n",
                        headers={"Content-Type": "text/plain"})
    assert reply.status_code == 200
