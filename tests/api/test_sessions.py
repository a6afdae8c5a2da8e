"""Sessions and entries: create, read, append (idempotent, 409, 422, caps), page."""

from __future__ import annotations

import httpx

from tests.api.seed import conversation, message
from tests.api.server import LiveApi


def test_create_and_read_session(api: LiveApi) -> None:
    _, client = api.tenant()
    created = client.post("/v1/sessions", json={"id": "s-1", "metadata": {"agent": "a"}})
    assert created.status_code == 201
    body = created.json()
    assert body["id"] == "s-1" and body["leaf_id"] is None and body["entry_count"] == 0
    assert body["metadata"] == {"agent": "a"}
    read = client.get("/v1/sessions/s-1").json()
    assert read["entry_count"] == 0 and read["unobserved_tokens"] == 0
    # No body at all: a random id.
    generated = client.post("/v1/sessions")
    assert generated.status_code == 201 and len(generated.json()["id"]) == 32


def test_create_session_conflicts_and_bad_ids(api: LiveApi) -> None:
    _, client = api.tenant()
    assert client.post("/v1/sessions", json={"id": "dup"}).status_code == 201
    again = client.post("/v1/sessions", json={"id": "dup"})
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    for bad in ("", "has space", "a/b", "x" * 129):
        answer = client.post("/v1/sessions", json={"id": bad})
        assert answer.status_code == 422, bad
        assert "id" in answer.json()["detail"]
    unknown_key = client.post("/v1/sessions", json={"id": "k", "tenant_id": "other"})
    assert unknown_key.status_code == 422 and "tenant_id" in unknown_key.json()["detail"]
    assert client.get("/v1/sessions/missing").status_code == 404
    assert client.get("/v1/sessions/bad%20id").status_code == 422


def test_append_is_idempotent_and_conflicts_are_409(api: LiveApi) -> None:
    tid, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    batch = {"entries": conversation(3, prefix=tid)}
    ids = [f"{tid}{i}" for i in range(3)]
    first = client.post("/v1/sessions/s/entries", json=batch)
    assert first.status_code == 201
    assert first.json() == {"appended_ids": ids, "duplicate_ids": [], "leaf_id": ids[2]}
    retried = client.post("/v1/sessions/s/entries", json=batch).json()
    assert retried["appended_ids"] == [] and retried["duplicate_ids"] == ids
    changed = {"entries": [message(ids[1], "assistant", "something else")]}
    conflict = client.post("/v1/sessions/s/entries", json=changed)
    assert conflict.status_code == 409 and ids[1] in conflict.json()["detail"]
    # A conflicting batch writes nothing, not even its new entries.
    mixed = {"entries": [message(f"{tid}-new", "user", "new"), message(ids[1], "user", "clash")]}
    assert client.post("/v1/sessions/s/entries", json=mixed).status_code == 409
    assert client.get("/v1/sessions/s").json()["entry_count"] == 3


def test_append_rejects_bad_batches_with_reasons(api: LiveApi) -> None:
    tid, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    url = "/v1/sessions/s/entries"
    cases = {
        "empty": {"entries": []},
        "too many": {"entries": [{"kind": "note"} for _ in range(1001)]},
        "bad id": {"entries": [message("bad id", "user", "x")]},
        "no message": {"entries": [{"id": "e1", "kind": "message"}]},
        "bad role": {"entries": [{"id": "e1", "kind": "message", "message": {"role": "robot"}}]},
        "custom without data": {"entries": [{"id": "e1", "kind": "custom"}]},
        "unknown parent": {"entries": [{**message("e1", "user", "x"), "parent_id": "nope"}]},
        "twice": {"entries": [message("e1", "user", "x"), message("e1", "user", "x")]},
        "not an object": {"entries": "nope"},
    }
    for name, body in cases.items():
        answer = client.post(url, json=body)
        assert answer.status_code == 422, (name, answer.text)
        assert answer.json()["error"] == "invalid_input" and answer.json()["detail"], name
    broken = client.post(url, content=b"{not", headers={"content-type": "application/json"})
    assert broken.status_code == 422
    assert client.get("/v1/sessions/s").json()["entry_count"] == 0
    missing = client.post("/v1/sessions/missing/entries", json={"entries": conversation(1, tid)})
    assert missing.status_code == 404


