"""On a local store (SQLite) a turn stays on the event loop: a context read whose memory part
is kept, an append no other writer or call holds up and a flush request with nothing to do take
no thread; a cold build, an append behind another writer or beside another call and an
accepted flush take their lane.
On a database server every call takes its lane. Which lane ran is recorded by wrapping
:meth:`Lane.run`; thread events, no timing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from om_api.server.lanes import Lane
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import SqlStore, upgrade
from om_workers.store.engine import writer_connection
from tests.api.conftest import make_settings
from tests.api.server import LiveApi, Published, serve


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the lanes calls ran in, in order."""
    ran: list[str] = []
    original = Lane.run

    async def recorded(self: Lane, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ran.append(self.name)
        return await original(self, func, *args, **kwargs)

    monkeypatch.setattr(Lane, "run", recorded)
    yield ran


def _append(client: httpx.Client, text: str) -> None:
    entries = [{"kind": "message", "message": {"role": "user", "content": text}}]
    client.post("/v1/sessions/s/entries", json={"entries": entries}).raise_for_status()


def test_a_turn_on_sqlite_takes_no_thread(backend_api: LiveApi, hops: list[str]) -> None:
    _, client = backend_api.tenant()
    client.post("/v1/sessions", json={"id": "s"}).raise_for_status()
    client.post("/v1/sessions/s/flush").raise_for_status()  # accepted: the session's first job
    _append(client, "first")
    client.get("/v1/sessions/s/context").raise_for_status()  # the memory part is built
    hops.clear()
    _append(client, "second")
    client.get("/v1/sessions/s/context").raise_for_status()
    client.post("/v1/sessions/s/flush").raise_for_status()
    if backend_api.backend == "sqlite":
        assert hops == []
    else:
        assert hops == ["write", "read", "read"]


def test_a_cold_context_read_is_built_in_the_read_lane(
    backend_api: LiveApi, hops: list[str]
) -> None:
    _, client = backend_api.tenant()
    client.post("/v1/sessions", json={"id": "s"}).raise_for_status()
    _append(client, "first")
    hops.clear()
    client.get("/v1/sessions/s/context").raise_for_status()
    assert hops == ["read"]


def test_an_append_behind_another_writer_waits_in_the_write_lane(
    api: LiveApi, hops: list[str]
) -> None:
    _, client = api.tenant()
    client.post("/v1/sessions", json={"id": "s"}).raise_for_status()
    holding, release = threading.Event(), threading.Event()

    def hold_the_writers() -> None:
        with writer_connection(api.store.engine):
            holding.set()
            release.wait(timeout=60)

    holder = threading.Thread(target=hold_the_writers)
    holder.start()
    assert holding.wait(timeout=60)
    hops.clear()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(_append, client, "behind the other writer")
        while "write" not in hops and not answer.done():
            threading.Event().wait(0.01)  # until the append has been handed to its lane
        release.set()
        answer.result(timeout=60)
    holder.join(timeout=60)
    assert hops == ["write"]
    assert client.get("/v1/sessions/s").json()["entry_count"] == 1


def test_an_append_beside_another_call_takes_the_write_lane(
    api: LiveApi, api_redis_server: EmbeddedRedis, tmp_path: Path, hops: list[str]
) -> None:
    """While another call of a turn is served (here a flush request whose publish is held),
    an append leaves the event loop to the reads and waits in the write lane."""
    publishing, release = threading.Event(), threading.Event()

    def held_publish(tenant_id: str, session_id: str, job_id: str) -> None:
        publishing.set()
        release.wait(timeout=60)

    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    redis_client = connect(api_redis_server.url)
    settings = make_settings(url, api_redis_server.url)
    try:
        with serve(settings, store, redis_client, Published(), publish=held_publish) as live:
            _, client = live.tenant()
            client.post("/v1/sessions", json={"id": "s"}).raise_for_status()
            with ThreadPoolExecutor(2) as pool:
                flush = pool.submit(client.post, "/v1/sessions/s/flush")  # the first: accepted
                assert publishing.wait(timeout=60)
                hops.clear()
                append = pool.submit(_append, client, "beside the flush request")
                while "write" not in hops and not append.done():
                    threading.Event().wait(0.01)
                release.set()
                append.result(timeout=60)
                assert flush.result(timeout=60).status_code == 202
            assert hops == ["write"]
    finally:
        release.set()
        redis_client.close()
        store.close()
