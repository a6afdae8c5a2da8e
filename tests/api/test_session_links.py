"""The funnel over HTTP: ``PUT``/``DELETE /v1/sessions/{id}/link``, ``workspace`` at creation,
the copies a linked session's appends make, and the answers for links that cannot be."""

from __future__ import annotations

import asyncio

import httpx

from om_api.client import AsyncOMClient, Conflict, InvalidRequest, NotFound, OMClient
from om_core.ledger.funnel import funnel_copy_id
from tests.api.server import LiveApi


def _append(client: httpx.Client, session: str, *entries: dict[str, object]) -> httpx.Response:
    return client.post(f"/v1/sessions/{session}/entries", json={"entries": list(entries)})


def _user(entry_id: str, text: str) -> dict[str, object]:
    return {"id": entry_id, "kind": "message", "message": {"role": "user", "content": text}}


def test_link_copies_new_messages_and_get_shows_the_link(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    assert client.post("/v1/sessions", json={"id": "ws"}).json()["workspace"] is None
    assert client.post("/v1/sessions", json={"id": "child"}).status_code == 201
    assert _append(client, "child", _user("before", "not copied")).status_code == 201

    linked = client.put("/v1/sessions/child/link", json={"workspace": "ws"})
    assert linked.status_code == 200, linked.text
    assert linked.json()["workspace"] == "ws"
    assert client.get("/v1/sessions/child").json()["workspace"] == "ws"
    answer = _append(
        client,
        "child",
        _user("m1", "read the config"),
        {"id": "rec", "kind": "custom", "data": {"type": "om.note"}},
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["appended_ids"] == ["m1", "rec"]

    copies = client.get("/v1/sessions/ws/entries").json()["entries"]
    assert [e["id"] for e in copies] == [funnel_copy_id("ws", "child", "m1")]
    assert copies[0]["message"]["content"] == "read the config"
    assert copies[0]["data"]["funnelOrigin"] == {"sessionId": "child", "entryId": "m1"}

    unlinked = client.delete("/v1/sessions/child/link")
    assert unlinked.status_code == 200 and unlinked.json()["workspace"] is None
    assert _append(client, "child", _user("m2", "after unlink")).status_code == 201
    assert len(client.get("/v1/sessions/ws/entries").json()["entries"]) == 1


def test_links_that_cannot_be(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    _, other = backend_api.tenant()
    for session in ("ws", "child", "solo"):
        assert client.post("/v1/sessions", json={"id": session}).status_code == 201
    assert other.post("/v1/sessions", json={"id": "theirs"}).status_code == 201

    # Another tenant's session, either way round, is a 404 like a missing one.
    assert client.put("/v1/sessions/child/link", json={"workspace": "theirs"}).status_code == 404
    assert other.put("/v1/sessions/theirs/link", json={"workspace": "ws"}).status_code == 404
    assert other.post("/v1/sessions", json={"workspace": "ws"}).status_code == 404
    assert client.put("/v1/sessions/child/link", json={"workspace": "nope"}).status_code == 404
    assert client.delete("/v1/sessions/nope/link").status_code == 404
    # A link to itself is bad input; a chain conflicts with the links there are.
    assert client.put("/v1/sessions/child/link", json={"workspace": "child"}).status_code == 422
    assert client.put("/v1/sessions/child/link", json={"workspace": "ws"}).status_code == 200
    chain = client.put("/v1/sessions/solo/link", json={"workspace": "child"})
    assert chain.status_code == 409 and chain.json()["error"] == "conflict"
    assert client.put("/v1/sessions/ws/link", json={"workspace": "solo"}).status_code == 409
    assert client.post("/v1/sessions", json={"workspace": "child"}).status_code == 409
    bad = client.put("/v1/sessions/child/link", json={"workspace": "a b"})
    assert bad.status_code == 422
    assert client.put("/v1/sessions/child/link", json={}).status_code == 422


def test_create_with_workspace_and_the_clients(api: LiveApi) -> None:
    tenant_id, _ = api.tenant()
    key = api.accounts.create_api_key(tenant_id).plaintext
    with OMClient(api.url, api_key=key) as om:
        om.create_session("ws")
        child = om.create_session("c1", workspace="ws")
        assert child.workspace == "ws"
        om.append("c1", [_user("m1", "hello")])
        assert om.get_session("ws").entry_count == 1
        assert om.unlink("c1").workspace is None
        assert om.link("c1", "ws").workspace == "ws"
        try:
            om.link("c1", "missing")
        except NotFound:
            pass
        else:
            raise AssertionError("expected NotFound")
        try:
            om.create_session("c2", workspace="c1")
        except Conflict:
            pass
        else:
            raise AssertionError("expected Conflict")
        try:
            om.link("c1", "../x")
        except InvalidRequest as exc:
            assert "workspace" in str(exc)
        else:
            raise AssertionError("expected InvalidRequest")

    async def run() -> None:
        async with AsyncOMClient(api.url, api_key=key) as om:
            await om.create_session("c3", workspace="ws")
            await om.append("c3", [_user("m3", "done")])
            assert (await om.unlink("c3")).workspace is None
            assert (await om.link("c3", "ws")).workspace == "ws"

    asyncio.run(run())
    with OMClient(api.url, api_key=key) as om:
        assert om.get_session("ws").entry_count == 2
