"""On a local store (SQLite) a turn's reads stay on the event loop: a context read whose
memory part is kept and a flush request with nothing to do take no thread; a cold build, an
append and an accepted flush take their lane. On a database server every read takes the read
lane. Which lane ran is recorded by wrapping :meth:`Lane.run`; no timing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from om_api.server.lanes import Lane
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


def test_a_turn_on_sqlite_hops_only_to_write(backend_api: LiveApi, hops: list[str]) -> None:
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
        assert hops == ["write"]
    else:
        assert hops == ["write", "read", "write"]


def test_a_cold_context_read_is_built_in_the_read_lane(
    backend_api: LiveApi, hops: list[str]
) -> None:
    _, client = backend_api.tenant()
    client.post("/v1/sessions", json={"id": "s"}).raise_for_status()
    _append(client, "first")
    hops.clear()
    client.get("/v1/sessions/s/context").raise_for_status()
    assert hops == ["read"]
