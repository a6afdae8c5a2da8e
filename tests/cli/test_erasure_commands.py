"""``om sessions erase``, ``om subjects erase`` (through a live API), ``om tenants
retention``, ``om tenants erase`` and ``om audit`` (on its database and Redis)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import update
from typer.testing import CliRunner, Result

from om_api.cli import app
from om_workers.jobs.erase import run_erasure_job
from om_workers.store.schema import sessions
from tests.cli.conftest import Tenant

ENV = {"COLUMNS": "160", "NO_COLOR": "1"}


def run_api(tenant: Tenant, *args: str) -> Result:
    target = ["--api", tenant.api.url, "--key", tenant.key]
    return CliRunner().invoke(app, [*args, *target], env=ENV)


def run_db(tenant: Tenant, *args: str) -> Result:
    url = str(tenant.api.store.engine.url)
    return CliRunner().invoke(app, [*args, "--database-url", url], env=ENV)


def test_sessions_and_subjects_are_erased_through_the_api(tenant: Tenant) -> None:
    store = tenant.api.store
    store.create_session(tenant.tenant_id, "gone")
    store.create_session(tenant.tenant_id, "hers", metadata={"subject": "ana"})
    erased = run_api(tenant, "sessions", "erase", "gone", "--json")
    assert erased.exit_code == 0, erased.output
    job = json.loads(erased.stdout)
    assert (job["kind"], job["erases"], job["session_id"]) == ("erasure", "session", "gone")
    shown = run_api(tenant, "sessions", "erase", "gone")
    assert shown.stdout.startswith(f"erasure job {job['id']} (session gone): ")
    by_subject = run_api(tenant, "subjects", "erase", "ana")
    assert by_subject.exit_code == 0 and "(subject ana)" in by_subject.stdout
    listed = run_api(tenant, "sessions", "--json")
    assert json.loads(listed.stdout)["sessions"] == []
    assert run_api(tenant, "sessions", "erase", "never").exit_code == 1


def test_retention_erase_and_audit_on_the_database(tenant: Tenant) -> None:
    store = tenant.api.store
    store.create_session(tenant.tenant_id, "stale")
    store.create_session(tenant.tenant_id, "live")
    with store.engine.begin() as connection:
        connection.execute(
            update(sessions)
            .where(sessions.c.tenant_id == tenant.tenant_id, sessions.c.id == "stale")
            .values(updated_at=datetime.now(UTC) - timedelta(days=9))
        )
    keeps = run_db(tenant, "tenants", "retention", tenant.tenant_id)
    assert "keeps its sessions" in keeps.stdout
    dry = run_db(tenant, "tenants", "retention", tenant.tenant_id, "--days", "7", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["would_erase"] == ["stale"]
    assert store.get_session(tenant.tenant_id, "stale").id == "stale"

    job = store.erasure.erase_session(tenant.tenant_id, "live", None)
    assert run_erasure_job(store, tenant.api.redis, job.id, chunk=10).outcome == "succeeded"
    refused = run_db(tenant, "tenants", "erase", tenant.tenant_id)
    assert refused.exit_code == 2 and "--yes" in refused.output
    redis_url = "redis://{host}:{port}/0".format(
        **tenant.api.redis.connection_pool.connection_kwargs
    )
    erased = run_db(tenant, "tenants", "erase", tenant.tenant_id, "--yes", "--redis-url", redis_url)
    assert erased.exit_code == 0, erased.output
    assert "succeeded" in erased.stdout and "sessions 1" in erased.stdout

    trail = run_db(tenant, "audit", "--tenant", tenant.tenant_id, "--json")
    events = json.loads(trail.stdout)["events"]
    assert [(e["target"], e["outcome"]) for e in events] == [
        (tenant.tenant_id, "succeeded"),
        (tenant.tenant_id, "accepted"),
        ("live", "succeeded"),
        ("live", "accepted"),
    ]
    table = run_db(tenant, "audit", "--tenant", tenant.tenant_id)
    assert "ACTION" in table.stdout and "(admin)" in table.stdout
