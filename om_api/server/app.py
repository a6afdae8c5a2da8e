"""The FastAPI application: :func:`create_app` wires the process's services (store, Redis,
settings: :mod:`om_workers.services`), the publisher, metrics, logging, the body-size limit and
every router.

Run it under uvicorn (``uvicorn --factory om_api.server.app:create_app``); tests inject a store, a
Redis client and a recording ``publish`` callable.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import redis
from fastapi import Depends, FastAPI, HTTPException, Request
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from om_api.schemas import ErrorBody
from om_api.server import console
from om_api.server.errors import install_error_handlers
from om_api.server.hot_routes import HotRoutes
from om_api.server.key_cache import KeyCache
from om_api.server.lanes import Lanes
from om_api.server.limits import ApiRateLimits
from om_api.server.logging import (
    REQUEST_ID_HEADER,
    SecretRegistry,
    bind_log_context,
    configure_logging,
)
from om_api.server.mcp_remote import mount_mcp
from om_api.server.metrics import UNMATCHED_ROUTE, ApiMetrics, TenantLoadCollector
from om_api.server.routes import (
    admin,
    admin_erasure,
    admin_usage,
    admin_webhooks,
    erasure,
    jobs,
    memory,
    ops,
    portability,
    proxy,
    scopes,
    search,
    sessions,
)
from om_api.server.state import ApiState
from om_workers.config import Settings, get_settings
from om_workers.coordination.fairness import FairQueue
from om_workers.coordination.rate_limit import RateLimiter
from om_workers.jobs.deps import PublishJob
from om_workers.jobs.reconcile import PublishErasure
from om_workers.logs import CONTEXT_FIELDS, log_context
from om_workers.services import Services, build_services
from om_workers.store import SqlStore
from om_workers.telemetry import tracing

log = logging.getLogger("om_api")

API_VERSION: Final = "1"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


_REQUEST_PREFIX = secrets.token_hex(8)
_REQUEST_NUMBERS = itertools.count(1)


def _new_request_id() -> str:
    """A request id unique across processes: a random prefix drawn once per process and a
    counter (a ``uuid4`` a request cost a system call for its randomness, several percent of
    the event loop's time under load)."""
    return f"{_REQUEST_PREFIX}{next(_REQUEST_NUMBERS):016x}"


class _BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a streamed body passes the limit.

    An ``HTTPException`` because FastAPI turns any other error raised while it reads a body
    into a 400; this one passes through to the error handlers as a 413. That is also why it
    is the one error outside the :class:`~om_core.errors.ObservationalMemoryError` tree."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds {limit} bytes")


class RequestMiddleware:
    """Outermost layer: request id, body-size limit (413 before parsing), metrics, access log.

    Pure ASGI, so the limit applies to the raw byte stream: a declared ``Content-Length``
    over the limit is refused before reading anything, and a chunked body is cut off as soon
    as it passes the limit.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, metrics: ApiMetrics) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        offered = headers.get(REQUEST_ID_HEADER.lower(), "")
        request_id = offered if _REQUEST_ID.fullmatch(offered) else _new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        bind_log_context(request_id=request_id)
        outcome: dict[str, Any] = {"status": 500, "started": False}

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                outcome["status"] = message["status"]
                outcome["started"] = True
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                ]
            await send(message)

        received = 0

        async def receive_limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge(self.max_body_bytes)
            return message

        method = str(scope.get("method", ""))
        # A server span, continuing the caller's trace when it sent W3C trace context.
        with tracing.continued(
            headers, method, kind=SpanKind.SERVER, attributes={"http.request.method": method}
        ):
            try:
                if self._declared_too_large(headers):
                    await self._too_large(send_wrapped, request_id)
                else:
                    await self.app(scope, receive_limited, send_wrapped)
            except _BodyTooLarge:
                if outcome["started"]:
                    raise
                await self._too_large(send_wrapped, request_id)
            finally:
                self._record(scope, request_id, outcome["status"], time.perf_counter() - started)

    def _declared_too_large(self, headers: dict[str, str]) -> bool:
        declared = headers.get("content-length")
        return declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes

    async def _too_large(self, send: Send, request_id: str) -> None:
        body = ErrorBody(
            error="payload_too_large",
            detail=f"request body exceeds {self.max_body_bytes} bytes",
            request_id=request_id,
        ).model_dump_json(exclude_none=True)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})

    def _record(self, scope: Scope, request_id: str, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or UNMATCHED_ROUTE
        method = str(scope.get("method", ""))
        self.metrics.observe_request(method, template, status, seconds)
        tracing.rename_current(f"{method} {template}")
        tracing.set_attributes({"http.route": template, "http.response.status_code": status})
        log.info(
            "request",
            extra={
                "request_id": request_id,
                "method": method,
                "route": template,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


class _LogContextLayer:
    """Runs each HTTP request in a :func:`~om_workers.logs.log_context` block of its own, where
    the request's ids are bound as they become known (:mod:`om_api.server.logging`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with log_context():
            await self.app(scope, receive, send)


