"""The CPU of each call of an agent's turn through the whole app, in process, one agent: the
ASGI app is driven directly (no sockets, no HTTP server), so the figures are the app's own,
its middleware, the hot layer, the store and the core included. Twenty sessions grow by the
turns of :mod:`tests.bench.bench_turns`; each turn reads the context, appends the run's 4
messages and asks for a flush. No worker runs, so once a session passes the observer's
threshold its flush requests coalesce onto the pending job.

Prints the median and p90 CPU (process time, every thread) of each call over turns 20 to 60.

``python -m tests.bench.profile_requests`` (SQLite in a temporary folder; ``--database-url``
for another store, migrated here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from om_api.server.app import create_app
from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade

from .bench_turns import turn_body

SESSIONS = 20
WARM_TURNS = 20
TURNS = 60
ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def request(app: ASGIApp, method: str, path: str, body: bytes | None, key: str) -> int:
    """One request straight into the ASGI app: its status."""
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {key}".encode())]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }  # fmt: skip
    messages = [{"type": "http.request", "body": body or b"", "more_body": False}]
    status = 0

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # the client never goes away
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])

    await app(scope, receive, send)
    return status


async def measure(app: ASGIApp, key: str, sessions: list[str]) -> dict[str, list[float]]:
    """CPU milliseconds of each call, by call, over the measured turns."""
    cpu: dict[str, list[float]] = {"context": [], "append": [], "flush": []}
    for turn in range(TURNS):
        for session in sessions:
            calls = (
                ("context", "GET", f"/v1/sessions/{session}/context", None),
                ("append", "POST", f"/v1/sessions/{session}/entries",
                 json.dumps(turn_body(0, turn)).encode()),
                ("flush", "POST", f"/v1/sessions/{session}/flush", b"{}"),
            )  # fmt: skip
            for name, method, path, body in calls:
                started = time.process_time()
                status = await request(app, method, path, body, key)
                spent = (time.process_time() - started) * 1000
                if status >= 300:
                    raise RuntimeError(f"{method} {path}: {status}")
                if turn >= WARM_TURNS:
                    cpu[name].append(spent)
    return cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a store to migrate and use (default: SQLite)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        url = args.database_url or f"sqlite:///{folder}/profile.db"
        upgrade(url)
        store = SqlStore.from_url(url)
        accounts = AccountStore(store.engine)
        tenant = accounts.create_tenant("profile").id
        key = accounts.create_api_key(tenant, "profile").plaintext
        sessions = [store.create_session(tenant).id for _ in range(SESSIONS)]
        settings = Settings(
            database_url=url, redis_url=redis_server.url, rate_limits_enabled=False,
            log_level="warning",
        )  # fmt: skip
        app = create_app(
            settings, store=store, redis=connect(redis_server.url), publish=lambda *_: None
        )
        cpu = asyncio.run(measure(app, key, sessions))
        store.close()
    for name, spent in cpu.items():
        spent.sort()
        print(
            f"{name}: median {statistics.median(spent):.3f} ms CPU, "
            f"p90 {spent[int(len(spent) * 0.9)]:.3f} ms"
        )
    print(f"turn: {sum(statistics.median(spent) for spent in cpu.values()):.3f} ms CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
