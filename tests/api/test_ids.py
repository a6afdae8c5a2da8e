"""Ids in URL paths: whatever id the API accepts at creation works in every route that takes
it, and ids a client or proxy would rewrite (``/``, ``.`` and ``..`` as a whole id) are
refused at creation with a 422 naming the field, on every backend.

The session routes exercised here are checked against the OpenAPI document, so a new route
taking a session or scope id fails this test until it is exercised too.
"""

from __future__ import annotations

import itertools
import re
import uuid

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from om_api.client import OMClient
from om_api.schemas import PATH_ID_PATTERN
from tests.api.seed import OBS_ID, conversation, memory_entries
from tests.api.server import LiveApi

# Accepted at creation: the edges of the pattern (dots inside and in front, every punctuation
# character it allows, the longest id).
EDGE_IDS = ["a", "a.b", ".env", "...", "..x", "a:b", "A_b-9", "-", "_", ":", "x" * 128]
REWRITTEN_IDS = [".", "..", "a/b", "/", "a%2Fb", "a b", "x" * 129, ""]
# Scope ids: the same pattern, and the core refuses ``..`` anywhere in one.
SCOPE_EDGE_IDS = ["t", "task:x", "a.b", ".env", "A_b-9", "-", "y" * 128]
REFUSED_SCOPE_IDS = [".", "..", "a/b", "a..b", "...", ""]

SESSION_ROUTES = {
    ("GET", "/v1/sessions/{session_id}"),
    ("DELETE", "/v1/sessions/{session_id}"),
    ("PUT", "/v1/sessions/{session_id}/link"),
    ("DELETE", "/v1/sessions/{session_id}/link"),
    ("POST", "/v1/sessions/{session_id}/entries"),
    ("GET", "/v1/sessions/{session_id}/entries"),
    ("POST", "/v1/sessions/{session_id}/flush"),
    ("GET", "/v1/sessions/{session_id}/context"),
    ("GET", "/v1/sessions/{session_id}/memory/{memory_id}"),
    ("GET", "/v1/sessions/{session_id}/messages"),
    ("GET", "/v1/sessions/{session_id}/status"),
    ("GET", "/v1/sessions/{session_id}/search"),
    ("GET", "/v1/sessions/{session_id}/view"),
    ("POST", "/v1/sessions/{session_id}/compact"),
    ("POST", "/v1/sessions/{session_id}/scopes"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/enter"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/leave"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/bind"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/unbind"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/grant"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/revoke"),
    ("POST", "/v1/sessions/{session_id}/scopes/{scope_id}/close"),
    ("POST", "/v1/sessions/{session_id}/revocations"),
    ("GET", "/v1/sessions/{session_id}/export"),
    ("POST", "/v1/sessions/{session_id}/import"),
}


def _ok(answer: httpx.Response, status: int = 200) -> httpx.Response:
    assert answer.status_code == status, (answer.request.url.raw_path, answer.text)
    return answer


def exercise_session(client: httpx.Client, sid: str) -> None:
    """Create session ``sid`` and call every route that takes a session id, each expected to
    succeed. Paths are written raw, as a curl user would, not quoted."""
    prefix = f"e{uuid.uuid4().hex[:8]}-"
    base = f"/v1/sessions/{sid}"
    _ok(client.post("/v1/sessions", json={"id": sid}), 201)
    _ok(client.get(base))
    entries = [*conversation(4, prefix), *memory_entries(prefix)]
    _ok(client.post(f"{base}/entries", json={"entries": entries}), 201)
    _ok(client.get(f"{base}/entries"))
    job = _ok(client.post(f"{base}/flush"), 202).json()["job_id"]
    _ok(client.get(f"/v1/jobs/{job}"))
    _ok(client.get(f"{base}/context"))
    assert _ok(client.get(f"{base}/memory/{OBS_ID}")).json()["found"] is True
    _ok(client.get(f"{base}/messages", params={"cursor": f"{prefix}0"}))
    _ok(client.get(f"{base}/status"))
    hits = _ok(client.get(f"{base}/search", params={"q": "slots"})).json()["hits"]
    assert hits and {hit["session_id"] for hit in hits} == {sid}
    _ok(client.get(f"{base}/view", params={"mode": "full"}))
    exercise_scope(client, sid, "plan")
    _ok(client.post(f"{base}/revocations", json={"entry_ids": [f"{prefix}3"]}))
    _ok(client.post(f"{base}/compact"), 201)
    exported = _ok(client.get(f"{base}/export")).content
    ndjson = {"Content-Type": "application/x-ndjson"}
    # Into the session it came from: a repeat, so nothing is stored twice.
    imported = _ok(client.post(f"{base}/import", content=exported, headers=ndjson)).json()
    assert imported["imported"] == 0 and imported["session"]["id"] == sid


def exercise_links(client: httpx.Client, sids: list[str]) -> None:
    """Link each session to the next and unlink it: every id works on either side of the
    funnel's link (as the session in the path and as the workspace in the body)."""
    for sid, workspace in itertools.pairwise(sids):
        linked = _ok(client.put(f"/v1/sessions/{sid}/link", json={"workspace": workspace}))
        assert linked.json()["workspace"] == workspace
        assert _ok(client.delete(f"/v1/sessions/{sid}/link")).json()["workspace"] is None


