"""A schema-driven fuzz run (schemathesis against ``/openapi.json``): requests generated from the
schema, in bounded numbers per operation, must never get a 5xx, and every answer must match the
documented responses (status codes, content types, bodies, headers...).

One of schemathesis's checks is left out: "a schema-valid request is accepted". A lattice is text
in one of several formats, which no JSON schema can describe, so a schema-valid request may
still hold a malformed lattice (the 422 names it); everything else the schema can say (numbers
and their ranges, which formats take strings) is checked by the other checks and by
``test_failure_paths``."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")  # a test extra: make test installs it

from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from service.app import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.factories import saved_model  # noqa: E402

EXAMPLES = 40  # per operation: bounded, and derandomized so that a run is repeatable


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    model = saved_model(tmp_path_factory.mktemp("fuzz") / "model", cell="gru", mode="afp", rho=2)
    # small budgets: a generated request is answered quickly, whatever it holds
    app = create_app(Settings(model_dir=model, max_expanded_arcs=20_000, max_lattice_arcs=2_000,
                              request_timeout_s=10))
    with TestClient(app):  # the lifespan loads the model
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


def operations(schema) -> dict[str, object]:
    found = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        found[f"{operation.method.upper()} {operation.path}"] = operation
    return found


def test_the_schema_lists_every_route(schema):
    assert {"POST /v1/rescore", "POST /v1/perplexity", "GET /v1/models", "GET /healthz", "GET /readyz"} <= set(
        operations(schema))


@pytest.mark.parametrize("name", ["POST /v1/rescore", "POST /v1/perplexity", "GET /v1/models", "GET /healthz"])
def test_generated_requests_get_documented_answers_and_never_a_5xx(schema, name):
    operation = operations(schema)[name]
    seen: list[int] = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def check(case):
        response = case.call()
        seen.append(response.status_code)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])
        case.validate_response(response, excluded_checks=[positive_data_acceptance])

    check()
    assert seen  # requests were made
