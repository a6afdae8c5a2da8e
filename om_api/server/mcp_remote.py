"""Remote MCP: the API serves the MCP tools (:mod:`om_api.integrations.mcp_server`) over
streamable HTTP at ``/mcp``, each caller authenticated by its own API key.

One deployment serves every MCP host of every tenant:

- :class:`McpGate` answers a request without a bearer key, or with an unknown, revoked or
  malformed one, with the API's 401 (``WWW-Authenticate: Bearer``, an ``ErrorBody``) before the
  MCP SDK reads it; a key that resolves joins the redaction registry, as on every route.
- Each tool call runs as requests of the calling key against this same app, in-process
  (:class:`CallerClients`: ``httpx.ASGITransport``, no socket). So the routes' own
  authentication, tenancy (another tenant's session is a 404), rate limits (a ``context``
  spends a read, an ``append`` an append, a ``flush`` a flush) and redaction apply unchanged,
  and nothing of MCP has a path to the store of its own.
- The SDK runs stateless with JSON answers: no MCP session lives in a process, so any replica
  answers any request behind a plain load balancer. Its DNS-rebinding guard is off: it
  protects servers that trust whoever reaches them, and this one trusts only keys.

Protocol messages that call no tool (``initialize``, ``tools/list``, pings) are authenticated
but spend no rate limit, like ``/healthz``.

The SDK is imported, built and started on the first authenticated ``/mcp`` request
(:class:`LazySdk`), not with the app: its import is about half a second of an API process's
start, and most processes never serve MCP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import anyio.to_thread
import httpx
from fastapi import FastAPI
from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from om_api.client import AsyncOMClient
from om_api.server.auth import resolve_key
from om_api.server.errors import ApiError, error_response
from om_api.server.logging import bind_log_context
from om_api.server.state import ApiState
from om_core.policy.backoff import RetryPolicy
from om_workers.logs import configure_json_logging

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context, MCPServer

    from om_api.integrations.mcp_server import Caller

MCP_PATH: Final = "/mcp"
INTERNAL_URL: Final = "http://om-api.internal"
"""Base URL of the in-process calls (never resolved: the transport is the app itself)."""
NO_RETRY: Final = RetryPolicy(attempts=1)
"""In-process calls fail at once: a 429 or 503 reaches the host as a tool error with its
reason, instead of holding the caller's request through backoff."""


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credentials of an ``Authorization: Bearer <key>`` header (scheme case-insensitive),
    ``None`` without one: the same reading as the HTTP routes'."""
    scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
    return credentials if scheme.lower() == "bearer" and credentials else None


class CallerClients:
    """A client per tool call, on the calling request's own key, calling ``app`` in-process."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    @asynccontextmanager
    async def open(self, ctx: Context) -> AsyncIterator[Caller]:
        """The caller's client. Raises :class:`ToolError` when the call has no bearer key
        (only a call that bypassed :class:`McpGate` can)."""
        from mcp.server.mcpserver.exceptions import ToolError

        from om_api.integrations.mcp_server import Caller

        key = bearer_token(ctx.headers or {})
        if key is None:
            raise ToolError("unauthorized: no bearer API key")
        transport = httpx.ASGITransport(app=self._app)
        async with AsyncOMClient(INTERNAL_URL, key, retry=NO_RETRY, transport=transport) as client:
            yield Caller(client, (key,))


class McpGate:
    """The ``/mcp`` endpoint: 401 unless the request's bearer key resolves, then the SDK."""

    path: Final = MCP_PATH
    """The route template the access log and the request metrics name this endpoint by."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self._app = app
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # FastAPI names only its own routes in the scope; the request log reads the path here.
        scope["route"] = self
        request = Request(scope, receive)
        token = bearer_token(request.headers)
        try:
            # The key cache may read the store: off the event loop, as the routes' dependency.
            tenant_id, _ = await anyio.to_thread.run_sync(resolve_key, self._state, token)
        except ApiError as exc:
            refusal = error_response(request, exc.status, exc.error, exc.detail)
            await refusal(scope, receive, send)
            return
        bind_log_context(tenant_id=tenant_id)
        await self._app(scope, receive, send)


Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class LazySdk:
    """The SDK's endpoint, built and started on its first request.

    :meth:`running` (entered by the app's lifespan) holds a task group; the first request
    imports and builds the server and starts its session manager in that group, where it runs
    until the lifespan ends. A request outside the lifespan (an app served without one) raises
    :class:`RuntimeError`, a 500."""

    def __init__(self, build: Callable[[], MCPServer[Any]]) -> None:
        self._build = build
        self._group: anyio.abc.TaskGroup | None = None
        self._handle: Handler | None = None
        self._starting: anyio.Lock | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The span in which requests are served: each start of the app gets a new manager
        (a session manager runs once)."""
        async with anyio.create_task_group() as group:
            # Made here, on the loop that serves: an app may be started again on another.
            self._group, self._starting = group, anyio.Lock()
            try:
                yield
            finally:
                self._group, self._handle, self._starting = None, None, None
                group.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handle = self._handle or await self._start()
        await handle(scope, receive, send)

    async def _start(self) -> Handler:
        starting, group = self._starting, self._group
        if starting is None or group is None:
            raise RuntimeError("/mcp was called outside the app's lifespan")
        async with starting:
            if self._handle is None:
                # The import and build take a while: off the event loop.
                server = await anyio.to_thread.run_sync(self._build)
                await group.start(self._serve, server)
                self._handle = server.session_manager.handle_request
            return self._handle

    @staticmethod
    async def _serve(server: MCPServer[Any], *, task_status: anyio.abc.TaskStatus[None]) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        async with server.session_manager.run():
            task_status.started()
            await anyio.sleep_forever()


def mount_mcp(app: FastAPI, state: ApiState) -> None:
    """Serve the MCP tools at :data:`MCP_PATH` of ``app``; the SDK is built on the first
    request (:class:`LazySdk`) and runs in ``app``'s lifespan (around the lifespan it had)."""

    def build() -> MCPServer[Any]:
        from om_api.integrations.mcp_server import build_server

        # The SDK's build calls logging.basicConfig, which does nothing here: the app's
        # logging gave the root logger its redacting handler (configure_logging).
        server = build_server(CallerClients(app))
        # The SDK's own warnings (a crashed request) as the API's redacted JSON lines; its
        # INFO lines (every stateless request's start and end) are noise in the API's log.
        configure_json_logging(("mcp",), "WARNING", state.registry.values)
        return server

    sdk = LazySdk(build)
    # POST only: stateless, the server has nothing to stream on a GET and no session a
    # DELETE could end; a GET would hold a connection open for nothing.
    gate = McpGate(sdk, state)
    app.router.routes.append(Route(MCP_PATH, gate, methods=["POST"], include_in_schema=False))
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with sdk.running(), outer(served) as inner:
            yield inner

    app.router.lifespan_context = lifespan
