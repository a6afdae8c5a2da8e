"""Property-based run of every operation in ``/openapi.json`` against the live API: whatever
the generated input, the answer is never a 5xx.

Bounded: 20 examples per operation, no deadline (the store is a real SQLite file). Requests
carry a real tenant key, so they reach the handlers instead of stopping at the 401.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.schemas import BaseSchema

from om_api.app import create_app
from om_workers.config import Settings
from tests.api.seed import seeded_session
from tests.api.server import LiveApi

MAX_EXAMPLES = 20


@pytest.fixture(scope="module")
def tenant(api: LiveApi) -> Iterator[tuple[str, httpx.Client]]:
    tenant_id, client = api.tenant()
    seeded_session(client, "s", tenant_id)
    yield tenant_id, client
    client.close()


def _openapi() -> dict[str, Any]:
    # The same document the live server serves at /openapi.json (checked below); building it
    # needs no connection: neither the store nor Redis is touched until a request.
    app = create_app(
        Settings(database_url="sqlite://", redis_url="redis://127.0.0.1:1/0"),
        publish=lambda tenant_id, session_id, job_id: None,
    )
    return app.openapi()


OPENAPI = _openapi()
schema: BaseSchema = schemathesis.openapi.from_dict(OPENAPI)


def test_live_openapi_is_the_tested_one(api: LiveApi) -> None:
    assert httpx.get(f"{api.url}/openapi.json").json() == OPENAPI


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case: Case, api: LiveApi, tenant: tuple[str, httpx.Client]) -> None:
    _, client = tenant
    headers = {"Authorization": str(client.headers["authorization"])}
    if case.path.startswith("/v1/admin"):
        headers = {"Authorization": "Bearer admin-token-for-tests-0123456789"}
    response = case.call(base_url=api.url, headers=headers, timeout=30)
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
