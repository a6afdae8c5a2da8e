"""``om sessions export`` / ``om sessions import`` / ``om tenants export`` against a live API,
and the clients' methods under them (sync and async)."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from om_api.cli import app
from om_api.client import AsyncOMClient, InvalidRequest, NotFound, OMClient
from tests.api.server import ADMIN_TOKEN
from tests.cli.conftest import Tenant

ENV = {"COLUMNS": "120", "NO_COLOR": "1"}


def run(tenant: Tenant, *args: str) -> Result:
    target = ["--api", tenant.api.url, "--key", tenant.key]
    return CliRunner().invoke(app, [*args, *target], env=ENV)


def other(tenant: Tenant) -> Tenant:
    tenant_id = f"t-{uuid.uuid4().hex[:10]}"
    accounts = tenant.api.accounts
    accounts.create_tenant(tenant_id)
    return Tenant(tenant.api, tenant_id, accounts.create_api_key(tenant_id).plaintext)


def seed(tenant: Tenant, session_id: str, count: int = 5) -> None:
    with OMClient(tenant.api.url, tenant.key) as client:
        client.create_session(session_id)
        client.append(
            session_id,
            [
                {
                    "id": f"{session_id}-{i}",
                    "kind": "message",
                    "message": {"role": "user", "content": f"line {i}"},
                }
                for i in range(count)
            ],
        )


def test_export_then_import_into_another_tenant(tenant: Tenant, tmp_path: Path) -> None:
    seed(tenant, "cli-src")
    file = tmp_path / "s.jsonl"
    exported = run(tenant, "sessions", "export", "cli-src", "-o", str(file))
    assert exported.exit_code == 0, exported.output
    assert "7 lines" in exported.output and len(file.read_bytes().splitlines()) == 7
    target = other(tenant)
    imported = run(target, "sessions", "import", "cli-src", str(file), "--json")
    assert imported.exit_code == 0, imported.output
    answer = json.loads(imported.stdout)
    assert answer["created"] is True and answer["imported"] == 5
    again = run(target, "sessions", "import", "cli-src", str(file))
    assert again.exit_code == 0 and "already there; 0 entries imported" in again.stdout
    to_stdout = run(target, "sessions", "export", "cli-src")
    assert to_stdout.stdout.splitlines()[1:] == file.read_text().splitlines()[1:]
    # Listing stays `om sessions` without a command.
    listed = run(target, "sessions", "--json")
    assert [s["id"] for s in json.loads(listed.stdout)["sessions"]] == ["cli-src"]


def test_a_bad_file_exits_1_naming_the_line(tenant: Tenant, tmp_path: Path) -> None:
    file = tmp_path / "bad.jsonl"
    file.write_bytes(
        b'{"type":"om.export.header","format":"om.export","version":1,"sessionId":"x"}\n{oops\n'
    )
    result = run(tenant, "sessions", "import", "cli-bad", str(file))
    assert result.exit_code == 1
    assert "line 2: not JSON" in result.output
    missing = run(tenant, "sessions", "export", "nowhere")
    assert missing.exit_code == 1 and "404" in missing.output


def test_tenants_export_through_the_admin_route(tenant: Tenant, tmp_path: Path) -> None:
    seed(tenant, "cli-t1", 2)
    seed(tenant, "cli-t2", 2)
    file = tmp_path / "tenant.jsonl"
    args = ["tenants", "export", tenant.tenant_id, "-o", str(file), "--json"]
    result = CliRunner().invoke(
        app, [*args, "--api", tenant.api.url, "--admin-token", ADMIN_TOKEN], env=ENV
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["lines"] == 2 * (2 + 2)
    lines = [json.loads(line) for line in file.read_bytes().splitlines()]
    assert {x["sessionId"] for x in lines if x.get("type") == "om.export.header"} == {
        "cli-t1",
        "cli-t2",
    }


def test_the_clients_export_and_import(tenant: Tenant) -> None:
    seed(tenant, "client-src", 3)
    target = other(tenant)
    with OMClient(tenant.api.url, tenant.key) as client:
        out = io.BytesIO()
        written = client.export_session("client-src", out)
        assert written == len(out.getvalue()) and out.getvalue().count(b"\n") == 5
        with pytest.raises(NotFound):
            client.export_session("nowhere", io.BytesIO())
        with pytest.raises(InvalidRequest):
            client.import_session("client-src", "not bytes")  # type: ignore[arg-type]

    async def both() -> None:
        async with AsyncOMClient(tenant.api.url, target.key) as aclient:
            result = await aclient.import_session("client-src", out.getvalue())
            assert result.created and result.imported == 3
            again = io.BytesIO()
            await aclient.export_session("client-src", again)
            assert again.getvalue().splitlines()[1:] == out.getvalue().splitlines()[1:]
        async with AsyncOMClient(tenant.api.url, admin_token=ADMIN_TOKEN) as admin:
            whole = io.BytesIO()
            await admin.export_tenant(target.tenant_id, whole)
            assert whole.getvalue().splitlines()[1:] == out.getvalue().splitlines()[1:]

    asyncio.run(both())
