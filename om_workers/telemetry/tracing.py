"""Distributed traces over OpenTelemetry, off unless the standard ``OTEL_*`` environment asks.

Tracing is on in a process when :func:`configure_tracing` ran there and ``OTEL_TRACES_EXPORTER``
is ``otlp`` or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and neither ``OTEL_SDK_DISABLED=true`` nor
``OTEL_TRACES_EXPORTER=none`` says otherwise. The SDK reads every other variable itself
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_SCHEDULE_DELAY``, the exporter's headers and timeout ...); spans leave over
OTLP/HTTP (protobuf) from a batch processor.

Off, every helper here is a check of one module variable: no SDK is imported, no span object
is made. The tracer is this module's own, not OpenTelemetry's global one, so a library that
sets the global provider never changes where our spans go.

What spans carry: ids (tenant, session, job), route templates, models, token counts, outcomes;
never message text, prompts, answers, API keys or any other secret.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger(__name__)

Attributes = Mapping[str, str | int | float | bool]
PROPAGATION_HEADERS: Final = ("traceparent", "tracestate")
"""The W3C trace-context headers carried in a Celery message's headers."""


@dataclass(frozen=True)
class _Tracing:
    tracer: trace.Tracer
    provider: Any  # opentelemetry.sdk.trace.TracerProvider (imported only when tracing is on)
    pid: int


_STATE: _Tracing | None = None
_LOCK = threading.Lock()


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: the process's) asks for OTLP traces (module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    if "none" in exporters:
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return "otlp" in exporters or bool(endpoint)


def configure_tracing(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on in this process when the environment asks (module docstring); returns
    whether it is on. ``service_name`` is the default of ``OTEL_SERVICE_NAME``. Idempotent in
    a process; a forked child configures its own. Raises ``ValueError`` for ``OTEL_*`` values
    the SDK refuses (a malformed endpoint or sampler), at start-up rather than on the first
    span."""
    global _STATE
    env = os.environ if environ is None else environ
    with _LOCK:
        if _STATE is not None and _STATE.pid == os.getpid():
            return True
        if not tracing_requested(env):
            _STATE = None
            return False
        # Imported here: a process with tracing off never loads the SDK.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": service_name})
        provider = TracerProvider(resource=resource, shutdown_on_exit=True)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _STATE = _Tracing(provider.get_tracer("om"), provider, os.getpid())
    log.info("tracing on: spans exported over OTLP/HTTP")
    return True


def shutdown_tracing() -> None:
    """Export the spans still buffered and turn tracing off (a worker process ending: its
    batch processor's thread would not get another chance). Safe when tracing is off."""
    global _STATE
    with _LOCK:
        state, _STATE = _STATE, None
    if state is not None and state.pid == os.getpid():
        state.provider.shutdown()


def enabled() -> bool:
    """Whether this process records spans."""
    return _STATE is not None


def span(
    name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes | None = None
) -> AbstractContextManager[None]:
    """A block timed as a span named ``name``, a child of the current one; an exception
    leaving the block marks it failed (its type only: exception messages can hold text).
    Nothing at all when tracing is off."""
    if _STATE is None:
        return nullcontext()
    return _span(_STATE.tracer, name, kind, attributes, None)


def continued(
    carrier: Mapping[str, str],
    name: str,
    *,
    kind: SpanKind = SpanKind.CONSUMER,
    attributes: Attributes | None = None,
) -> AbstractContextManager[None]:
    """Like :func:`span`, but the child of the trace context in ``carrier`` (W3C headers of an
    incoming request or message; a new trace when it holds none)."""
    if _STATE is None:
        return nullcontext()
    return _span(_STATE.tracer, name, kind, attributes, propagate.extract(dict(carrier)))


def detached() -> AbstractContextManager[None]:
    """A block outside the current trace: work done on behalf of another request (a job the
    fair queue admits when someone else's job finishes) does not join this one's trace."""
    if _STATE is None:
        return nullcontext()
    return _attached(otel_context.Context())


def inject_headers() -> dict[str, str]:
    """The current span's W3C trace-context headers (empty when off or outside a span)."""
    if _STATE is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in PROPAGATION_HEADERS}


def set_attributes(attributes: Attributes) -> None:
    """Add ``attributes`` to the current span (nothing when off or outside a span)."""
    if _STATE is not None and attributes:
        trace.get_current_span().set_attributes(dict(attributes))


def rename_current(name: str) -> None:
    """Rename the current span (a server span learns its route template after routing)."""
    if _STATE is not None:
        trace.get_current_span().update_name(name)


def current_ids() -> tuple[str, str] | None:
    """The current span's trace id and span id in hex, for log lines; ``None`` when off or
    outside a span."""
    if _STATE is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


@contextmanager
def _attached(context: otel_context.Context) -> Iterator[None]:
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def _span(
    tracer: trace.Tracer,
    name: str,
    kind: SpanKind,
    attributes: Attributes | None,
    parent: otel_context.Context | None,
) -> Iterator[None]:
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=dict(attributes) if attributes else None,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR))
            current.set_attribute("error.type", type(exc).__qualname__)
            raise


__all__ = [
    "PROPAGATION_HEADERS",
    "configure_tracing",
    "continued",
    "current_ids",
    "detached",
    "enabled",
    "inject_headers",
    "rename_current",
    "set_attributes",
    "shutdown_tracing",
    "span",
    "tracing_requested",
]
