"""``POST /v1/proxy/chat/completions``: an OpenAI-compatible endpoint in front of the model
server of ``OM_PROXY_UPSTREAM_URL``. A client changes its ``base_url`` and sends its whole
conversation as always; the session (header ``X-OM-Session``, created on first use) stands in
for what it already holds (:mod:`om_api.server.proxy.turns`), the upstream's answer comes back
as it was sent (SSE chunk by chunk when ``stream``), and the turn is recorded and flushed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Annotated, Any

import anyio
import httpx
from fastapi import APIRouter, FastAPI, Header, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from om_api.schemas import PATH_ID_PATTERN
from om_api.server.auth import TenantId
from om_api.server.errors import ApiError
from om_api.server.proxy.answer import AnswerBuilder, answer_message
from om_api.server.proxy.turns import Prepared, prepare, record_turn, request_turn_flush
from om_api.server.proxy.upstream import Upstream, unreachable
from om_api.server.proxy.wire import ProxyInputError, ReadMessages, read_messages
from om_api.server.routes import error_answers
from om_api.server.state import ApiState, State
from om_core.ledger.models import Message

log = logging.getLogger(__name__)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    upstream: Upstream | None = getattr(app.state, "om_proxy_upstream", None)
    if upstream is not None:
        await upstream.aclose()


router = APIRouter(prefix="/v1/proxy", tags=["proxy"], lifespan=_lifespan)
ERRORS = error_answers(401, 404, 413, 422, 502, 504)
SESSION_HEADER = "X-OM-Session"
RECORDED_HEADER = "X-OM-Recorded"
_PASSED_HEADERS = ("content-type", "cache-control", "retry-after")

SessionHeader = Annotated[
    str,
    Header(
        alias=SESSION_HEADER,
        pattern=PATH_ID_PATTERN,
        description="The session the conversation belongs to; created on first use.",
    ),
]


def _upstream(app: FastAPI, state: ApiState) -> Upstream:
    # One upstream (and its connection pool) per app, made on the first proxied request.
    upstream: Upstream | None = getattr(app.state, "om_proxy_upstream", None)
    if upstream is None:
        upstream = Upstream.from_settings(state.settings.proxy)
        app.state.om_proxy_upstream = upstream
    return upstream


async def _body(request: Request, state: ApiState) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise ApiError(422, "invalid_input", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_input", "the body is not a JSON object")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise ApiError(422, "invalid_input", "model: a model name is required")
    if not isinstance(messages, list) or not messages:
        raise ApiError(422, "invalid_input", "messages: a non-empty list is required")
    cap = state.settings.proxy.max_messages
    if len(messages) > cap:
        raise ApiError(
            422,
            "invalid_input",
            f"messages: {len(messages)} messages, more than {cap} (OM_PROXY_MAX_MESSAGES)",
        )
    if "stream" in body and not isinstance(body["stream"], bool):
        raise ApiError(422, "invalid_input", "stream: true or false")
    return body


@router.post("/chat/completions", responses=ERRORS)
async def chat_completions(
    request: Request, state: State, tenant_id: TenantId, session_id: SessionHeader
) -> Response:
    """An OpenAI chat-completions request, forwarded to ``OM_PROXY_UPSTREAM_URL`` with the
    messages the session holds replaced by its context blocks (memory, then the recent exact
    messages); the model and every other field pass through.

    The answer is the upstream's, status, body and content type as it sent them (SSE chunk by
    chunk when ``stream`` is true); an upstream error is not recorded. After a successful
    answer the new messages and the answer (tool calls included) are appended, idempotently
    (a retried request appends nothing twice), and a flush is requested. A non-streamed
    answer says in ``X-OM-Recorded`` (``true``/``false``) whether the turn was recorded; an
    unrecorded turn is recorded by the next request that carries it. 422 for a body that is
    not a chat-completions request or a missing/malformed ``X-OM-Session``, 502 when the
    upstream cannot be reached, 504 when it does not answer within ``OM_PROXY_TIMEOUT_S``,
    404 when no upstream is configured (the proxy is not served here).
    """
    upstream = _upstream(request.app, state)
    body = await _body(request, state)
    try:
        read = read_messages(body["messages"], tenant_id, session_id)
    except ProxyInputError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None
    prepared = await run_in_threadpool(prepare, state, tenant_id, session_id, read)
    answer = await upstream.open({**body, "messages": prepared.messages})
    turn = _Turn(state, tenant_id, session_id, read, prepared, upstream)
    if answer.status_code >= 400 or not body.get("stream"):
        return await turn.whole(answer)
    return StreamingResponse(
        turn.stream(answer), status_code=answer.status_code, headers=_headers(answer)
    )


def _headers(answer: httpx.Response) -> dict[str, str]:
    return {name: answer.headers[name] for name in _PASSED_HEADERS if name in answer.headers}


class _Turn:
    """One proxied turn after its request went upstream: the answer back, the turn recorded."""

    def __init__(
        self,
        state: ApiState,
        tenant_id: str,
        session_id: str,
        read: ReadMessages,
        prepared: Prepared,
        upstream: Upstream,
    ) -> None:
        self.state, self.tenant_id, self.session_id = state, tenant_id, session_id
        self.read, self.prepared, self.upstream = read, prepared, upstream

    def _redact(self, data: bytes) -> bytes:
        # The upstream's key is ours to hide, whatever the upstream echoes (an error naming
        # the key it was given, say).
        key = self.upstream.api_key
        return data.replace(key.encode(), b"[REDACTED]") if key else data

    async def whole(self, answer: httpx.Response) -> Response:
        """The upstream's answer read whole; on success the turn is recorded first."""
        try:
            data = await answer.aread()
        except httpx.HTTPError as exc:
            raise unreachable(exc) from None
        finally:
            await answer.aclose()
        headers = _headers(answer)
        flush: BackgroundTask | None = None
        if answer.status_code < 400:
            try:
                message = answer_message(json.loads(data))
            except ValueError:
                message = None
            recorded = await self._record(message, flush=False)
            headers[RECORDED_HEADER] = "true" if recorded else "false"
            if recorded:
                # The flush request (a job row, Redis, a publish) waits until the answer is out.
                flush = BackgroundTask(
                    request_turn_flush, self.state, self.tenant_id, self.session_id
                )
        return Response(
            self._redact(data), status_code=answer.status_code, headers=headers, background=flush
        )

    async def stream(self, answer: httpx.Response) -> AsyncIterator[bytes]:
        """The upstream's chunks as they arrive. The turn is recorded once the stream ended
        (at ``data: [DONE]``, before that chunk goes out, or when the upstream closes without
        one), shielded from the client hanging up: SDKs close the connection as soon as they
        read ``[DONE]``."""
        builder = AnswerBuilder()
        recorded = False
        try:
            async for chunk in answer.aiter_bytes():
                builder.feed(chunk)
                if builder.done and not recorded:
                    recorded = await self._record_shielded(builder)
                yield self._redact(chunk)
        except httpx.HTTPError as exc:
            # The status line is sent: the client sees the stream end without [DONE].
            log.warning("proxy stream of %s broke off: %s", self.session_id, type(exc).__name__)
            return
        finally:
            await answer.aclose()
        if not recorded:
            await self._record_shielded(builder)

    async def _record_shielded(self, builder: AnswerBuilder) -> bool:
        with anyio.CancelScope(shield=True):
            await self._record(builder.message())
        return True

    async def _record(self, message: Message | None, *, flush: bool = True) -> bool:
        return await run_in_threadpool(
            partial(record_turn, flush=flush),
            self.state,
            self.tenant_id,
            self.session_id,
            self.read,
            self.prepared.held,
            message,
        )
