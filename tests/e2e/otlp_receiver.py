"""A real OTLP/HTTP trace receiver on localhost: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest``, decoded with ``opentelemetry-proto`` into :class:`ReceivedSpan`
records the test reads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.threads import serving


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as exported: ids in hex (``parent_id`` empty for a root)."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    field = value.WhichOneof("value")
    return getattr(value, field) if field in ("string_value", "int_value", "bool_value",
                                              "double_value") else str(value)  # fmt: skip


def _spans(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    service=str(resource.get("service.name", "")),
                    name=span.name,
                    kind=span.kind,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    attributes={a.key: _value(a.value) for a in span.attributes},
                )


class OtlpReceiver:
    """The receiver; :attr:`spans` grows as exports arrive, :attr:`url` is its base URL (what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver.content_types.add(self.headers.get("content-type", ""))
                    receiver.spans.extend(_spans(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """Every span received so far of one trace."""
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@contextmanager
def receiving() -> Iterator[OtlpReceiver]:
    """A running receiver until the block ends."""
    receiver = OtlpReceiver()
    with serving(receiver.httpd):
        yield receiver
