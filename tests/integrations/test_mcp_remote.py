"""Remote MCP at ``/mcp`` of ``om api``: the MCP SDK's own streamable-HTTP client against the real
API of an embedded stack (private Redis, one worker) over HTTP, each caller with its own key.

One stack per store for the module (SQLite always, PostgreSQL with ``OM_TEST_DATABASE_URL``):
tenant A (the stack's dev tenant), tenant B, and a tenant whose reads are limited to a burst of
a few. The provider's API key is set, so it is a secret every answer is redacted of. The waits
only bound a failing test; nothing asserts how fast anything happened.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from om_api.cli.stack import Stack, StackConfig
from om_api.client import OMClient
from om_core.policy.rate_limit import RateLimit, RequestClass
from om_core.read.search_narrowing import MAX_NARROWING_PAIRS
from om_workers.store import AccountStore, SqlStore
from tests.conftest import BACKENDS, fresh_database
from tests.e2e.support import LOW

TOOLS = {"context", "recall", "search", "sessions", "entries", "append", "flush", "status"}
PROVIDER_SECRET = "sk-mcp-remote-0f9a8b7c6d5e4f3a2b1c"
LIMITED_BURST = 3
FILLER = 11
LIMITED_SESSION = "limited-session"
MAX_BODY_BYTES = 64 * 1024
MAX_CURSOR_CHARS = 512
ROUNDS = 10
MEMORY_REF = re.compile(r"\[((?:om|reflection):[a-f0-9]{12})\]")
TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Remote:
    """The stack's ``/mcp`` URL and one API key per tenant."""

    mcp_url: str
    key_a: str
    key_b: str
    key_limited: str


def _new_tenant(
    accounts: AccountStore, prefix: str, limits: Mapping[RequestClass, RateLimit] | None = None
) -> tuple[str, str]:
    """A new tenant (with rate-limit overrides) and an API key of it: ``(tenant id, key)``."""
    tenant_id = accounts.create_tenant(f"{prefix}-{uuid.uuid4().hex[:8]}").id
    if limits:
        accounts.set_rate_limits(tenant_id, limits)
    return tenant_id, accounts.create_api_key(tenant_id, label="mcp test").plaintext


@pytest.fixture(scope="module", params=BACKENDS)
def remote(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Remote]:
    data = tmp_path_factory.mktemp("mcp-remote")
    with fresh_database(request.param, data) as url:
        config = StackConfig(
            database_url=url,
            api_port=0,
            beat=False,
            flower=False,
            env={
                "OM_SETTINGS_JSON": json.dumps(LOW),
                "OM_PROVIDER": "extractive",
                "OM_PROVIDER_API_KEY": PROVIDER_SECRET,
                # The suite turns rate limits off by default; these tests check them.
                "OM_RATE_LIMITS_ENABLED": "true",
                "OM_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
            },
            log_dir=data / "logs",
        )
        with Stack(config) as running:
            info = running.info
            store = SqlStore.from_url(info.database_url)
            try:
                accounts = AccountStore(store.engine)
                _, key_b = _new_tenant(accounts, "mcp-b")
                limited = RateLimit(rate_per_s=0.001, burst=LIMITED_BURST)
                tenant_c, key_c = _new_tenant(accounts, "mcp-limited", {"reads": limited})
                # Made in the store, so that creating it spends none of the key's reads.
                store.create_session(tenant_c, LIMITED_SESSION)
            finally:
                store.close()
            yield Remote(f"{info.api_url}/mcp", info.api_key, key_b, key_c)


@asynccontextmanager
async def _session(url: str, key: str | None) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session over streamable HTTP, with ``key`` as the bearer."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=TIMEOUT_S) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def _call(session: ClientSession, tool: str, **arguments: Any) -> CallToolResult:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {_text(result)}"
    return result


async def _tool_error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {_text(result)}"
    return _text(result)


def _fact(session_id: str) -> str:
    return f"Deploy window of {session_id} opens at 04:30 UTC, ticket ZEPHYR-{session_id[-4:]}."


async def _remember(session: ClientSession, session_id: str, extra: str = "") -> None:
    # More messages than the recent window (8), so the context shows the fact's observation.
    filler = [
        {"role": "assistant" if i % 2 else "user", "content": f"Step {i}: nothing unusual."}
        for i in range(FILLER)
    ]
    messages = [
        {"role": "user", "content": _fact(session_id) + extra, "id": f"{session_id}-fact"},
        *filler,
    ]
    await _call(session, "append", session_id=session_id, messages=messages)
    job = await _call(session, "flush", session_id=session_id, wait=True, wait_seconds=TIMEOUT_S)
    assert job.structured_content is not None
    assert job.structured_content["state"] == "succeeded", job.structured_content


