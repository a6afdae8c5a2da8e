"""A real webhook receiver for the tests: an HTTP server on 127.0.0.1 (an OS-chosen port) in a
thread, verifying every request with the ``standardwebhooks`` package, as a user's receiver
does. While ``down`` it answers 503 to everything (an outage)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.threads import serving


@dataclass
class Received:
    """One request as it arrived: its headers and raw body."""

    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """What the receiver saw: ``accepted`` (webhook-id -> verified body, the first time),
    ``answered_ok`` (2xx answers per id), ``refused`` (503s per id while down), ``forged``
    (requests that failed verification) and every raw request (``raw``)."""

    secret: str
    url: str = ""
    down: bool = False
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)
    answered_ok: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    forged: int = 0
    raw: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            self.raw.append(Received(headers, body))
            message_id = headers.get("webhook-id", "")
            if self.down:
                self.refused[message_id] += 1
                return 503
            try:
                payload = Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError:
                self.forged += 1
                return 400
            self.accepted.setdefault(message_id, payload)
            self.answered_ok[message_id] += 1
            return 204

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.accepted.values() if p["type"] == event_type]


@contextmanager
def serve_receiver(secret: str) -> Iterator[Receiver]:
    """Run a :class:`Receiver` until the block ends."""
    receiver = Receiver(secret)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = receiver.handle(headers, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/om"
    with serving(server, name="webhook-receiver"):
        yield receiver


def body_of(received: Received) -> dict[str, Any]:
    """A request's JSON body."""
    parsed: dict[str, Any] = json.loads(received.body)
    return parsed
