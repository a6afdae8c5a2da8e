"""The MCP tools of observational memory, served two ways: by ``om api`` at ``/mcp``
(streamable HTTP, each caller with its own API key: :mod:`om_api.server.mcp_remote`) and by
``om mcp`` over stdio (the host spawns it with one key).

The tools are a thin layer over :class:`~om_api.client.AsyncOMClient`: every tool is one or
two API calls, made for the caller's tenant only, so a host sees exactly that tenant's
sessions and nothing else. Where the client comes from is a :class:`ClientSource`: one client
on one key (:class:`OneClient`, stdio), or a client per call on the caller's key (the API's
``/mcp``). Tools: ``context``, ``recall``, ``search``, ``sessions``, ``entries``, ``append``,
``flush`` and ``status``. A failed API call becomes an MCP tool error (``isError``) with a
one-line reason the model can act on; the caller's API key is scrubbed from it and no
traceback leaves the server.

Needs the MCP SDK (``mcp``), which the ``server`` extra brings. See ``docs/mcp.md``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from om_api.client import AsyncOMClient, Conflict, JobTimeout, NotFound, OMClientError
from om_api.integrations.memory_text import (
    describe_error,
    entry_line,
    recall_problem,
    recall_text,
    search_text,
)
from om_api.schemas import (
    ENTRY_ID_PATTERN,
    MAX_BATCH_ENTRIES,
    MAX_CONTEXT_TOKENS,
    MAX_SESSIONS_PAGE,
    MEMORY_ID_PATTERN,
    AppendEntriesResponse,
    EntryIn,
    JobOut,
    MessageWire,
    RequestModel,
    Role,
    StatusOut,
)
from om_core.read.context import MIN_CONTEXT_TOKENS
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT
from om_core.read.search_narrowing import MAX_NARROWING_PAIRS

SERVER_NAME: Final = "observational-memory"
INSTRUCTIONS: Final = (
    "Long-term memory of agent sessions. Call `context` before answering to read the session's "
    "memory (observations and reflections, each tagged with an id like [om:0123456789ab]) and "
    "its recent messages. Call `recall` with such an id to read the exact messages a memory "
    "rests on before relying on a detail; `search` finds past messages and memory by words. "
    "`append` records new messages, `flush` turns them into memory, `sessions` lists your "
    "sessions, `entries` pages through the raw history and `status` shows memory counts."
)

SessionId = Annotated[
    str,
    Field(
        pattern=ENTRY_ID_PATTERN,
        description="Session id: 1-128 ASCII letters, digits and . _ : - (e.g. 'chat-42').",
    ),
]
MemoryId = Annotated[
    str,
    Field(
        pattern=MEMORY_ID_PATTERN,
        description="Memory id as shown in the context, e.g. 'om:0123456789ab' (an "
        "observation) or 'reflection:0123456789ab'; the 12 hex digits alone work too.",
    ),
]


class MessageIn(RequestModel):
    """A chat message to record (unknown keys and unstorable text are refused)."""

    role: Role = Field(description="Who wrote it: user, assistant, tool or system.")
    content: str = Field(description="The message text.")
    id: Annotated[str, Field(pattern=ENTRY_ID_PATTERN)] | None = Field(
        default=None,
        description="Optional stable id, unique among all your sessions. Re-sending a "
        "message with the same id and content stores nothing new, so a retried append is "
        "safe; omit it to get a fresh id.",
    )


MAX_CURSOR_CHARS: Final = 512
"""Longer ``cursor`` values are refused before any API call (the API's cursors are short)."""


@dataclass(frozen=True)
class Caller:
    """The API client acting for one MCP caller, and what its errors are scrubbed of."""

    client: AsyncOMClient
    secrets: tuple[str, ...]


class ClientSource(Protocol):
    """Where a tool call gets its API client."""

    def open(self, ctx: Context) -> AbstractAsyncContextManager[Caller]:
        """The client for the call of ``ctx``, open for the ``async with`` block. Raises
        :class:`~mcp.server.mcpserver.exceptions.ToolError` when the call carries no usable
        credentials."""


class OneClient:
    """Every call through one open client on one API key (``om mcp`` over stdio); the caller
    closes the client (:meth:`lifespan` does, for the server's lifetime)."""

    def __init__(self, client: AsyncOMClient, api_key: str) -> None:
        self._caller = Caller(client, (api_key,))

    @asynccontextmanager
    async def open(self, ctx: Context) -> AsyncIterator[Caller]:
        """The one client, whoever calls."""
        yield self._caller

    @asynccontextmanager
    async def lifespan(self, server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        """The server's lifespan: closes the client when the server stops."""
        try:
            yield {}
        finally:
            await self._caller.client.aclose()


class _Tools:
    """The tool functions: their names, docstrings and parameters are what the model reads."""

    def __init__(self, clients: ClientSource) -> None:
        self._clients = clients

    @asynccontextmanager
    async def _api(self, ctx: Context) -> AsyncIterator[AsyncOMClient]:
        """The caller's client; an API failure inside the block becomes a one-line tool error
        scrubbed of the caller's key (``from None``: the model gets the reason, the log no
        client traceback)."""
        async with self._clients.open(ctx) as caller:
            try:
                yield caller.client
            except OMClientError as exc:
                raise ToolError(describe_error(exc, caller.secrets)) from None

    async def context(
        self,
        ctx: Context,
        session_id: SessionId,
        max_tokens: Annotated[
            int | None,
            Field(ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS, description="Token budget."),
        ] = None,
    ) -> str:
        """Read a session's memory for the next turn, within max_tokens (default: the
        server's budget): the observational memory (observations and reflections, each tagged
        [om:<id>] or [reflection:<id>]), then every message memory does not cover yet and the
        last few messages. Call it before answering in a session."""
        async with self._api(ctx) as client:
            result = await client.context(session_id, max_tokens=max_tokens)
        texts = {block.id: block.text for block in result.blocks}
        memory, recent = texts.get("observational-memory", ""), texts.get("recent-messages", "")
        if not (memory or recent):
            return f"Session {session_id} has no messages yet."
        recent_part = f"# Recent messages\n{recent}" if recent else ""
        return "\n\n".join(part for part in (memory, recent_part) if part)

    async def recall(self, ctx: Context, session_id: SessionId, memory_id: MemoryId) -> str:
        """Show what one memory item rests on: its text and the exact source messages it was
        made from (for a reflection, also the observations it summarises). Use it to check a
        detail before relying on it. Fails for an id the session does not have."""
        async with self._api(ctx) as client:
            found = await client.recall(session_id, memory_id)
        problem = recall_problem(found, session_id, memory_id)
        if problem is not None:
            raise ToolError(problem)
        return recall_text(found)

    async def search(
        self,
        ctx: Context,
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_QUERY_CHARS,
                description="Words to look for; any of them matches (quotes and operators are "
                "plain text).",
            ),
        ],
        session_id: Annotated[
            str | None,
            Field(
                pattern=ENTRY_ID_PATTERN,
                description="Search this session only (default: every session of the tenant).",
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT, description="Most hits.")] = 10,
        mode: Annotated[
            Literal["lexical", "hybrid"],
            Field(
                description="lexical: by the query's words; hybrid: by its words and its "
                "meaning, fused (fails when the server's embeddings are off)."
            ),
        ] = "lexical",
        metadata: Annotated[
            dict[str, str] | None,
            Field(
                max_length=MAX_NARROWING_PAIRS,
                description="Search only the sessions whose metadata holds each of these keys "
                "with exactly this string value (without session_id; at most 100 sessions may "
                "match).",
            ),
        ] = None,
    ) -> str:
        """Find past messages and memory by words (mode hybrid: also by meaning), best first:
        each hit names its session and its id (a message id, or an om:/reflection: memory id
        to pass to recall for the exact sources) with a snippet, matches in «». Use it when
        the context does not hold a detail the user refers to."""
        async with self._api(ctx) as client:
            page = await client.search(
                query, session_id=session_id, limit=limit, mode=mode, metadata=metadata
            )
        return search_text(query, page)

    async def sessions(
        self,
        ctx: Context,
        cursor: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=MAX_CURSOR_CHARS,
                description="The 'next cursor' of the previous page; omit it for the newest.",
            ),
        ] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_SESSIONS_PAGE, description="Sessions per page.")
        ] = 20,
    ) -> str:
        """List your sessions, newest first: one line per session, '<session id>: <entries>
        entries, <tokens> tokens not observed yet, updated <UTC time>', then the cursor for the
        next page. Use it to find the session_id the other tools take."""
        async with self._api(ctx) as client:
            page = await client.list_sessions(limit=limit, cursor=cursor)
        lines = [
            f"{item.id}: {item.entry_count} entries, {item.unobserved_tokens} tokens not "
            f"observed yet, updated {item.updated_at:%Y-%m-%d %H:%M:%S}"
            for item in page.sessions
        ] or ["(no sessions)"]
        if page.next_cursor is not None:
            lines.append(f"next cursor: {page.next_cursor} (pass it as `cursor` for more)")
        return "\n".join(lines)

    async def entries(
        self,
        ctx: Context,
        session_id: SessionId,
        after: Annotated[
            str | None,
            Field(
                pattern=ENTRY_ID_PATTERN,
                description="Cursor: the entry id to continue after (the 'next cursor' of the "
                "previous page); omit it to start at the first entry.",
            ),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Entries per page.")] = 20,
    ) -> str:
        """Page through a session's raw history (the current branch, oldest first): one line
        per entry, '[<entry id>] <role>: <text>', then the cursor for the next page."""
        async with self._api(ctx) as client:
            page = await client.entries(session_id, after=after, limit=limit)
        lines = [entry_line(entry) for entry in page.entries] or ["(no entries)"]
        if page.next_cursor is None:
            lines.append("(end of the history)")
        else:
            lines.append(f"next cursor: {page.next_cursor} (pass it as `after` for more)")
        return "\n".join(lines)

    async def append(
        self,
        ctx: Context,
        session_id: SessionId,
        messages: Annotated[
            list[MessageIn],
            Field(min_length=1, max_length=MAX_BATCH_ENTRIES, description="Messages, in order."),
        ],
    ) -> AppendEntriesResponse:
        """Record messages at the end of a session, in order; the session is created when it
        does not exist yet. Returns the ids written now and those already stored (a retry).
        Memory is made from them later, by `flush` or automatically."""
        entries = [
            EntryIn(id=m.id, kind="message", message=MessageWire(role=m.role, content=m.content))
            for m in messages
        ]
        async with self._api(ctx) as client:
            try:
                return await client.append(session_id, entries)
            except NotFound:
                # A Conflict means another caller created it meanwhile: append all the same.
                with suppress(Conflict):
                    await client.create_session(session_id)
                return await client.append(session_id, entries)

    async def flush(
        self,
        ctx: Context,
        session_id: SessionId,
        wait: bool = True,
        wait_seconds: Annotated[float, Field(gt=0, le=300)] = 30.0,
        force: bool = False,
    ) -> JobOut:
        """Turn a session's new messages into memory now (observations, then reflections) and
        return the job: its state (queued, running, succeeded, failed or skipped), counts of
        what it recorded, and why it did nothing or failed. With wait (the default) it waits
        up to wait_seconds for the job to finish; a job still running then is returned as it
        stands (call `status` later). force observes even below the token threshold."""
        async with self._api(ctx) as client:
            accepted = await client.flush(session_id, force=force)
            if not wait:
                return await client.job(accepted.job_id)
            try:
                return await client.wait_for_job(accepted.job_id, timeout_s=wait_seconds)
            except JobTimeout as exc:
                return exc.job

    async def status(self, ctx: Context, session_id: SessionId) -> StatusOut:
        """Memory counts of a session: observations and reflections recorded, active and
        visible, pool tokens, whether a flush is in flight and the last error."""
        async with self._api(ctx) as client:
            return await client.status(session_id)


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def build_server(
    clients: ClientSource,
    *,
    lifespan: Callable[[MCPServer[Any]], AbstractAsyncContextManager[dict[str, Any]]] | None = None,
) -> MCPServer[Any]:
    """The MCP server with the eight tools, each call through a client of ``clients``;
    ``lifespan`` (optional) wraps the server's run (:meth:`OneClient.lifespan` closes its
    client)."""
    server: MCPServer[Any] = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, lifespan=lifespan)
    tools = _Tools(clients)
    # Text tools return prose for the model; the others a wire model (JSON plus its schema).
    registrations: Sequence[tuple[Callable[..., object], ToolAnnotations, bool | None]] = (
        (tools.context, _READ_ONLY, False),
        (tools.recall, _READ_ONLY, False),
        (tools.sessions, _READ_ONLY, False),
        (tools.entries, _READ_ONLY, False),
        (tools.search, _READ_ONLY, False),
        (tools.status, _READ_ONLY, None),
        (tools.append, _WRITES, None),
        (tools.flush, _WRITES, None),
    )
    for fn, hints, structured in registrations:
        # One line per description: docstring indentation is noise in a host's tool list.
        description = " ".join((fn.__doc__ or "").split())
        server.add_tool(
            fn, description=description, annotations=hints, structured_output=structured
        )
    return server


def run(*, api_url: str, api_key: str) -> None:
    """Serve over stdin/stdout until the host closes them, for the tenant of ``api_key`` at
    ``api_url``. API failures never stop the server (each is a tool error)."""
    # httpx logs every API request at INFO: noise in the host's log of this process.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    clients = OneClient(AsyncOMClient(api_url, api_key), api_key)
    build_server(clients, lifespan=clients.lifespan).run("stdio")
