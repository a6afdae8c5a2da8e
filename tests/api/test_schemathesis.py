"""Property-based run of every operation in ``/openapi.json`` against the live API, on each
backend (SQLite, and PostgreSQL when ``OM_TEST_DATABASE_URL`` is set): whatever the generated
input, the answer is never a 5xx.

Bounded: 20 examples per operation and backend, no deadline (the store is a real database).
Requests carry a real tenant key, so they reach the handlers instead of stopping at the 401.
Generated strings include U+0000, which PostgreSQL cannot store: the API refuses it at the
edge (a 422) instead of failing in the database (a 500).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.schemas import BaseSchema

from om_api.server.app import create_app
from om_workers.config import Settings
from tests.api.seed import seeded_session
from tests.api.server import ADMIN_TOKEN, LiveApi

MAX_EXAMPLES = 20
ANSWERS: Counter[tuple[str, int]] = Counter()
"""(backend, status) of every generated call: printed at the end of the module (``-s``)."""
UNSTORABLE: Counter[str] = Counter()
"""Per backend: 422s refusing text no store can keep (U+0000 ...), see ``find_unstorable``."""


@pytest.fixture(scope="module")
def tenant(backend_api: LiveApi) -> Iterator[tuple[str, httpx.Client]]:
    tenant_id, client = backend_api.tenant()
    seeded_session(client, "s", tenant_id)
    yield tenant_id, client
    client.close()


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    for backend in sorted({b for b, _ in ANSWERS}):
        by_status = {s: n for (b, s), n in sorted(ANSWERS.items()) if b == backend}
        total = sum(by_status.values())
        errors = sum(n for s, n in by_status.items() if s >= 500)
        print(
            f"\nschemathesis {backend}: {total} calls, {errors} 5xx, "
            f"{UNSTORABLE[backend]} refused as unstorable, by status {by_status}"
        )


def _openapi() -> dict[str, Any]:
    # The same document the live server serves at /openapi.json (checked below); building it
    # needs no connection: neither the store nor Redis is touched until a request.
    app = create_app(
        Settings(database_url="sqlite://", redis_url="redis://127.0.0.1:1/0"),
        publish=lambda tenant_id, session_id, job_id: None,
    )
    return app.openapi()


OPENAPI = _openapi()

# An import's body is JSON lines: arbitrary bytes, and lines of arbitrary JSON objects after an
# export's header (so the checks past the first line are reached too).
_HEADER_LINE = b'{"type":"om.export.header","format":"om.export","version":1,"sessionId":"s"}\n'
_JSON_LINE = st.dictionaries(
    st.sampled_from(["id", "kind", "parentId", "type", "message", "data", "entries", "records"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=8)),
    max_size=4,
).map(lambda value: json.dumps(value).encode() + b"\n")
schemathesis.openapi.media_type(
    "application/x-ndjson",
    st.one_of(
        st.binary(max_size=64),
        st.lists(_JSON_LINE, max_size=4).map(lambda lines: _HEADER_LINE + b"".join(lines)),
    ),
)
schema: BaseSchema = schemathesis.openapi.from_dict(OPENAPI)


def test_live_openapi_is_the_tested_one(backend_api: LiveApi) -> None:
    assert httpx.get(f"{backend_api.url}/openapi.json", timeout=30).json() == OPENAPI


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(
    case: Case, backend_api: LiveApi, tenant: tuple[str, httpx.Client]
) -> None:
    _, client = tenant
    headers = {"Authorization": str(client.headers["authorization"])}
    if case.path.startswith("/v1/admin"):
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    response = case.call(base_url=backend_api.url, headers=headers, timeout=30)
    ANSWERS[(backend_api.backend, response.status_code)] += 1
    if response.status_code == 422 and '"unstorable_value"' in response.text:
        UNSTORABLE[backend_api.backend] += 1
    assert response.status_code < 500, (case.method, case.formatted_path, response.text)
