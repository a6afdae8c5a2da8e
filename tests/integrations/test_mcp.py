"""``om mcp`` end to end: the MCP SDK's own client talks to the server over stdio, and the
server talks to the real API of the embedded stack (``stack``). MCP over HTTP, served by the API
itself at ``/mcp``, is tested in ``test_mcp_remote``. The search tool's hybrid mode runs against a
second stack whose embeddings are on (a bag-of-words embeddings server on 127.0.0.1).

Each test spawns ``python -m om_api.cli mcp`` as a child process (the SDK stops it).
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from om_api.cli.stack import Stack, StackConfig, StackInfo
from tests.e2e import embeddings_server
from tests.e2e.support import LOW

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"context", "recall", "search", "sessions", "entries", "append", "flush", "status"}
FACT = "The staging deploy window of project Zephyr opens at 04:30 UTC, see ticket ZEPHYR-881."
FILLER = 11  # more messages than the recent window (8), so the fact's observation is shown
MEMORY_REF = re.compile(r"\[((?:om|reflection):[a-f0-9]{12})\]")
MESSAGE_LINE = re.compile(r"^\[([^\]]+)\] (?:user|assistant): ", flags=re.MULTILINE)


def _server_command(*options: str) -> list[str]:
    return ["-m", "om_api.cli", "mcp", *options]


def _api_env(stack: StackInfo, key: str | None = None) -> dict[str, str]:
    return {"OM_API_URL": stack.api_url, "OM_API_KEY": key or stack.api_key}


@asynccontextmanager
async def _stdio_session(
    stack: StackInfo, errlog: TextIO, key: str | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with ``om mcp`` spawned over stdio (the SDK stops it)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=_server_command(),
        env=_api_env(stack, key),
        cwd=ROOT,
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
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


def _messages(session_id: str) -> list[dict[str, str]]:
    filler = [
        {
            "role": "assistant" if i % 2 == 0 else "user",
            "content": f"Step {i}: checked service {i} of the rollout, nothing unusual.",
        }
        for i in range(FILLER)
    ]
    # Entry ids are unique across the tenant's sessions, hence the session in the fact's id.
    return [{"role": "user", "content": FACT, "id": f"{session_id}-fact"}, *filler]


async def _remember_and_recall(session: ClientSession, session_id: str) -> None:
    """Append to a new session, flush, find the fact's memory id in the context and recall
    its source message through the server's tools."""
    appended = await _call(session, "append", session_id=session_id, messages=_messages(session_id))
    assert appended.structured_content is not None
    assert len(appended.structured_content["appended_ids"]) == 1 + FILLER

    job = await _call(session, "flush", session_id=session_id, wait=True, wait_seconds=120)
    assert job.structured_content is not None
    assert job.structured_content["state"] == "succeeded", job.structured_content

    context = _text(await _call(session, "context", session_id=session_id))
    # The memory line of the fact, not its copy in the recent messages (which has no id).
    fact_lines = [line for line in context.splitlines() if "ZEPHYR-881" in line]
    refs = [ref for line in fact_lines for ref in MEMORY_REF.findall(line)]
    assert refs, f"no memory line names the fact:\n{context}"
    assert "# Recent messages" in context

    recalled = _text(await _call(session, "recall", session_id=session_id, memory_id=refs[0]))
    assert f"[{session_id}-fact] user: {FACT}" in recalled

    found = _text(
        await _call(session, "search", query="Zephyr deploy window", session_id=session_id)
    )
    assert f"[{session_id}-fact] message in session {session_id}:" in found
    assert f"[{refs[0]}]" in found and "«Zephyr»" in found
    by_words = await _call(
        session, "search", query="Zephyr deploy window", session_id=session_id, mode="lexical"
    )
    assert _text(by_words) == found


def test_stdio_tools_append_flush_context_recall_and_page(stack: StackInfo, tmp_path: Path) -> None:
    session_id = f"mcp-stdio-{uuid.uuid4().hex[:8]}"

    async def scenario(errlog: TextIO) -> None:
        async with _stdio_session(stack, errlog) as session:
            listed = await session.list_tools()
            assert {tool.name for tool in listed.tools} == TOOLS
            assert all(tool.description for tool in listed.tools)
            await _remember_and_recall(session, session_id)

            seen: list[str] = []
            after: str | None = None
            while True:
                arguments: dict[str, Any] = {"session_id": session_id, "limit": 5}
                if after is not None:
                    arguments["after"] = after
                page = _text(await _call(session, "entries", **arguments))
                seen += MESSAGE_LINE.findall(page)
                cursor = re.search(r"^next cursor: (\S+)", page, flags=re.MULTILINE)
                if cursor is None:
                    assert "(end of the history)" in page
                    break
                after = cursor.group(1)
            assert len(seen) == 1 + FILLER and seen[0] == f"{session_id}-fact"

            status = await _call(session, "status", session_id=session_id)
            assert status.structured_content is not None
            assert status.structured_content["recorded_observations"] >= 1

    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        anyio.run(scenario, errlog)


