"""Export and import over HTTP: a round trip into another tenant gives the same context and
recall; a repeated import stores nothing twice; every bad file is refused with the line that
is wrong and nothing stored; another tenant reaches nothing; an admin exports a tenant."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.seed import OBS_ID, REF_ID, seeded_session
from tests.api.server import ADMIN_TOKEN, LiveApi

NDJSON = {"Content-Type": "application/x-ndjson"}


def export(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/sessions/{session_id}/export")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    assert answer.content.endswith(b"\n")
    return [json.loads(line) for line in answer.content.splitlines()]


def body(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def import_(client: httpx.Client, session_id: str, content: bytes) -> httpx.Response:
    return client.post(f"/v1/sessions/{session_id}/import", content=content, headers=NDJSON)


def reads(client: httpx.Client, session_id: str) -> dict[str, Any]:
    """Everything a reader sees of a session: context, recall of each memory id, entries."""
    base = f"/v1/sessions/{session_id}"
    return {
        "context": client.get(f"{base}/context").json(),
        "recall": [client.get(f"{base}/memory/{mid}").json() for mid in (OBS_ID, REF_ID)],
        "entries": client.get(f"{base}/entries", params={"limit": 1000}).json(),
    }


def test_export_has_header_branch_records_and_end(api: LiveApi) -> None:
    _, a = api.tenant()
    seeded_session(a, "exp", "x")
    a.post("/v1/sessions/exp/revocations", json={"entry_ids": ["x3"]})
    lines = export(a, "exp")
    assert lines[0]["type"] == "om.export.header" and lines[0]["version"] == 1
    assert lines[0]["sessionId"] == "exp"
    entries = [line for line in lines if "type" not in line]
    assert [e["id"] for e in entries] == [*(f"x{i}" for i in range(6)), "x-obs", "x-ref"]
    # The ledger's wire format: camelCase keys, parents filled in, om.* records as custom data.
    assert entries[1]["parentId"] == "x0" and entries[1]["sessionId"] == "exp"
    assert "createdAt" in entries[0]
    assert entries[6]["data"]["type"] == "om.observations.recorded"
    kinds = [line["type"] for line in lines if "type" in line]
    assert kinds[0] == "om.export.header" and kinds[-1] == "om.export.end"
    assert {"entryId": "x3", "corrected": False, "type": "om.export.tombstone"} in lines
    items = {line["id"] for line in lines if line.get("type") == "om.export.memoryItem"}
    assert items == {OBS_ID, "0000000000a2", REF_ID}
    assert lines[-1] == {"type": "om.export.end", "entries": 8, "records": 4}


def test_round_trip_into_another_tenant_reads_the_same(backend_api: LiveApi) -> None:
    _, a = backend_api.tenant()
    _, b = backend_api.tenant()
    seeded_session(a, "trip", "r")
    a.post("/v1/sessions/trip/revocations", json={"entry_ids": ["r4"]})
    content = a.get("/v1/sessions/trip/export").content
    answer = import_(b, "trip", content)
    assert answer.status_code == 201, answer.text
    assert answer.json()["created"] is True and answer.json()["imported"] == 8
    assert answer.json()["tombstones"] == 1
    assert reads(b, "trip") == reads(a, "trip")
    again = export(b, "trip")
    original = export(a, "trip")
    assert again[1:] == original[1:]


def test_the_same_file_twice_leaves_one_copy(api: LiveApi) -> None:
    _, a = api.tenant()
    _, b = api.tenant()
    seeded_session(a, "twice", "w")
    content = a.get("/v1/sessions/twice/export").content
    assert import_(b, "twice", content).status_code == 201
    second = import_(b, "twice", content)
    assert second.status_code == 200, second.text
    assert second.json()["imported"] == 0 and second.json()["duplicates"] == 8
    assert b.get("/v1/sessions/twice").json()["entry_count"] == 8


def test_a_copy_inside_the_tenant_is_refused_with_the_clash(backend_api: LiveApi) -> None:
    _, a = backend_api.tenant()
    seeded_session(a, "orig", "c")
    content = a.get("/v1/sessions/orig/export").content
    answer = import_(a, "copy", content)
    assert answer.status_code == 409, answer.text
    assert answer.json()["line"] == 2 and "'c0'" in answer.json()["detail"]
    assert a.get("/v1/sessions/copy").status_code == 404


def _bad_files(lines: list[dict[str, Any]]) -> dict[str, tuple[bytes, int, str]]:
    """Each bad case: the file, the line it must name, a word of the reason."""
    whole = body(lines)
    last_entry = max(i for i, line in enumerate(lines) if "type" not in line)
    cut = whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 1]
    third = dict(lines[2])

    def with_line(index: int, replacement: bytes) -> bytes:
        raw = [json.dumps(line).encode() for line in lines]
        raw[index] = replacement
        return b"\n".join(raw) + b"\n"

    def changed(index: int, **update: Any) -> bytes:
        return with_line(index, json.dumps({**lines[index], **update}).encode())

    custom = {"id": "bad-kind", "kind": "custom", "data": {"type": "om.observations.recordd"}}
    return {
        "truncated line": (whole[:-7], len(lines), "truncated"),
        "cut at a line boundary": (cut, len(lines), "truncated"),
        "not JSON": (with_line(3, b'{"id": "x", "kind": '), 4, "not JSON"),
        "duplicate id": (changed(3, id=third["id"]), 4, "duplicate entry id"),
        "unknown parent": (changed(3, parentId="nowhere"), 4, "neither the file nor"),
        "unknown record kind": (
            with_line(
                last_entry, json.dumps({**custom, "parentId": lines[last_entry - 1]["id"]}).encode()
            ),
            last_entry + 1,
            "unknown entry kind",
        ),
        "unknown line type": (
            changed(len(lines) - 2, type="om.export.bogus"),
            len(lines) - 1,
            "unknown record",
        ),
        "id over the cap": (changed(1, id="i" * 129), 2, "id"),
        "kind over the cap": (changed(1, kind="k" * 65), 2, "kind"),
        "malformed om record": (
            changed(
                last_entry,
                data={"type": "om.reflections.recorded", "reflections": [{"id": "nothex"}]},
            ),
            last_entry + 1,
            "om.reflections.recorded",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "truncated line",
        "cut at a line boundary",
        "not JSON",
        "duplicate id",
        "unknown parent",
        "unknown record kind",
        "unknown line type",
        "id over the cap",
        "kind over the cap",
        "malformed om record",
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_nothing_is_stored(
    backend_api: LiveApi, case: str
) -> None:
    _, a = backend_api.tenant()
    _, b = backend_api.tenant()
    seeded_session(a, "src", "b")
    content, line, reason = _bad_files(export(a, "src"))[case]
    answer = import_(b, "dst", content)
    assert answer.status_code == 422, answer.text
    found = answer.json()
    assert found["line"] == line, found
    assert found["detail"].startswith(f"line {line}: ") and reason in found["detail"], found
    assert b.get("/v1/sessions/dst").status_code == 404
    # A good file after a bad one imports whole: the bad one left nothing behind.
    assert import_(b, "dst", a.get("/v1/sessions/src/export").content).status_code == 201


def test_another_tenant_cannot_export_or_import_into_these_sessions(
    backend_api: LiveApi,
) -> None:
    _, a = backend_api.tenant()
    _, b = backend_api.tenant()
    seeded_session(a, "mine", "m")
    before = export(a, "mine")
    for session in ("mine", "nowhere"):
        answer = b.get(f"/v1/sessions/{session}/export")
        assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    # B's import under the same name lands in B's own namespace, never in A's session.
    foreign = [
        before[0],
        {"id": "b-own", "kind": "message", "message": {"role": "user", "content": "hi"}},
        {"type": "om.export.end", "entries": 1, "records": 0},
    ]
    assert import_(b, "mine", body(foreign)).status_code == 201
    assert export(a, "mine")[1:] == before[1:]
    assert [e["id"] for e in b.get("/v1/sessions/mine/entries").json()["entries"]] == ["b-own"]


def test_a_body_over_the_limit_is_413_and_stores_nothing(api: LiveApi) -> None:
    _, a = api.tenant()
    line = {"id": "big", "kind": "message", "message": {"role": "user", "content": "x" * 300_000}}
    header = {"type": "om.export.header", "format": "om.export", "version": 1, "sessionId": "s"}
    answer = import_(
        a, "big", body([header, line, {"type": "om.export.end", "entries": 1, "records": 0}])
    )
    assert answer.status_code == 413
    assert a.get("/v1/sessions/big").status_code == 404


def test_admin_exports_a_tenant_as_a_stream_of_sessions(api: LiveApi) -> None:
    tenant_id, a = api.tenant()
    seeded_session(a, "one", "o")
    seeded_session(a, "two", "t")
    with api.admin() as admin:
        answer = admin.get(f"/v1/admin/tenants/{tenant_id}/export")
        assert answer.status_code == 200
        assert admin.get("/v1/admin/tenants/nobody/export").status_code == 404
    with api.anonymous() as anonymous:
        assert anonymous.get(f"/v1/admin/tenants/{tenant_id}/export").status_code == 401
    lines = [json.loads(line) for line in answer.content.splitlines()]
    headers = [line["sessionId"] for line in lines if line.get("type") == "om.export.header"]
    assert sorted(headers) == ["one", "two"]
    assert sum(1 for line in lines if line.get("type") == "om.export.end") == 2


def test_an_export_redacts_known_secrets(api: LiveApi) -> None:
    _, a = api.tenant()
    leaked = f"the admin token is {ADMIN_TOKEN}"
    assert (
        a.post("/v1/sessions", json={"id": "leak", "metadata": {"note": leaked}}).status_code == 201
    )
    entry = {"id": "leak-0", "kind": "message", "message": {"role": "tool", "content": leaked}}
    assert a.post("/v1/sessions/leak/entries", json={"entries": [entry]}).status_code == 201
    content = a.get("/v1/sessions/leak/export").content
    assert ADMIN_TOKEN.encode() not in content
    assert b"the admin token is" in content


def test_exports_and_imports_are_in_the_audit_trail_without_content(api: LiveApi) -> None:
    source, a = api.tenant()
    target, b = api.tenant()
    seeded_session(a, "audited", "u")
    content = a.get("/v1/sessions/audited/export").content
    assert import_(b, "audited", content).status_code == 201
    assert import_(b, "broken", b"not json\n").status_code == 422
    with api.admin() as admin:
        assert admin.get(f"/v1/admin/tenants/{source}/export").status_code == 200
        exported = admin.get("/v1/admin/audit", params={"tenant": source}).json()["events"]
        imported = admin.get("/v1/admin/audit", params={"tenant": target}).json()["events"]
    assert [(e["action"], e["target"], e["outcome"]) for e in exported] == [
        ("export", source, "accepted"),
        ("export", "audited", "accepted"),
    ]
    assert exported[0]["key_id"] is None and exported[1]["key_id"] is not None
    assert [(e["action"], e["target"], e["outcome"]) for e in imported] == [
        ("import", "broken", "refused"),
        ("import", "audited", "succeeded"),
    ]
    assert all(e["key_id"] for e in imported)
    assert b"not json" not in json.dumps(imported).encode()
