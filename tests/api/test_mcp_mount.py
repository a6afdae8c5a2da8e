"""The ``/mcp`` mount of the app, in process (``httpx.ASGITransport``, real SQLite and Redis):
the app starts and stops more than once with MCP served each time, the SDK is loaded by the
first ``/mcp`` request (not by the app), and ``OM_MCP_ENABLED=false`` leaves ``/mcp``
unserved. The remote endpoint end to end is ``tests/integrations``'s."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import redis

from om_api.server.app import create_app
from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.logs import HANDLER_NAME
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.api.server import Published

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _app(tmp_path: Path, redis_url: str, **settings: Any) -> tuple[Any, str, ExitStack]:
    """The app on a fresh SQLite file, a key of a new tenant, and what closes the connections."""
    opened = ExitStack()
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    opened.callback(store.close)
    accounts = AccountStore(store.engine)
    key = accounts.create_api_key(accounts.create_tenant("mcp-mount").id).plaintext
    client: redis.Redis = connect(redis_url)
    opened.callback(client.close)
    app = create_app(
        Settings(database_url=database_url, redis_url=redis_url, **settings),
        store=store,
        redis=client,
        publish=Published(),
    )
    return app, key, opened


async def _post(app: Any, body: dict[str, Any], key: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    headers = {**HEADERS, "Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://om.test") as http:
        return await http.post("/mcp", content=json.dumps(body), headers=headers)


def test_mcp_is_served_after_every_start_of_the_app(
    tmp_path: Path, api_redis_server: EmbeddedRedis
) -> None:
    app, key, opened = _app(tmp_path, api_redis_server.url)

    async def scenario() -> list[set[str]]:
        seen: list[set[str]] = []
        for _ in range(2):
            async with app.router.lifespan_context(app):
                assert (await _post(app, INITIALIZE, key)).status_code == 200
                listed = await _post(app, LIST_TOOLS, key)
                assert listed.status_code == 200, listed.text
                seen.append({tool["name"] for tool in listed.json()["result"]["tools"]})
                refused = await _post(app, LIST_TOOLS, "om_not-a-key")
                assert refused.status_code == 401
        return seen

    with opened:
        first, second = anyio.run(scenario)
    assert first == second and {"context", "sessions", "append"} <= first


def test_mcp_can_be_turned_off(tmp_path: Path, api_redis_server: EmbeddedRedis) -> None:
    app, key, opened = _app(tmp_path, api_redis_server.url, mcp_enabled=False)

    async def scenario() -> int:
        async with app.router.lifespan_context(app):
            return (await _post(app, INITIALIZE, key)).status_code

    with opened:
        assert anyio.run(scenario) == 404


# Run in a fresh interpreter: this one has imported the SDK already.
_PROBE = """
import json, logging, sys
import anyio
from tests.api.test_mcp_mount import INITIALIZE, LIST_TOOLS, _app, _post

app, key, opened = _app(__import__("pathlib").Path(sys.argv[1]), sys.argv[2])
loaded = {"built": "mcp" in sys.modules}

async def scenario():
    async with app.router.lifespan_context(app):
        loaded["started"] = "mcp" in sys.modules
        # Two first requests at once: one build serves both.
        codes = []
        async def one(body):
            codes.append((await _post(app, body, key)).status_code)
        async with anyio.create_task_group() as group:
            group.start_soon(one, INITIALIZE)
            group.start_soon(one, LIST_TOOLS)
        loaded["codes"] = sorted(codes)
        loaded["served"] = "mcp" in sys.modules

with opened:
    anyio.run(scenario)
# The SDK's build calls logging.basicConfig; the root logger keeps the API's handler alone,
# and a library's record (its logger has no handler of its own) is redacted JSON.
loaded["root"] = [handler.get_name() for handler in logging.getLogger().handlers]
logging.getLogger("some_library.client").warning("upstream said %s", key)
logging.getLogger("some_library.client").info("below the root logger's level")
print(json.dumps({**loaded, "key": key}))
"""


def test_the_sdk_is_loaded_by_the_first_mcp_request_not_by_the_app(
    tmp_path: Path, api_redis_server: EmbeddedRedis
) -> None:
    """Its import is about half a second of every API process's start. Its build, now while
    other requests are served, leaves the root logger to the API's redacting handler."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path), api_redis_server.url],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = json.loads(result.stdout.splitlines()[-1])
    key = loaded.pop("key")
    assert loaded == {
        "built": False,
        "started": False,
        "codes": [200, 200],
        "served": True,
        "root": [HANDLER_NAME],
    }
    library = [
        record
        for record in map(json.loads, result.stderr.splitlines())
        if record["logger"] == "some_library.client"
    ]
    assert [record["level"] for record in library] == ["warning"]
    assert "upstream said" in library[0]["message"]
    assert key not in result.stderr