def test_stdio_errors_are_one_line_tool_errors_without_the_key(
    stack: StackInfo, tmp_path: Path
) -> None:
    fresh = f"mcp-fresh-{uuid.uuid4().hex[:8]}"

    async def scenario(errlog: TextIO) -> list[str]:
        async with _stdio_session(stack, errlog) as session:
            unknown_session = await _tool_error(session, "context", session_id=fresh)
            assert "not found" in unknown_session and fresh in unknown_session
            await _call(session, "append", session_id=fresh, messages=_messages(fresh)[:1])
            unknown_memory = await _tool_error(
                session, "recall", session_id=fresh, memory_id="om:000000000000"
            )
            assert "no memory om:000000000000" in unknown_memory
            malformed_session = await _tool_error(session, "status", session_id="no/such id")
            malformed_memory = await _tool_error(
                session, "recall", session_id=fresh, memory_id="not-a-memory-id"
            )
            # The stack's embeddings are off: the API's 422 reaches the model as its reason.
            hybrid = await _tool_error(
                session, "search", query="deploy window", session_id=fresh, mode="hybrid"
            )
            assert "OM_EMBEDDINGS_PROVIDER" in hybrid
            unknown_mode = await _tool_error(
                session, "search", query="deploy window", session_id=fresh, mode="semantic"
            )
            assert "mode" in unknown_mode
            return [
                unknown_session,
                unknown_memory,
                malformed_session,
                malformed_memory,
                hybrid,
                unknown_mode,
            ]

    async def refused(errlog: TextIO, bad_key: str) -> str:
        async with _stdio_session(stack, errlog, key=bad_key) as session:
            return await _tool_error(session, "status", session_id=fresh)

    bad_key = f"om_not-a-key-{uuid.uuid4().hex}"
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        messages = anyio.run(scenario, errlog)
        unauthorized = anyio.run(refused, errlog, bad_key)
    assert "unauthorized" in unauthorized
    for message in [*messages[:2], messages[4], unauthorized]:
        assert "\n" not in message and "Traceback" not in message
    for message in [*messages, unauthorized]:
        assert stack.api_key not in message and bad_key not in message


@pytest.fixture(scope="module")
def hybrid_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """An embedded stack whose embeddings are on, over the bag-of-words test server."""
    root = tmp_path_factory.mktemp("mcp-hybrid")
    with embeddings_server.running() as server:
        config = StackConfig(
            database_url=f"sqlite:///{root / 'om.db'}",
            api_port=0,
            flower_port=0,
            beat=False,
            flower=False,
            env={
                "OM_SETTINGS_JSON": json.dumps(LOW),
                "OM_EMBEDDINGS_PROVIDER": "openai",
                "OM_EMBEDDINGS_URL": server.url,
                "OM_EMBEDDINGS_MODEL": "bow",
            },
            log_dir=root / "logs",
        )
        with Stack(config) as running:
            yield running.info


def test_stdio_search_in_hybrid_mode_also_finds_by_vector(
    hybrid_stack: StackInfo, tmp_path: Path
) -> None:
    session_id = f"mcp-hybrid-{uuid.uuid4().hex[:8]}"
    # No message holds this word: the full text finds nothing, the nearest vectors do.
    query = "quokka"

    async def scenario(errlog: TextIO) -> tuple[str, str]:
        async with _stdio_session(hybrid_stack, errlog) as session:
            await _call(session, "append", session_id=session_id, messages=_messages(session_id))
            job = await _call(session, "flush", session_id=session_id, wait=True, wait_seconds=120)
            assert job.structured_content is not None
            assert job.structured_content["state"] == "succeeded", job.structured_content
            arguments = {"query": query, "session_id": session_id}
            lexical = _text(await _call(session, "search", **arguments, mode="lexical"))
            # The workers embed the session after its flush; the wait only bounds a failure.
            deadline = time.monotonic() + 120
            while True:
                hybrid = _text(await _call(session, "search", **arguments, mode="hybrid"))
                if not hybrid.startswith("No hits") or time.monotonic() > deadline:
                    return lexical, hybrid
                await anyio.sleep(0.5)

    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        lexical, hybrid = anyio.run(scenario, errlog)
    assert lexical == f"No hits for {query!r}."
    assert f"message in session {session_id}:" in hybrid
