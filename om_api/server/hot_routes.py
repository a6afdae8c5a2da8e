"""The three calls of an agent's turn, served without the framework's per-request layers.

An agent server calls ``GET .../context``, ``POST .../entries`` and ``POST .../flush`` around
every agent turn. Through FastAPI each of them paid for routing over every route, solving six
dependencies (the state, the bearer header, the tenant, the path's ids, the query, the body)
and four more middleware layers: about a third of a millisecond of CPU a request, a fifth of
a turn's cost on one core. This layer sits just inside
:class:`~om_api.server.app.RequestMiddleware` (so request ids, the body limit, metrics, the
access log and traces are the same) and serves those three itself when the request is
well-formed, through the same steps as the routes: the key cache and rate limits
(:func:`~om_api.server.auth.admit_key`), the same request models, the same route functions,
the same answers, the app's own exception handlers for whatever they raise.

Anything it would have to judge differently goes to the framework unchanged, body included:
a missing or unknown key (the framework writes the 401), a path id, query or body that does
not validate (the framework writes the 422), a body that is not JSON, another method. The
routes stay declared there, so the OpenAPI document is the same. A key the cache no longer
holds is read here as the framework would read it (on the event loop for a local store, so
that the requests behind it find it cached, not a thread each).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, get_args
from urllib.parse import parse_qsl

import pydantic
from fastapi import Request
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from om_api.schemas import (
    MAX_CONTEXT_TOKENS,
    PATH_ID_PATTERN,
    SCOPE_ID_PATTERN,
    AppendEntriesRequest,
    FlushRequest,
)
from om_api.schemas.base import parse_json_body, storable_vouched
from om_api.server.auth import MAX_KEY_CHARS, admit_key, bearer_token
from om_api.server.limits import request_class
from om_api.server.logging import bind_log_context
from om_api.server.routes import jobs, memory, sessions
from om_api.server.state import ApiState
from om_core.policy.rate_limit import RequestClass
from om_core.read.context import MIN_CONTEXT_TOKENS
from om_workers.errors import InvalidApiKeyError

_PATH_ID: Final = re.compile(PATH_ID_PATTERN)
_SCOPE_ID: Final = re.compile(SCOPE_ID_PATTERN)
_DIGITS: Final = re.compile(r"[0-9]{1,9}")
_INCLUDES: Final = frozenset(get_args(memory.IncludeMode))

HotCall = Literal["context", "entries", "flush"]
_METHODS: Final[dict[HotCall, str]] = {"context": "GET", "entries": "POST", "flush": "POST"}
_ENDPOINTS: Final[dict[HotCall, Callable[..., Awaitable[Response]]]] = {
    "context": memory.context,
    "entries": sessions.append_entries,
    "flush": jobs.flush,
}


class _NotHot(Exception):
    """The request is not one this layer answers the way the framework would: hand it on."""


def hot_call(scope: Scope) -> tuple[HotCall, str] | None:
    """``(call, session id)`` when ``scope`` is one of the three calls with a valid session
    id in its path, else ``None``."""
    if scope["type"] != "http" or scope.get("root_path"):
        return None
    parts = scope["path"].split("/")
    if len(parts) != 5 or parts[0] or parts[1] != "v1" or parts[2] != "sessions":
        return None
    call, session_id = parts[4], parts[3]
    if call not in _METHODS or _METHODS[call] != scope["method"]:
        return None
    if _PATH_ID.fullmatch(session_id) is None:
        return None
    return call, session_id


def _context_query(query_string: bytes) -> dict[str, Any]:
    """The context route's query arguments; :class:`_NotHot` for anything the route itself
    would refuse or read another way (a repeated or malformed argument)."""
    found: dict[str, Any] = {"scope": None, "include": "self+ancestors", "max_tokens": None}
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    seen: set[str] = set()
    for name, value in pairs:
        if name not in found:
            continue  # the route ignores arguments it does not take
        if name in seen:
            raise _NotHot
        seen.add(name)
        found[name] = _query_value(name, value)
    return found


def _query_value(name: str, value: str) -> str | int:
    if name == "scope" and _SCOPE_ID.fullmatch(value):
        return value
    if name == "include" and value in _INCLUDES:
        return value
    if name == "max_tokens" and _DIGITS.fullmatch(value):
        tokens = int(value)
        if MIN_CONTEXT_TOKENS <= tokens <= MAX_CONTEXT_TOKENS:
            return tokens
    raise _NotHot


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _NotHot  # the client went away: let the framework see it as it would
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _json_body(scope: Scope, body: bytes) -> tuple[Any, bool]:
    """The body as JSON (``None`` for an empty one) and whether it is plainly storable
    (:func:`~om_api.schemas.base.parse_json_body`); :class:`_NotHot` for another content type
    or text that is not JSON (the framework answers those with its own 422)."""
    if not body:
        return None, True
    media = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise _NotHot
    try:
        return parse_json_body(body)
    except (ValueError, RecursionError):  # the framework's 422 (not JSON) or 400 (too deep)
        raise _NotHot from None


def _replayed(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the framework the body this layer already read."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class HotRoutes:
    """Serves the three calls of a turn (see the module's doc); hands anything else to
    ``app``."""

    def __init__(self, app: ASGIApp, *, state: ApiState) -> None:
        self.app = app
        self.state = state
        self.routes: dict[HotCall, APIRoute] = {
            call: _route_of(endpoint) for call, endpoint in _ENDPOINTS.items()
        }
        self.classes: dict[HotCall, RequestClass] = {
            call: request_class(_METHODS[call], route.path) for call, route in self.routes.items()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = hot_call(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        call, session_id = found
        body: bytes | None = None
        self.state.lanes.serving += 1
        try:
            if call != "context":
                body = await _read_body(receive)
            await self._serve(call, session_id, body or b"", scope, receive, send)
        except _NotHot:
            await self.app(scope, receive if body is None else _replayed(body, receive), send)
        finally:
            self.state.lanes.serving -= 1

    async def _serve(
        self,
        call: HotCall,
        session_id: str,
        body: bytes,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        state = self.state
        token = bearer_token(_header(scope, b"authorization"))
        if token is None or len(token) > MAX_KEY_CHARS:
            raise _NotHot  # the framework answers the 401
        scope["route"] = self.routes[call]
        scope["path_params"] = {"session_id": session_id}
        bind_log_context(session_id=session_id)
        try:
            found = state.keys.cached(token) or await _resolved(state, token)
            arguments = self._arguments(call, scope, body)
            tenant_id = await admit_key(scope, state, token, found, self.classes[call])
            response = await _ENDPOINTS[call](state, tenant_id, session_id, **arguments)
        except _NotHot:
            raise
        except Exception as exc:  # answered as the framework would, by the app's own handlers
            response = await _handled(scope, exc)
        await response(scope, receive, send)

    def _arguments(self, call: HotCall, scope: Scope, body: bytes) -> dict[str, Any]:
        if call == "context":
            return _context_query(scope.get("query_string", b""))
        payload, plain = _json_body(scope, body)
        try:
            with storable_vouched(plain):
                if call == "entries":
                    return {"body": AppendEntriesRequest.model_validate(payload)}
                return {"body": None if payload is None else FlushRequest.model_validate(payload)}
        except pydantic.ValidationError:
            raise _NotHot from None


async def _resolved(state: ApiState, token: str) -> tuple[str, str]:
    """``(tenant id, key id)`` of a key the cache does not hold (its entry expired, or it
    is new to this process), read and cached again: on the event loop for a local store (one
    indexed read, and the next request finds it cached), else in the thread pool."""
    try:
        if state.local_store:
            return state.keys.resolve(token)
        return await run_in_threadpool(state.keys.resolve, token)
    except InvalidApiKeyError:
        raise _NotHot from None  # the framework answers the 401


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _route_of(endpoint: Callable[..., Any]) -> APIRoute:
    for router in (memory.router, sessions.router, jobs.router):
        for route in router.routes:
            if isinstance(route, APIRoute) and route.endpoint is endpoint:
                return route
    raise LookupError(f"no route serves {endpoint.__name__}")


async def _handled(scope: Scope, exc: Exception) -> Response:
    """The response the app's exception handlers give ``exc``, as the framework's exception
    layer finds them. A server fault (no handler but the one for ``Exception``) is raised
    again: the framework's outermost layer answers it and hands it to the server to log."""
    handlers = scope["app"].exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        handler = handlers.get(cls)
        if handler is not None:
            answer = handler(Request(scope), exc)
            response: Response = await answer if inspect.isawaitable(answer) else answer
            return response
    raise exc