def test_batch_of_exactly_1000_is_accepted(api: LiveApi) -> None:
    _, client = api.tenant()
    client.post("/v1/sessions", json={"id": "big"})
    batch = {"entries": [{"kind": "note"} for _ in range(1000)]}
    answer = client.post("/v1/sessions/big/entries", json=batch)
    assert answer.status_code == 201 and len(answer.json()["appended_ids"]) == 1000


def test_entries_page_in_order(api: LiveApi) -> None:
    tid, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    ids = [f"{tid}{i}" for i in range(5)]
    client.post("/v1/sessions/s/entries", json={"entries": conversation(5, prefix=tid)})
    first = client.get("/v1/sessions/s/entries", params={"limit": 2}).json()
    assert [e["id"] for e in first["entries"]] == ids[:2] and first["next_cursor"] == ids[1]
    assert first["entries"][0]["message"] == {
        "role": "user",
        "content": "turn 0: the deploy uses blue-green slots",
        "tool_calls": [],
        "tool_call_id": None,
        "tool_name": None,
        "is_error": False,
    }
    rest = client.get("/v1/sessions/s/entries", params={"after": ids[1], "limit": 100}).json()
    assert [e["id"] for e in rest["entries"]] == ids[2:] and rest["next_cursor"] is None
    assert client.get("/v1/sessions/s/entries", params={"after": "zz"}).status_code == 422
    assert client.get("/v1/sessions/s/entries", params={"limit": 0}).status_code == 422
    assert client.get("/v1/sessions/s/entries", params={"limit": 1001}).status_code == 422


def test_auth_is_required(api: LiveApi) -> None:
    with api.anonymous() as anonymous:
        for method, path in (
            ("POST", "/v1/sessions"),
            ("GET", "/v1/sessions/s"),
            ("GET", "/v1/jobs/j"),
            ("POST", "/v1/sessions/s/flush"),
        ):
            answer = anonymous.request(method, path)
            assert answer.status_code == 401, path
            assert answer.headers["www-authenticate"] == "Bearer"
        bad = anonymous.get("/v1/sessions/s", headers={"Authorization": "Bearer nope-not-a-key"})
        assert bad.status_code == 401
        basic = anonymous.get("/v1/sessions/s", headers={"Authorization": "Basic abc"})
        assert basic.status_code == 401
        # The admin token is not a tenant key, and a tenant key is not the admin token.
        admin_as_key = anonymous.get(
            "/v1/sessions/s", headers={"Authorization": "Bearer admin-token-for-tests-0123456789"}
        )
        assert admin_as_key.status_code == 401
    _, client = api.tenant()
    assert client.post("/v1/admin/tenants", json={"id": "x"}).status_code == 401


def test_oversized_body_is_413(api: LiveApi) -> None:
    _, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    huge = {"entries": [message("e1", "user", "x" * (300 * 1024))]}
    answer = client.post("/v1/sessions/s/entries", json=huge)
    assert answer.status_code == 413 and answer.json()["error"] == "payload_too_large"

    # A chunked body (no Content-Length) is cut off once it passes the limit.
    def chunks() -> object:
        yield b'{"entries": [{"id": "e1", "kind": "message",'
        yield b' "message": {"role": "user", "content": "'
        for _ in range(300):
            yield b"y" * 1024
        yield b'"}}]}'

    streamed = httpx.post(
        f"{api.url}/v1/sessions/s/entries",
        content=chunks(),  # type: ignore[arg-type]
        headers={**client.headers, "content-type": "application/json"},
    )
    assert streamed.status_code == 413
    assert client.get("/v1/sessions/s").json()["entry_count"] == 0
