"""Fixtures of the library tests: a small GRU AFP-2 model (as the service tests have)."""

from __future__ import annotations

import pytest

from tests.factories import saved_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("m") / "model", cell="gru", mode="afp", rho=2)
