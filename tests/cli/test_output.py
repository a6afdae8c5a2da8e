"""What the client and key commands print: text and tables for people by default, and with
``--json`` exactly the JSON the API answers (the same wire model, the same values)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from typer.testing import CliRunner, Result

from om_api.cli import app
from tests.api.seed import OBS_ID, REF_ID, seeded_session
from tests.api.server import ADMIN_TOKEN
from tests.cli.conftest import Tenant


def run(tenant: Tenant, *args: str) -> Result:
    target = ["--api", tenant.api.url, "--key", tenant.key]
    result = CliRunner().invoke(app, [*args, *target], env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert result.exit_code == 0, (args, result.output)
    return result


def api_json(tenant: Tenant, path: str, **params: Any) -> Any:
    headers = {"Authorization": f"Bearer {tenant.key}"}
    answer = httpx.get(f"{tenant.api.url}{path}", params=params, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _http(tenant: Tenant) -> httpx.Client:
    headers = {"Authorization": f"Bearer {tenant.key}"}
    return httpx.Client(base_url=tenant.api.url, headers=headers)


def test_status_view_and_recall_read_as_text(tenant: Tenant) -> None:
    with _http(tenant) as client:
        seeded_session(client, "s-1", tenant.tenant_id)
    status = run(tenant, "status", "s-1").stdout
    assert status.splitlines() == api_json(tenant, "/v1/sessions/s-1/status")["text"].splitlines()
    assert status.startswith("observations: 2 recorded") and "\\n" not in status
    view = run(tenant, "view", "s-1", "--full").stdout
    assert view.strip() == api_json(tenant, "/v1/sessions/s-1/view", mode="full")["text"].strip()
    assert f"[om:{OBS_ID}]" in view  # printed verbatim, not taken for markup

    observation = run(tenant, "recall", "s-1", OBS_ID).stdout
    lines = observation.splitlines()
    assert lines[0] == f"observation {OBS_ID}"
    assert lines[1] == "  User deploys with blue-green slots."
    assert "sources (1 entry):" in lines
    assert any(line.split()[:2] == [f"{tenant.tenant_id}0", "user"] for line in lines), lines
    assert "turn 0: the deploy uses blue-green slots" in observation

    reflection = run(tenant, "recall", "s-1", REF_ID).stdout
    assert reflection.startswith(f"reflection {REF_ID}\n  Deploys are blue-green.")
    assert "supporting observations (2):" in reflection and OBS_ID in reflection
    assert "sources (2 entries):" in reflection
    assert run(tenant, "recall", "s-1", "0123456789ab").stdout == (
        "0123456789ab: not found (not_found)\n"
    )


def test_json_is_the_api_answer(tenant: Tenant) -> None:
    with _http(tenant) as client:
        seeded_session(client, "s-j", tenant.tenant_id)
    base = "/v1/sessions/s-j"
    cases: list[tuple[list[str], str, dict[str, Any]]] = [
        (["status", "s-j"], f"{base}/status", {}),
        (["view", "s-j"], f"{base}/view", {}),
        (["view", "s-j", "--full"], f"{base}/view", {"mode": "full"}),
        (["recall", "s-j", OBS_ID], f"{base}/memory/{OBS_ID}", {}),
        (["context", "s-j"], f"{base}/context", {}),
        (["sessions"], "/v1/sessions", {"limit": 20}),
    ]
    for args, path, params in cases:
        printed = run(tenant, *args, "--json").stdout
        assert json.loads(printed) == api_json(tenant, path, **params), args
    queued = json.loads(run(tenant, "flush", "s-j", "--wait", "0", "--json").stdout)
    assert set(queued) == {"job_id", "coalesced", "state"}
    job = api_json(tenant, f"/v1/jobs/{queued['job_id']}")
    assert job["state"] == "queued" and job["session_id"] == "s-j"


def test_sessions_is_a_table(tenant: Tenant) -> None:
    with _http(tenant) as client:
        for name in ("alpha", "beta", "gamma"):
            client.post("/v1/sessions", json={"id": name})
        client.post(
            "/v1/sessions/beta/entries",
            json={"entries": [{"kind": "message", "message": {"role": "user", "content": "hi"}}]},
        )
    result = run(tenant, "sessions", "--limit", "2")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SESSION", "ENTRIES", "UNOBSERVED", "TOKENS", "CREATED", "(UTC)",
                                "UPDATED", "(UTC)"]  # fmt: skip
    assert [line.split()[0] for line in lines[2:]] == ["gamma", "beta"]
    assert lines[3].split()[1] == "1"
    cursor = api_json(tenant, "/v1/sessions", limit=2)["next_cursor"]
    assert result.stderr == f"more: om sessions --cursor {cursor}\n"
    rest = run(tenant, "sessions", "--cursor", cursor).stdout.splitlines()
    assert [line.split()[0] for line in rest[2:]] == ["alpha"]


def test_keys_list_and_revoke(tenant: Tenant) -> None:
    url = tenant.api.store.engine.url.render_as_string(hide_password=False)
    runner = CliRunner()
    env = {"COLUMNS": "120"}
    listed = runner.invoke(app, ["keys", "list", tenant.tenant_id, "--database-url", url], env=env)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:4] == ["KEY", "ID", "PREFIX", "LABEL"]
    key_id = tenant.key.split("_")[1]
    assert lines[2].split()[:2] == [key_id, f"om_{key_id}_"] and lines[2].split()[-1] == "-"
    assert tenant.key not in listed.output

    as_json = runner.invoke(
        app, ["keys", "list", tenant.tenant_id, "--json", "--database-url", url], env=env
    )
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    from_api = httpx.get(
        f"{tenant.api.url}/v1/admin/tenants/{tenant.tenant_id}/keys", headers=admin
    )
    assert json.loads(as_json.stdout) == from_api.json()

    revoked = runner.invoke(app, ["keys", "revoke", key_id, "--database-url", url], env=env)
    assert revoked.exit_code == 0, revoked.output
    assert revoked.stdout.startswith(f"key {key_id} (om_{key_id}_...) of tenant {tenant.tenant_id}")
    assert "revoked at " in revoked.stdout
    # The API, which looked the key up a moment ago, refuses it now.
    refused = CliRunner().invoke(
        app, ["sessions", "--api", tenant.api.url, "--key", tenant.key], env=env
    )
    assert refused.exit_code == 1 and "401" in refused.output
    unknown = runner.invoke(app, ["keys", "revoke", "ffffffffffffffff", "--database-url", url])
    assert unknown.exit_code == 1 and "no API key" in unknown.output
    bad = runner.invoke(app, ["keys", "create", "--tenant", "..", "--database-url", url])
    assert bad.exit_code == 2 and "--tenant" in bad.output


def test_search_query_narrowed_by_metadata_prints_those_sessions_hits(tenant: Tenant) -> None:
    with _http(tenant) as client:
        for session, customer in (("s-acme", "acme"), ("s-globex", "globex")):
            body = {"id": session, "metadata": {"customer": customer}}
            assert client.post("/v1/sessions", json=body).status_code == 201
            entry = {
                "id": f"{tenant.tenant_id}-{session}",
                "kind": "message",
                "message": {"role": "user", "content": "the invoice is overdue"},
            }
            answer = client.post(f"/v1/sessions/{session}/entries", json={"entries": [entry]})
            assert answer.status_code == 201, answer.text
    both = run(tenant, "search", "query", "invoice", "--json").stdout
    assert {hit["session_id"] for hit in json.loads(both)["hits"]} == {"s-acme", "s-globex"}
    narrowed = run(tenant, "search", "query", "invoice", "--metadata", "customer:acme").stdout
    assert f"s-acme/{tenant.tenant_id}-s-acme" in narrowed and "s-globex" not in narrowed
    target = ["--api", tenant.api.url, "--key", tenant.key]
    refused = CliRunner().invoke(app, ["search", "query", "invoice", "--metadata", "acme", *target])
    assert refused.exit_code == 2 and "KEY:VALUE" in refused.output