class _Api(FastAPI):
    """FastAPI with the log context block outside every layer, Starlette's server-error layer
    included, so that the layer's line about an unhandled exception names the request too."""

    def build_middleware_stack(self) -> ASGIApp:
        return _LogContextLayer(super().build_middleware_stack())


async def _path_ids_in_log_context(request: Request) -> None:
    """Bind the ids the request's path names (``session_id``, ``job_id``; an admin route's
    ``tenant_id``) to the request's log context. An app-wide dependency, so it runs before
    each route's own: a 401 or a 404 is logged with the session it was about."""
    bind_log_context(
        **{
            name: str(value)
            for name, value in request.path_params.items()
            if name in CONTEXT_FIELDS
        }
    )


def _default_publish_factory() -> PublishJob:
    # Imported lazily: building the Celery app needs OM_REDIS_URL, reads do not.
    from om_workers.celery.app import get_app
    from om_workers.celery.tasks import publisher

    return publisher(get_app())


def _default_erase_publisher() -> PublishErasure:
    from om_workers.celery.app import get_app
    from om_workers.celery.tasks import erase_publisher

    return erase_publisher(get_app())


def create_app(
    settings: Settings | None = None,
    *,
    services: Services | None = None,
    store: SqlStore | None = None,
    redis: redis.Redis | None = None,
    publish: PublishJob | None = None,
    publish_erasure: PublishErasure | None = None,
) -> FastAPI:
    """The API app on ``services``, else on :func:`~om_workers.services.build_services` of
    ``settings`` (default: the ``OM_*`` environment) with ``store``/``redis`` replacing the
    store on ``OM_DATABASE_URL`` (already migrated) and the client on ``OM_REDIS_URL``.
    ``publish`` defaults to the Celery app's publisher behind the fair queue (built on the
    first flush; :meth:`~om_workers.services.Services.publisher`); ``publish_erasure`` to
    the Celery app's ``om.erase`` publisher.

    Raises :class:`~om_workers.errors.ConfigError` when no Redis client is given and
    ``OM_REDIS_URL`` is unset (the embedded stack, ``om up``, starts a private Redis and passes
    its URL) or a URL is unusable, ``pydantic.ValidationError``/``TypeError`` for invalid
    ``OM_SETTINGS_JSON`` (at startup, not at the first request), and ``ValueError`` when
    ``services`` is given together with ``settings``, ``store`` or ``redis``.
    """
    if services is None:
        services = build_services(settings or get_settings(), store=store, redis=redis)
    elif settings is not None or store is not None or redis is not None:
        raise ValueError("pass services= or settings/store/redis, not both")
    resolved = services.settings
    services.memory()  # invalid memory settings fail here, not at the first request
    upstream_key = resolved.proxy.upstream_api_key
    registry = SecretRegistry(
        [
            resolved.api.admin_token,
            resolved.metrics.token,
            *services.secrets,
            upstream_key.get_secret_value() if upstream_key is not None else None,
        ]
    )
    metrics = ApiMetrics()
    metrics.registry.register(
        TenantLoadCollector(FairQueue(services.redis).load, resolved.metrics.top_tenants)
    )
    # The default publisher puts flush jobs through the fair queue across tenants; an injected
    # one (tests) is used as it is.
    publish_factory: Callable[[], PublishJob] = (
        (lambda: publish)
        if publish is not None
        else lambda: services.publisher(_default_publish_factory())
    )
    state = ApiState(
        services=services,
        metrics=metrics,
        registry=registry,
        publish_factory=publish_factory,
        erase_publish_factory=(
            (lambda: publish_erasure) if publish_erasure is not None else _default_erase_publisher
        ),
        limits=ApiRateLimits(resolved, services.accounts, RateLimiter(services.redis), metrics),
        keys=KeyCache(services.accounts, resolved.api.key_cache_s),
        lanes=Lanes(resolved.api.read_threads, resolved.api.write_threads),
    )
    configure_logging(registry, resolved.log_level)
    tracing.configure_tracing("om-api")
    app = _Api(
        title="Observational memory API",
        version=API_VERSION,
        description="Source-backed observations and reflections for long LLM agent sessions. "
        "Every /v1 route except admin takes `Authorization: Bearer <API key>`; the key names "
        "the tenant. Admin routes take the OM_ADMIN_TOKEN.",
        dependencies=[Depends(_path_ids_in_log_context)],
    )
    app.state.om = state
    install_error_handlers(app)
    for router in (
        sessions.router,
        erasure.router,
        jobs.router,
        memory.router,
        scopes.router,
        portability.router,
        search.router,
        proxy.router,
        ops.router,
        admin.router,
        admin_erasure.router,
        admin_usage.router,
        admin_webhooks.router,
    ):
        app.include_router(router)
    if resolved.api.mcp_enabled:
        mount_mcp(app, state)
    console.install(app)
    # Added first, so it runs inside the request layer: the turn's three calls keep its ids,
    # limit, metrics and log line.
    app.add_middleware(HotRoutes, state=state)
    app.add_middleware(
        RequestMiddleware, max_body_bytes=resolved.api.max_body_bytes, metrics=metrics
    )
    return app
