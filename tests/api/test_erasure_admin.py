"""Admin erasure, retention and audit over HTTP: a tenant erased at once (keys refused,
sessions hidden) and then for good, its job readable by the admin; the retention dry run lists
exactly the idle sessions and the pass erases them; the audit trail says who, what, when and
how it ended, without content."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from om_workers.jobs.erase import run_erasure_job
from om_workers.jobs.retention import run_retention_pass
from om_workers.store import AccountStore
from om_workers.store.schema import sessions
from tests.api.server import LiveApi


def _user(text: str) -> dict[str, object]:
    return {"kind": "message", "message": {"role": "user", "content": text}}


def test_an_admin_erases_a_tenant_and_reads_its_job_and_audit(backend_api: LiveApi) -> None:
    api = backend_api
    tenant, a = api.tenant()
    other, b = api.tenant()
    for session in ("s1", "s2"):
        assert a.post("/v1/sessions", json={"id": session}).status_code == 201
        a.post(f"/v1/sessions/{session}/entries", json={"entries": [_user("secret words")]})
    assert b.post("/v1/sessions", json={"id": "s1"}).status_code == 201
    assert a.delete("/v1/sessions/s2").status_code == 202
    with api.admin() as admin:
        assert admin.delete("/v1/admin/tenants/nobody").status_code == 404
        answer = admin.delete(f"/v1/admin/tenants/{tenant}")
        assert answer.status_code == 202
        job_id = answer.json()["job_id"]
        assert a.get("/v1/sessions").status_code == 401  # its keys are revoked at once
        assert b.get("/v1/sessions/s1").status_code == 200
        run = run_erasure_job(api.store, api.redis, job_id, chunk=100)
        assert run.outcome == "succeeded" and run.counts["sessions"] == 1
        job = admin.get(f"/v1/admin/jobs/{job_id}").json()
        assert (job["erases"], job["state"], job["session_id"]) == ("tenant", "succeeded", tenant)
        assert admin.get(f"/v1/admin/tenants/{tenant}/keys").status_code == 404  # gone
        trail = admin.get("/v1/admin/audit", params={"tenant": tenant}).json()["events"]
        assert [(e["action"], e["target"], e["outcome"]) for e in trail[:2]] == [
            ("erase", tenant, "succeeded"),
            ("erase", tenant, "accepted"),
        ]
        session_request = next(e for e in trail if e["target"] == "s2")
        assert session_request["key_id"] is not None and session_request["outcome"] == "accepted"
        assert "secret words" not in str(trail)
        assert admin.get("/v1/admin/audit", params={"limit": 0}).status_code == 422
    assert AccountStore(api.store.engine).get_tenant(other).id == other


def test_retention_dry_run_lists_the_idle_sessions_and_the_pass_erases_them(
    backend_api: LiveApi,
) -> None:
    api = backend_api
    tenant, a = api.tenant()
    for session in ("old", "fresh"):
        assert a.post("/v1/sessions", json={"id": session}).status_code == 201
    long_ago = datetime.now(UTC) - timedelta(days=40)
    with api.store.engine.begin() as connection:
        connection.execute(
            update(sessions)
            .where(sessions.c.tenant_id == tenant, sessions.c.id == "old")
            .values(updated_at=long_ago)
        )
    with api.admin() as admin:
        off = admin.get(f"/v1/admin/tenants/{tenant}/retention").json()
        assert off["retention_days"] is None and off["would_erase"] == []
        on = admin.put(f"/v1/admin/tenants/{tenant}/retention", json={"days": 30}).json()
        assert on["retention_days"] == 30 and on["would_erase"] == ["old"]
        assert a.get("/v1/sessions/old").status_code == 200  # a dry run writes nothing
        assert (
            admin.put(f"/v1/admin/tenants/{tenant}/retention", json={"days": 0}).status_code == 422
        )
    accounts = AccountStore(api.store.engine)
    published: list[str] = []
    opened = run_retention_pass(
        api.store, accounts, published.append, now=datetime.now(UTC), batch=10
    )
    assert list(opened) == [tenant] and published == [opened[tenant]]
    assert a.get("/v1/sessions/old").status_code == 404
    assert a.get("/v1/sessions/fresh").status_code == 200
    assert run_erasure_job(api.store, api.redis, opened[tenant], chunk=10).outcome == "succeeded"
    events = accounts.audit_events(tenant)
    assert [(e.action, e.outcome) for e in events[:2]] == [
        ("retention", "succeeded"),
        ("retention", "accepted"),
    ]
    again = run_retention_pass(
        api.store, accounts, published.append, now=datetime.now(UTC), batch=10
    )
    assert again == {}
