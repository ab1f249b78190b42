"""Fixtures shared by the service tests: a small GRU AFP-2 model and an in-process client on it.
A test module that needs another model defines its own ``model_dir`` (``client`` then uses it)."""

from __future__ import annotations

import pytest

from tests.factories import saved_model
from tests.service.test_app import client_for


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("m") / "model", cell="gru", mode="afp", rho=2)


@pytest.fixture(scope="module")
def client(model_dir):
    with client_for(model_dir) as c:
        yield c


@pytest.fixture(scope="module")
def library(model_dir):
    """The Python API's model on the same directory and device (``auto``) as the module's server:
    what ``afp rescore`` answers, for comparing the HTTP answer with."""
    import afp

    return afp.load_model(model_dir)