def exercise_scope(client: httpx.Client, sid: str, scope: str) -> None:
    """Open ``scope`` in session ``sid`` and call every route that takes a scope id."""
    base = f"/v1/sessions/{sid}/scopes"
    _ok(client.post(base, json={"id": scope}), 201)
    _ok(client.post(f"{base}/{scope}/enter"))
    _ok(client.get(f"/v1/sessions/{sid}/context", params={"scope": scope}))
    _ok(client.post(f"{base}/{scope}/bind", json={"refs": [f"om:{OBS_ID}"]}))
    _ok(client.post(f"{base}/{scope}/unbind", json={"refs": [f"om:{OBS_ID}"]}))
    _ok(client.post(f"{base}/{scope}/leave"))
    _ok(client.post(f"{base}/{scope}/grant", json={"principal_ids": ["peer"]}))
    _ok(client.post(f"{base}/{scope}/revoke", json={"principal_ids": ["peer"]}))
    _ok(client.post(f"{base}/{scope}/close"))


def test_the_exercised_routes_are_every_route_taking_a_session_or_scope_id(
    backend_api: LiveApi,
) -> None:
    paths = httpx.get(f"{backend_api.url}/openapi.json", timeout=30).json()["paths"]
    documented = {
        (method.upper(), template)
        for template, operations in paths.items()
        if "{session_id}" in template
        for method in operations
    }
    assert documented == SESSION_ROUTES


def test_every_accepted_session_id_works_in_every_route(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    for sid in EDGE_IDS:
        exercise_session(client, sid)
    exercise_links(client, EDGE_IDS)
    listed = {s["id"] for s in client.get("/v1/sessions", params={"limit": 100}).json()["sessions"]}
    assert listed == set(EDGE_IDS)
    # Through the client too: it quotes ids, and they still reach the same routes.
    key = str(client.headers["authorization"]).removeprefix("Bearer ")
    with OMClient(backend_api.url, key) as om:
        for sid in EDGE_IDS:
            assert om.get_session(sid).id == sid
            assert om.recall(sid, OBS_ID).found
            assert om.status(sid).recorded_observations == 2
    # Erasure last: every id is erased, and is gone at once.
    for sid in EDGE_IDS:
        _ok(client.delete(f"/v1/sessions/{sid}"), 202)
        assert client.get(f"/v1/sessions/{sid}").status_code == 404


def test_ids_a_url_would_rewrite_are_refused_at_creation(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    for bad in REWRITTEN_IDS:
        answer = client.post("/v1/sessions", json={"id": bad})
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["detail"].startswith("body.id: "), answer.json()["detail"]
    assert client.get("/v1/sessions").json()["sessions"] == []
    with backend_api.admin() as admin:
        for bad in REWRITTEN_IDS:
            answer = admin.post("/v1/admin/tenants", json={"id": bad})
            assert answer.status_code == 422, (bad, answer.text)
            assert answer.json()["detail"].startswith("body.id: ")
        for edge in (".env", "..x", "a.b"):
            tenant = f"{edge}-{uuid.uuid4().hex[:6]}" if edge != "..x" else f"..{uuid.uuid4().hex}"
            _ok(admin.post("/v1/admin/tenants", json={"id": tenant}), 201)
            key = _ok(admin.post(f"/v1/admin/tenants/{tenant}/keys"), 201).json()
            assert _ok(admin.get(f"/v1/admin/tenants/{tenant}/keys")).json()["keys"]
            with httpx.Client(
                base_url=backend_api.url, headers={"Authorization": f"Bearer {key['key']}"}
            ) as theirs:
                _ok(theirs.get("/v1/sessions"))
            _ok(admin.post(f"/v1/admin/keys/{key['key_id']}/revoke"))


def test_every_accepted_scope_id_works_and_rewritten_ones_are_refused(
    backend_api: LiveApi,
) -> None:
    tenant_id, client = backend_api.tenant()
    prefix = f"{tenant_id}-"
    _ok(client.post("/v1/sessions", json={"id": "s"}), 201)
    entries = [*conversation(2, prefix), *memory_entries(prefix)]
    _ok(client.post("/v1/sessions/s/entries", json={"entries": entries}), 201)
    for scope in SCOPE_EDGE_IDS:
        exercise_scope(client, "s", scope)
    for bad in REFUSED_SCOPE_IDS:
        answer = client.post("/v1/sessions/s/scopes", json={"id": bad})
        assert answer.status_code == 422, (bad, answer.text)
        detail = answer.json()["detail"]
        assert detail.startswith("body.id: ") or "scope id" in detail, detail


def test_the_path_pattern_is_ids_minus_dot_segments() -> None:
    @given(st.text(alphabet="ab.:_-/%", max_size=130))
    @settings(max_examples=400, deadline=None)
    def check(value: str) -> None:
        expected = (
            1 <= len(value) <= 128
            and re.fullmatch(r"[A-Za-z0-9._:-]+", value) is not None
            and value not in (".", "..")
        )
        assert (re.fullmatch(PATH_ID_PATTERN, value) is not None) == expected

    check()
    for value in EDGE_IDS:
        assert re.fullmatch(PATH_ID_PATTERN, value)
    for value in REWRITTEN_IDS:
        assert not re.fullmatch(PATH_ID_PATTERN, value)


def test_generated_session_ids_work_in_the_routes(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    seen: set[str] = set()

    @given(st.from_regex(PATH_ID_PATTERN, fullmatch=True))
    @settings(
        max_examples=15,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def check(sid: str) -> None:
        if sid in seen:
            return
        seen.add(sid)
        exercise_session(client, sid)

    check()
    assert len(seen) >= 10
