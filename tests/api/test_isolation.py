"""Tenant isolation: tenant B cannot read, page, recall, flush, scope or revoke anything of
tenant A's. Every attempt is the same 404 a missing session gets, and writes nothing."""

from __future__ import annotations

import pytest

from tests.api.seed import OBS_ID, seeded_session
from tests.api.server import LiveApi


def test_tenant_b_gets_404_for_everything_of_tenant_a(api: LiveApi) -> None:
    a_id, a = api.tenant()
    _, b = api.tenant()
    seeded_session(a, "shared-name", a_id)
    job_id = a.post("/v1/sessions/shared-name/flush").json()["job_id"]
    a.post("/v1/sessions/shared-name/scopes", json={"id": "plan:a"})
    before = a.get("/v1/sessions/shared-name").json()
    calls_before = len(api.published.calls)
    base = "/v1/sessions/shared-name"
    attempts: list[tuple[str, str, dict[str, object] | None, dict[str, object] | None]] = [
        ("GET", base, None, None),
        ("GET", f"{base}/entries", None, None),
        ("POST", f"{base}/entries", {"entries": [{"kind": "note"}]}, None),
        ("GET", f"{base}/context", None, None),
        ("GET", f"{base}/memory/{OBS_ID}", None, None),
        ("GET", f"{base}/messages", None, {"cursor": f"{a_id}0"}),
        ("GET", f"{base}/status", None, None),
        ("GET", f"{base}/search", None, {"q": "slots"}),
        ("GET", f"{base}/view", None, {"mode": "full"}),
        ("POST", f"{base}/flush", {"force": True}, None),
        ("POST", f"{base}/compact", None, None),
        ("POST", f"{base}/scopes", {"id": "plan:b"}, None),
        ("POST", f"{base}/scopes/plan:a/enter", None, None),
        ("POST", f"{base}/scopes/plan:a/close", None, None),
        ("POST", f"{base}/scopes/plan:a/leave", None, None),
        ("POST", f"{base}/scopes/plan:a/bind", {"refs": [f"om:{OBS_ID}"]}, None),
        ("POST", f"{base}/scopes/plan:a/unbind", {"refs": [f"om:{OBS_ID}"]}, None),
        ("POST", f"{base}/scopes/plan:a/grant", {"principal_ids": ["x"]}, None),
        ("POST", f"{base}/scopes/plan:a/revoke", {"principal_ids": ["x"]}, None),
        ("POST", f"{base}/revocations", {"entry_ids": [f"{a_id}0"]}, None),
        ("GET", f"/v1/jobs/{job_id}", None, None),
    ]
    for method, path, body, params in attempts:
        answer = b.request(method, path, json=body, params=params)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"] == "not_found"
        # The same answer as for a session that exists nowhere.
        missing = b.request(
            method, path.replace("shared-name", "nowhere"), json=body, params=params
        )
        if "/jobs/" not in path:
            assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    after = a.get("/v1/sessions/shared-name").json()
    assert after["entry_count"] == before["entry_count"] and after["leaf_id"] == before["leaf_id"]
    assert len(api.published.calls) == calls_before
    assert a.get(f"{base}/memory/{OBS_ID}").json()["found"] is True
    # B may use the same session name for its own session: the two never meet.
    assert b.post("/v1/sessions", json={"id": "shared-name"}).status_code == 201
    assert b.get(base).json()["entry_count"] == 0


@pytest.mark.parametrize("path", ["/v1/admin/tenants", "/v1/admin/tenants/x/keys"])
def test_admin_routes_need_the_admin_token(api: LiveApi, path: str) -> None:
    _, tenant = api.tenant()
    with api.anonymous() as anonymous:
        assert anonymous.post(path, json={"id": "x"}).status_code == 401
        wrong = {"Authorization": "Bearer wrong-admin-token"}
        assert anonymous.post(path, json={"id": "x"}, headers=wrong).status_code == 401
    assert tenant.post(path, json={"id": "x"}).status_code == 401


def test_admin_errors(api: LiveApi) -> None:
    with api.admin() as admin:
        assert admin.post("/v1/admin/tenants", json={"id": "adm-1", "name": "A"}).status_code == 201
        assert admin.post("/v1/admin/tenants", json={"id": "adm-1"}).status_code == 409
        assert admin.post("/v1/admin/tenants", json={"id": "bad id"}).status_code == 422
        assert admin.post("/v1/admin/tenants/nobody/keys").status_code == 404
        first = admin.post("/v1/admin/tenants/adm-1/keys").json()
        second = admin.post("/v1/admin/tenants/adm-1/keys").json()
        assert first["key"] != second["key"] and first["tenant_id"] == "adm-1"
