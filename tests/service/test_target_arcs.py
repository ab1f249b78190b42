"""The expansion target of dense lattices at the HTTP door: the request field ``target_arcs``,
the server's ``AFP_TARGET_EXPANDED_ARCS``, and the server's ``AFP_MAX_EXPANDED_ARCS`` above both."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from service.settings import Settings
from tests.service.test_app import client_for

FIXTURE = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "pocketsphinx").glob("*0920.slf.gz"))[0]


@pytest.fixture(scope="module")
def dense():
    """A real PocketSphinx lattice as text (2,836 links; at rho 2 its expansion bound is 276 times that)."""
    return gzip.decompress(FIXTURE.read_bytes()).decode()


def post(client, lattice, **fields):
    return client.post("/v1/rescore", json={"format": "pocketsphinx", "lattice": lattice, **fields})


def test_the_request_field_and_the_server_default(model_dir, dense):
    with client_for(model_dir) as c:
        default = post(c, dense)
        assert default.status_code == 200, default.text
        (result,) = default.json()["results"]  # minimized, it fits 20,000 without the fit stage
        assert [s["stage"] for s in result["stages"]] == ["input", "determinize", "minimize"]
        assert "budget" not in (result["pruned"] or {}) and result["expanded_arcs"] <= 20_000
        asked = post(c, dense, target_arcs=1_000)
        assert asked.status_code == 200, asked.text
        (result,) = asked.json()["results"]
        assert result["pruned"]["budget"] == 1_000 and result["expanded_arcs"] <= 1_000
        assert [s["stage"] for s in result["stages"]] == ["input", "determinize", "minimize", "fit"]
        for bad in (-3, 1.5, "100", True):
            r = post(c, dense, target_arcs=bad)
            assert r.status_code == 422, (bad, r.text)
            assert "target_arcs" in r.text


def test_zero_is_no_target_and_null_the_servers(model_dir, dense):
    """``target_arcs: 0``: no target, the dense lattice expanded whole (the server's limit still
    applies); null is unset, the server's setting."""
    with client_for(model_dir, target_expanded_arcs=1_200) as c:
        whole = post(c, dense, target_arcs=0)
        assert whole.status_code == 200, whole.text
        (result,) = whole.json()["results"]
        assert result["stages"] is None and result["pruned"] is None and result["expanded_arcs"] > 20_000
        (result,) = post(c, dense, target_arcs=None).json()["results"]
        assert result["pruned"]["budget"] == 1_200
    with client_for(model_dir, max_expanded_arcs=900) as c:
        (result,) = post(c, dense, target_arcs=0).json()["results"]
        assert result["pruned"]["budget"] == 900 and result["expanded_arcs"] <= 900
    with client_for(model_dir, target_expanded_arcs=0) as c:  # AFP_TARGET_EXPANDED_ARCS=0
        (result,) = post(c, dense).json()["results"]
        assert result["stages"] is None and result["pruned"] is None and result["expanded_arcs"] > 20_000
        (result,) = post(c, dense, target_arcs=1_000).json()["results"]
        assert result["pruned"]["budget"] == 1_000


def test_the_field_says_how_to_switch_it_off():
    from service.schemas import RescoreOptionsModel

    assert "0: no target" in RescoreOptionsModel.model_fields["target_arcs"].description


def test_the_server_setting_and_its_limit(model_dir, dense):
    with client_for(model_dir, target_expanded_arcs=1_200) as c:
        (result,) = post(c, dense).json()["results"]
        assert result["pruned"]["budget"] == 1_200
        (result,) = post(c, dense, target_arcs=1_100).json()["results"]  # the request's own wins
        assert result["pruned"]["budget"] == 1_100
    with client_for(model_dir, max_expanded_arcs=900) as c:  # the memory limit caps any target
        (result,) = post(c, dense, target_arcs=50_000).json()["results"]
        assert result["pruned"]["budget"] == 900 and result["expanded_arcs"] <= 900


def test_the_environment(monkeypatch):
    monkeypatch.setenv("AFP_TARGET_EXPANDED_ARCS", "1234")
    assert Settings().target_expanded_arcs == 1234
    monkeypatch.delenv("AFP_TARGET_EXPANDED_ARCS")
    assert Settings().target_expanded_arcs == 20_000
    monkeypatch.setenv("AFP_TARGET_EXPANDED_ARCS", "0")  # no target
    assert Settings().target_expanded_arcs == 0
    for bad in ("-1", "many", "1.5"):
        monkeypatch.setenv("AFP_TARGET_EXPANDED_ARCS", bad)
        with pytest.raises(ValueError, match="target_expanded_arcs"):
            Settings()
