"""On a local store (SQLite) a turn stays on the event loop: a context read whose memory part
is kept, an append no other writer holds up and a flush request with nothing to do take no
thread; a cold build, an append behind another writer and an accepted flush take their lane.
On a database server every call takes its lane. Which lane ran is recorded by wrapping
:meth:`Lane.run`; thread events, no timing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from om_api.server.lanes import Lane
from om_workers.store.engine import writer_connection
from tests.api.server import LiveApi


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