def test_each_key_lists_and_reads_its_own_tenant_only(remote: Remote) -> None:
    session_a = f"mcp-a-{uuid.uuid4().hex[:8]}"
    session_b = f"mcp-b-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with _session(remote.mcp_url, remote.key_b) as as_b:
            await _remember(as_b, session_b)
        async with _session(remote.mcp_url, remote.key_a) as as_a:
            listed = await as_a.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            await _remember(as_a, session_a)

            sessions = _text(await _call(as_a, "sessions", limit=100))
            assert f"{session_a}: " in sessions and session_b not in sessions

            context = _text(await _call(as_a, "context", session_id=session_a))
            refs = [
                ref
                for line in context.splitlines()
                if "ZEPHYR" in line
                for ref in MEMORY_REF.findall(line)
            ]
            assert refs, context
            recalled = _text(await _call(as_a, "recall", session_id=session_a, memory_id=refs[0]))
            assert f"[{session_a}-fact] user: {_fact(session_a)}" in recalled

            found = _text(await _call(as_a, "search", query="deploy window ZEPHYR", limit=100))
            assert session_a in found and session_b not in found

            # Tenant B's session does not exist for A, whichever tool asks.
            for tool in ("context", "entries", "status"):
                refused = await _tool_error(as_a, tool, session_id=session_b)
                assert refused.startswith(f"Error executing tool {tool}: not found"), refused

        async with _session(remote.mcp_url, remote.key_b) as as_b:
            refused = await _tool_error(as_b, "recall", session_id=session_a, memory_id=refs[0])
            assert "not found" in refused
            sessions_b = _text(await _call(as_b, "sessions"))
            assert session_b in sessions_b and session_a not in sessions_b

    anyio.run(scenario)


def test_search_narrows_to_the_sessions_whose_metadata_matches(remote: Remote) -> None:
    run = uuid.uuid4().hex[:8]
    customers = {f"narrow-{run}-{name}": name for name in ("acme", "globex")}
    with OMClient(remote.mcp_url.removesuffix("/mcp"), remote.key_a) as om:
        for session_id, customer in customers.items():
            om.create_session(session_id, metadata={"customer": customer, "run": run})
            om.append(session_id, [{"role": "user", "content": f"Quasar{run} invoice overdue"}])
    acme, globex = customers
    word = f"Quasar{run}"

    async def scenario() -> None:
        async with _session(remote.mcp_url, remote.key_a) as session:
            everyone = _text(await _call(session, "search", query=word, limit=100))
            assert f"in session {acme}:" in everyone and f"in session {globex}:" in everyone
            narrowed = _text(
                await _call(
                    session, "search", query=word, metadata={"customer": "acme", "run": run}
                )
            )
            assert f"in session {acme}:" in narrowed and globex not in narrowed
            nobody = await _call(session, "search", query=word, metadata={"customer": "initech"})
            assert _text(nobody) == f"No hits for {word!r}."

            with_session = await _tool_error(
                session, "search", query=word, session_id=acme, metadata={"run": run}
            )
            assert "narrows a tenant-wide search" in with_session, with_session
            bad_key = await _tool_error(session, "search", query=word, metadata={"a key": "x"})
            assert "metadata pair 1" in bad_key, bad_key
            at_cap = {f"k{n}": "v" for n in range(MAX_NARROWING_PAIRS)}
            assert _text(await _call(session, "search", query=word, metadata=at_cap)).startswith(
                "No hits"
            )
            too_many = {**at_cap, "one-more": "v"}
            refused = await _tool_error(session, "search", query=word, metadata=too_many)
            assert "metadata" in refused and "invalid request" not in refused, refused

    anyio.run(scenario)


