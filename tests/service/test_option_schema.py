"""The request schema of ``POST /v1/rescore`` and the engine agree on every option: what the
OpenAPI schema publishes of each (its default, bounds, values, whether null is allowed) is
``RescoreOptions``' own, and ``RescoreOptions`` takes exactly what the schema takes at the edge of
every published bound (the schema's option fields and the flags of ``afp rescore`` are generated
from one table, ``lattices.options.OPTIONS``)."""

from __future__ import annotations

import dataclasses

import pytest

from lattices.options import MAX_LM_WEIGHTS, MAX_MBR_NBEST, OPTIONS, RescoreOptions, option_spec
from service.app import create_app
from service.cli import main
from service.settings import Settings

# a Kaldi lattice with two word sequences
LATTICE = "u\n0 1 the 1,10,\n0 1 a 3,10,\n1 2 cat 1,10,\n2\n\n"
REQUEST_FIELDS = [spec.name for spec in OPTIONS if spec.http]


@pytest.fixture(scope="module")
def published() -> dict:
    """The option fields of the RescoreRequest schema the server publishes (the app is built, not started)."""
    schema = create_app(Settings()).openapi()
    return schema["components"]["schemas"]["RescoreRequest"]["properties"]


def values_of(prop: dict) -> tuple[list[dict], bool]:
    """A property's non-null schemas, and whether it takes null."""
    members = prop.get("anyOf", [prop])
    return [m for m in members if m.get("type") != "null"], any(m.get("type") == "null" for m in members)


def test_the_schema_has_a_field_for_every_request_option_and_only_those(published):
    assert set(REQUEST_FIELDS) <= set(published)
    assert set(published) - set(REQUEST_FIELDS) == {"features", "weights", "format", "lattice", "words"}


@pytest.mark.parametrize("name", REQUEST_FIELDS)
def test_the_published_default_is_the_engines(published, name):
    field = option_spec(name).field
    engine = getattr(RescoreOptions(), field)
    if name == "target_arcs":  # unset: the server's AFP_TARGET_EXPANDED_ARCS, whose default is the engine's
        assert published[name]["default"] is None and Settings().target_expanded_arcs == engine
    elif name == "score_weights":  # none given
        assert published[name]["default"] is None and engine == ()
    else:
        assert published[name]["default"] == engine, name
    if name in ("lm_weight", "unk_penalty"):  # the untuned default and the model's own: not a number
        assert engine is None and published[name]["default"] is None
    _, nullable = values_of(published[name])
    assert nullable == (published[name]["default"] is None or option_spec(name).nullable)


def test_the_published_defaults_that_were_wrong():
    """``lm_weight``'s default is the untuned one (a quarter of the old LM's weight, not 0.25 absolute),
    ``unk_penalty``'s the model's own (not 0), ``determinize_beam``'s the engine's 10."""
    props = create_app(Settings()).openapi()["components"]["schemas"]["RescoreRequest"]["properties"]
    assert props["lm_weight"]["default"] is None
    assert "0.25 times the old LM's weight" in props["lm_weight"]["description"]
    assert props["unk_penalty"]["default"] is None and "the model's own" in props["unk_penalty"]["description"]
    assert props["determinize_beam"]["default"] == 10.0


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
    assert many["maxItems"] == MAX_LM_WEIGHTS and many["minItems"] == 1 and one["minimum"] == 0
    RescoreOptions(lm_weights=(1.0,) * MAX_LM_WEIGHTS)
    with pytest.raises(ValueError, match=f"at most {MAX_LM_WEIGHTS}"):
        RescoreOptions(lm_weights=(1.0,) * (MAX_LM_WEIGHTS + 1))
    with pytest.raises(ValueError, match="at least one"):
        RescoreOptions(lm_weights=())
    for name in ("decode", "determinize"):
        (member,), _ = values_of(published[name])
        assert tuple(member["enum"]) == option_spec(name).choices
        for value in member["enum"]:
            RescoreOptions(**{name: value})
        with pytest.raises(ValueError, match=name):
            RescoreOptions(**{name: "other"})


def test_the_query_parameters_publish_the_same_limits(published):
    schema = create_app(Settings()).openapi()
    parameters = {p["name"]: p["schema"] for p in schema["paths"]["/v1/rescore"]["post"]["parameters"]}
    assert parameters["lm_weight"]["maxItems"] == MAX_LM_WEIGHTS
    for name in ("nbest", "mbr_nbest", "prune_beam", "target_arcs", "mbr_scale"):
        assert values_of(parameters[name]) == values_of({k: v for k, v in published[name].items()
                                                         if k not in ("title", "description", "default")}), name


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
