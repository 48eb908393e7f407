"""Schema-driven fuzzing (schemathesis) of the API over an in-memory state: no 5xx, answers match the schema.

``FUZZ_MAX_EXAMPLES`` raises the number of generated requests per operation (``make fuzz-api`` uses 500).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from grouper.api.app import create_app

from .fixtures import build_world

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "40"))

app = create_app(build_world().state)
schema = schemathesis.openapi.from_asgi("/openapi.json", app)


def not_a_server_error(ctx: object, response: schemathesis.Response, case: schemathesis.Case) -> None:
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_api_fuzz(case: schemathesis.Case) -> None:
    response = case.call()
    not_a_server_error(None, response, case)
    case.validate_response(
        response,
        checks=[status_code_conformance, content_type_conformance, response_schema_conformance],
    )
