"""``om link SESSION WORKSPACE`` and ``om unlink SESSION`` against a live API."""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from om_api.cli import app
from tests.cli.conftest import Tenant


def run(tenant: Tenant, *args: str) -> Result:
    target = ["--api", tenant.api.url, "--key", tenant.key]
    return CliRunner().invoke(app, [*args, *target], env={"COLUMNS": "120", "NO_COLOR": "1"})


def test_link_and_unlink(tenant: Tenant) -> None:
    store = tenant.api.store
    store.create_session(tenant.tenant_id, "ws")
    store.create_session(tenant.tenant_id, "child")

    linked = run(tenant, "link", "child", "ws")
    assert linked.exit_code == 0, linked.output
    assert linked.stdout.strip() == "child -> ws: new messages are copied"
    assert store.get_session(tenant.tenant_id, "child").workspace_id == "ws"

    as_json = run(tenant, "unlink", "child", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["workspace"] is None
    assert store.get_session(tenant.tenant_id, "child").workspace_id is None
    assert run(tenant, "unlink", "child").stdout.strip() == "child: not linked"


def test_link_failures_exit_1_with_the_reason(tenant: Tenant) -> None:
    tenant.api.store.create_session(tenant.tenant_id, "alone")
    missing = run(tenant, "link", "alone", "nowhere")
    assert missing.exit_code == 1
    assert "nowhere" in missing.output
    assert run(tenant, "link", "--help").exit_code == 0
