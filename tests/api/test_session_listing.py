"""``GET /v1/sessions`` on every backend: the key's tenant only, newest first, cursor pages
that hold while sessions are created, ``updated_since``, 422 for bad values; and the clients'
``list_sessions``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from om_api.client import AsyncOMClient, InvalidRequest, OMClient
from om_api.schemas import SessionsPage
from tests.api.seed import message
from tests.api.server import LiveApi


def _pages(client: httpx.Client, limit: int, **params: str) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        query = {"limit": limit, **params, **({"cursor": cursor} if cursor else {})}
        answer = client.get("/v1/sessions", params=query)
        assert answer.status_code == 200, answer.text
        page = SessionsPage.model_validate(answer.json())
        ids += [s.id for s in page.sessions]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def test_listing_is_the_tenants_sessions_newest_first(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    _, neighbour = backend_api.tenant()
    for i in range(5):
        assert client.post("/v1/sessions", json={"id": f"s{i}"}).status_code == 201
    neighbour.post("/v1/sessions", json={"id": "theirs"})
    assert _pages(client, 2) == ["s4", "s3", "s2", "s1", "s0"]
    body = client.get("/v1/sessions").json()
    assert body["next_cursor"] is None and len(body["sessions"]) == 5
    assert set(body["sessions"][0]) >= {"id", "entry_count", "created_at", "updated_at"}
    assert _pages(neighbour, 10) == ["theirs"]


def test_paging_holds_while_sessions_are_created(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    for i in range(4):
        client.post("/v1/sessions", json={"id": f"s{i}"})
    first = client.get("/v1/sessions", params={"limit": 2}).json()
    client.post("/v1/sessions", json={"id": "new"})
    rest = client.get("/v1/sessions", params={"cursor": first["next_cursor"]}).json()
    listed = [s["id"] for s in first["sessions"] + rest["sessions"]]
    assert listed == ["s3", "s2", "s1", "s0"]
    assert _pages(client, 10)[0] == "new"


def test_updated_since_filters_by_last_change(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    for name in ("old", "touched"):
        client.post("/v1/sessions", json={"id": name})
    time.sleep(0.05)
    cutoff = datetime.now(UTC)
    time.sleep(0.05)
    client.post("/v1/sessions/touched/entries", json={"entries": [message("t-1", "user", "hi")]})
    client.post("/v1/sessions", json={"id": "fresh"})
    assert _pages(client, 1, updated_since=cutoff.isoformat()) == ["fresh", "touched"]
    # Another offset, and no offset (UTC): the same instant.
    plus_two = cutoff.astimezone(timezone(timedelta(hours=2)))
    assert _pages(client, 5, updated_since=plus_two.isoformat()) == ["fresh", "touched"]
    naive = cutoff.replace(tzinfo=None).isoformat()
    assert _pages(client, 5, updated_since=naive) == ["fresh", "touched"]


def test_bad_listing_parameters_are_422(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    client.post("/v1/sessions", json={"id": "s"})
    cases = {
        "limit": ["0", "101", "many"],
        "cursor": ["not base64 !", "bm9wZQ", "x" * 600],
        "updated_since": ["yesterday", "2026-13-01", "1700000000000000000000"],
    }
    for name, values in cases.items():
        for value in values:
            answer = client.get("/v1/sessions", params={name: value})
            assert answer.status_code == 422, (name, value, answer.text)
            assert name in answer.json()["detail"] or "cursor" in answer.json()["detail"], (
                name,
                answer.json()["detail"],
            )
    with backend_api.anonymous() as anonymous:
        assert anonymous.get("/v1/sessions").status_code == 401


def test_clients_list_sessions(backend_api: LiveApi) -> None:
    _, http = backend_api.tenant()
    key = str(http.headers["authorization"]).removeprefix("Bearer ")
    with OMClient(backend_api.url, key) as om:
        for i in range(3):
            om.create_session(f"c{i}")
        page = om.list_sessions(limit=2)
        assert [s.id for s in page.sessions] == ["c2", "c1"] and page.next_cursor
        assert [s.id for s in om.list_sessions(cursor=page.next_cursor).sessions] == ["c0"]
        since = datetime.now(UTC) + timedelta(hours=1)
        assert om.list_sessions(updated_since=since).sessions == []
        assert len(om.list_sessions(updated_since="2000-01-01").sessions) == 3
        with pytest.raises(InvalidRequest) as refused:
            om.list_sessions(cursor="bm9wZQ")
        assert refused.value.status == 422 and "cursor" in str(refused.value)

    async def scenario() -> list[str]:
        async with AsyncOMClient(backend_api.url, key) as aom:
            return [s.id for s in (await aom.list_sessions(limit=5)).sessions]

    assert asyncio.run(scenario()) == ["c2", "c1", "c0"]