def test_concurrent_callers_each_see_their_own_tenant(remote: Remote) -> None:
    mark = uuid.uuid4().hex[:8]
    callers = {"a": remote.key_a, "b": remote.key_b}
    seen: dict[str, list[str]] = {name: [] for name in callers}

    async def caller(name: str, key: str) -> None:
        async with _session(remote.mcp_url, key) as session:
            hello = [{"role": "user", "content": f"hello from {name}"}]
            await _call(session, "append", session_id=f"mcp-{name}-{mark}", messages=hello)
            for _ in range(ROUNDS):
                seen[name].append(_text(await _call(session, "sessions", limit=100)))

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for name, key in callers.items():
                group.start_soon(caller, name, key)

    anyio.run(scenario)
    for name, other in (("a", "b"), ("b", "a")):
        assert len(seen[name]) == ROUNDS
        for listing in seen[name]:
            assert f"mcp-{name}-{mark}: " in listing and f"mcp-{other}-{mark}" not in listing


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer om_not-a-key", "Basic dXNlcjpwYXNz", "Bearer " + "k" * 600],
    ids=["none", "empty", "unknown", "not-bearer", "overlong"],
)
def test_without_a_valid_key_the_endpoint_answers_401(
    remote: Remote, authorization: str | None
) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    if authorization is not None:
        headers["Authorization"] = authorization
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    answer = httpx.post(remote.mcp_url, json=initialize, headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    body = answer.json()
    assert body["error"] == "unauthorized" and body["request_id"]
    if authorization is not None and len(authorization) > 20:
        assert authorization.split(" ", 1)[1] not in answer.text


def _post(remote: Remote, content: bytes, method: str = "POST") -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {remote.key_a}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    return httpx.request(
        method, remote.mcp_url, content=content, headers=headers, timeout=TIMEOUT_S
    )


def test_bad_requests_are_refused_with_a_4xx(remote: Remote) -> None:
    # Stateless: no stream to open with a GET, no session to end with a DELETE.
    assert _post(remote, b"", method="GET").status_code == 405
    assert _post(remote, b"", method="DELETE").status_code == 405
    malformed = _post(remote, b"{not json")
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == -32700
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    filler = "x" * (MAX_BODY_BYTES - 200)
    fits = {**call, "params": {"name": "sessions", "arguments": {}}, "pad": filler}
    assert len(json.dumps(fits)) <= MAX_BODY_BYTES
    assert _post(remote, json.dumps(fits).encode()).status_code == 200
    too_large = {**fits, "pad": filler + "x" * 400}
    refused = _post(remote, json.dumps(too_large).encode())
    assert refused.status_code == 413 and refused.json()["error"] == "payload_too_large"


def test_the_sessions_cursor_is_capped(remote: Remote) -> None:
    async def scenario() -> tuple[str, str]:
        async with _session(remote.mcp_url, remote.key_a) as session:
            at_cap = await _tool_error(session, "sessions", cursor="c" * MAX_CURSOR_CHARS)
            over = await _tool_error(session, "sessions", cursor="c" * (MAX_CURSOR_CHARS + 1))
            return at_cap, over

    at_cap, over = anyio.run(scenario)
    # At the cap the API reads it (and refuses a cursor it did not hand out); over it the
    # tool's schema refuses it before any API call.
    assert "invalid request" in at_cap
    assert f"at most {MAX_CURSOR_CHARS} characters" in over and "invalid request" not in over


def test_the_sdk_client_without_a_key_is_refused(remote: Remote) -> None:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    async def scenario() -> None:
        async with (
            httpx2.AsyncClient(timeout=TIMEOUT_S, event_hooks={"response": [record]}) as http,
            streamable_http_client(remote.mcp_url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()

    with pytest.raises(BaseExceptionGroup) as raised:
        anyio.run(scenario)
    assert raised.group_contains(MCPError)
    assert statuses == [401]


def test_rate_limits_apply_to_tool_calls_per_key(remote: Remote) -> None:
    async def scenario() -> list[CallToolResult]:
        async with _session(remote.mcp_url, remote.key_limited) as session:
            # Protocol messages spend nothing; an append spends an append, not a read.
            await session.list_tools()
            hello = [{"role": "user", "content": "hello"}]
            await _call(session, "append", session_id=LIMITED_SESSION, messages=hello)
            return [
                await session.call_tool("status", {"session_id": LIMITED_SESSION})
                for _ in range(LIMITED_BURST + 2)
            ]

    results = anyio.run(scenario)
    assert [r.is_error for r in results[:LIMITED_BURST]] == [False] * LIMITED_BURST
    assert all(r.is_error for r in results[LIMITED_BURST:]), [_text(r) for r in results]
    refused = _text(results[LIMITED_BURST])
    assert "rate limited" in refused and "rate limit of reads exceeded" in refused
    assert remote.key_limited not in refused

    async def other_tenant() -> CallToolResult:
        async with _session(remote.mcp_url, remote.key_b) as session:
            return await session.call_tool("sessions", {})

    assert not anyio.run(other_tenant).is_error  # another key's budget is its own


def test_answers_are_redacted_of_the_services_secrets(remote: Remote) -> None:
    session_id = f"mcp-secret-{uuid.uuid4().hex[:8]}"
    leak = f" The provider key is {PROVIDER_SECRET}, keep it safe."

    async def scenario() -> list[str]:
        async with _session(remote.mcp_url, remote.key_a) as session:
            await _remember(session, session_id, extra=leak)
            answers = [
                _text(await _call(session, "context", session_id=session_id)),
                _text(await _call(session, "entries", session_id=session_id)),
                _text(await _call(session, "search", query="provider key", session_id=session_id)),
            ]
            refs = MEMORY_REF.findall(answers[0])
            assert refs, answers[0]
            answers.append(
                _text(await _call(session, "recall", session_id=session_id, memory_id=refs[0]))
            )
            return answers

    for answer in anyio.run(scenario):
        assert PROVIDER_SECRET not in answer
        assert "[REDACTED]" in answer, answer
