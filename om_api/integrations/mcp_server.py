"""The MCP server of observational memory (``om mcp``): the service as Model Context Protocol
tools for MCP hosts (Claude Desktop, IDEs, agent runtimes).

It is a thin layer over :class:`~om_api.client.OMClient`: every tool is one or two API calls,
made with the one API key the server was started with, so the host sees exactly that tenant's
sessions and nothing else. Tools: ``context``, ``recall``, ``search``, ``entries``,
``append``, ``flush`` and ``status``. A failed API call becomes an MCP tool error
(``isError``) with a one-line reason the model can act on; the API key is scrubbed from it
and no traceback leaves the server.

Transports: stdio (the host spawns ``om mcp``) and streamable HTTP (``om mcp --transport http``,
served at ``http://<host>:<port>/mcp``). Needs the ``mcp`` extra:
``pip install '.[mcp]'`` in a checkout, ``pip install 'observational-memory-service[mcp]'``
from the package index. See ``docs/mcp.md``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Annotated, Final, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from om_api.client import (
    Conflict,
    InvalidRequest,
    JobTimeout,
    NotFound,
    OMClient,
    OMClientError,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)
from om_api.schemas import (
    ENTRY_ID_PATTERN,
    MAX_BATCH_ENTRIES,
    MAX_CONTEXT_TOKENS,
    MEMORY_ID_PATTERN,
    AppendEntriesResponse,
    ContentOut,
    EntryIn,
    EntryOut,
    JobOut,
    MessageOut,
    MessageWire,
    RecallOut,
    RequestModel,
    Role,
    StatusOut,
)
from om_core.read.context import MIN_CONTEXT_TOKENS
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT

Transport = Literal["stdio", "http"]
DEFAULT_HTTP_PORT: Final = 8765
HTTP_PATH: Final = "/mcp"
SERVER_NAME: Final = "observational-memory"
INSTRUCTIONS: Final = (
    "Long-term memory of agent sessions. Call `context` before answering to read the session's "
    "memory (observations and reflections, each tagged with an id like [om:0123456789ab]) and "
    "its recent messages. Call `recall` with such an id to read the exact messages a memory "
    "rests on before relying on a detail; `search` finds past messages and memory by words. "
    "`append` records new messages, `flush` turns them "
    "into memory, `entries` pages through the raw history and `status` shows memory counts."
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

# Ordered: a subclass (PayloadTooLarge) must come before its base (InvalidRequest).
_LABELS: Final[Sequence[tuple[type[OMClientError], str]]] = (
    (Unauthorized, "unauthorized (check OM_API_KEY / --key)"),
    (NotFound, "not found"),
    (Conflict, "conflict"),
    (PayloadTooLarge, "too large, send fewer or smaller messages"),
    (InvalidRequest, "invalid request"),
    (Unavailable, "the om API is unavailable, try again later"),
)


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


def describe_error(exc: OMClientError, secrets: Iterable[str] = ()) -> str:
    """One line for an API failure: what kind, the API's reason and its request id, with every
    non-empty string of ``secrets`` (the API key) replaced by ``[redacted]``."""
    label = next((text for kind, text in _LABELS if isinstance(exc, kind)), "om API error")
    line = f"{label}: {exc.detail or exc}"
    if exc.request_id:
        line += f" (request id {exc.request_id})"
    for secret in secrets:
        if secret:
            line = line.replace(secret, "[redacted]")
    return " ".join(line.split())


def _content_text(content: ContentOut) -> str:
    if isinstance(content, str):
        return content
    return " ".join(part.text if part.text is not None else f"[{part.type}]" for part in content)


def _message_line(message: MessageOut) -> str:
    who = f"{message.role} {message.tool_name}" if message.tool_name else message.role
    parts = [_content_text(message.content)]
    parts += [f"[calls {c.name}({json.dumps(c.arguments)})]" for c in message.tool_calls]
    return f"{who}: {' '.join(part for part in parts if part)}"


def _entry_line(entry: EntryOut) -> str:
    if entry.message is not None:
        return f"[{entry.id}] {_message_line(entry.message)}"
    if entry.summary is not None:
        return f"[{entry.id}] {entry.kind}: {entry.summary}"
    return f"[{entry.id}] {entry.kind}: {json.dumps(entry.data or {})}"


def _recall_text(found: RecallOut) -> str:
    prefix = "reflection:" if found.kind == "reflection" else "om:"
    lines = [f"{found.kind} {prefix}{found.id}: {found.text}"]
    if found.dropped:
        lines.append("(dropped from active memory; its sources are still recorded)")
    lines += ["", f"Source messages ({len(found.sources)}):"]
    lines += [_entry_line(entry) for entry in found.sources]
    if found.missing_source_entry_ids:
        lines.append(f"Not on the current branch: {', '.join(found.missing_source_entry_ids)}")
    if found.supporting_observations:
        lines += ["", "Supporting observations:"]
        lines += [f"- [om:{o.id}] {o.text}" for o in found.supporting_observations]
    return "\n".join(lines)


_MEMORY_PREFIX: Final = {"observation": "om:", "reflection": "reflection:"}


class _Tools:
    """The tool functions: their names, docstrings and parameters are what the model reads."""

    def __init__(self, client: OMClient, secrets: Sequence[str]) -> None:
        self._client = client
        self._secrets = secrets

    @contextmanager
    def _api_errors(self) -> Iterator[None]:
        # ``from None``: the model gets the one-line reason, the log no client traceback.
        try:
            yield
        except OMClientError as exc:
            raise ToolError(describe_error(exc, self._secrets)) from None

    def context(
        self,
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
        with self._api_errors():
            result = self._client.context(session_id, max_tokens=max_tokens)
        texts = {block.id: block.text for block in result.blocks}
        memory, recent = texts.get("observational-memory", ""), texts.get("recent-messages", "")
        if not (memory or recent):
            return f"Session {session_id} has no messages yet."
        recent_part = f"# Recent messages\n{recent}" if recent else ""
        return "\n\n".join(part for part in (memory, recent_part) if part)

    def recall(self, session_id: SessionId, memory_id: MemoryId) -> str:
        """Show what one memory item rests on: its text and the exact source messages it was
        made from (for a reflection, also the observations it summarises). Use it to check a
        detail before relying on it. Fails for an id the session does not have."""
        with self._api_errors():
            found = self._client.recall(session_id, memory_id)
        if found.reason == "revoked":
            raise ToolError(f"memory {memory_id} was revoked: its source messages were withdrawn")
        if not found.found:
            raise ToolError(f"no memory {memory_id} in session {session_id}")
        return _recall_text(found)

    def search(
        self,
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
    ) -> str:
        """Find past messages and memory by words, best first: each hit names its session and
        its id (a message id, or an om:/reflection: memory id to pass to recall for the exact
        sources) with a snippet, matches in «». Use it when the context does not hold a detail
        the user refers to."""
        with self._api_errors():
            page = self._client.search(query, session_id=session_id, limit=limit)
        if not page.hits:
            return f"No hits for {query!r}."
        lines: list[str] = []
        for hit in page.hits:
            ref = hit.id if hit.kind == "message" else f"{_MEMORY_PREFIX[hit.kind]}{hit.id}"
            lines.append(f"[{ref}] {hit.kind} in session {hit.session_id}: {hit.snippet}")
        return "\n".join(lines)

    def entries(
        self,
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
        with self._api_errors():
            page = self._client.entries(session_id, after=after, limit=limit)
        lines = [_entry_line(entry) for entry in page.entries] or ["(no entries)"]
        if page.next_cursor is None:
            lines.append("(end of the history)")
        else:
            lines.append(f"next cursor: {page.next_cursor} (pass it as `after` for more)")
        return "\n".join(lines)

    def append(
        self,
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
        with self._api_errors():
            try:
                return self._client.append(session_id, entries)
            except NotFound:
                self._create_session(session_id)
                return self._client.append(session_id, entries)

    def _create_session(self, session_id: str) -> None:
        # A Conflict means another caller created it meanwhile: the append can go ahead.
        with suppress(Conflict):
            self._client.create_session(session_id)

    def flush(
        self,
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
        with self._api_errors():
            accepted = self._client.flush(session_id, force=force)
            if not wait:
                return self._client.job(accepted.job_id)
            try:
                return self._client.wait_for_job(accepted.job_id, timeout_s=wait_seconds)
            except JobTimeout as exc:
                return exc.job

    def status(self, session_id: SessionId) -> StatusOut:
        """Memory counts of a session: observations and reflections recorded, active and
        visible, pool tokens, whether a flush is in flight and the last error."""
        with self._api_errors():
            return self._client.status(session_id)


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def build_server(client: OMClient, *, secrets: Sequence[str] = ()) -> MCPServer:
    """The MCP server with the seven tools, calling the API through ``client`` (which the caller
    keeps open while the server runs, and closes). ``secrets`` (the client's API key) are
    scrubbed from every error message."""
    server: MCPServer = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)
    tools = _Tools(client, tuple(secrets))
    # Text tools return prose for the model; the others a wire model (JSON plus its schema).
    registrations: Sequence[tuple[Callable[..., object], ToolAnnotations, bool | None]] = (
        (tools.context, _READ_ONLY, False),
        (tools.recall, _READ_ONLY, False),
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


def run(
    transport: Transport = "stdio",
    *,
    api_url: str,
    api_key: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_HTTP_PORT,
) -> None:
    """Serve until stopped: over stdin/stdout (``stdio``) or streamable HTTP at
    ``http://<host>:<port>/mcp`` (``http``), for the tenant of ``api_key`` at ``api_url``.

    Over HTTP the server does not authenticate its callers: whoever reaches the port acts with
    ``api_key``, so keep it on 127.0.0.1 (the default, which also turns on the SDK's DNS
    rebinding protection) or behind an authenticating proxy. A port that cannot be bound is
    logged by uvicorn, which exits with code 1; API failures never stop the server (each is a
    tool error).
    """
    # httpx logs every API request at INFO: noise in the host's log of this process.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    with OMClient(api_url, api_key) as client:
        server = build_server(client, secrets=(api_key,))
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port, streamable_http_path=HTTP_PATH)
