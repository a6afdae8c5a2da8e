"""A real local HTTP server (127.0.0.1, port 0, own thread) answering from a script.

Each script item is a :class:`Reply`. The server records every request (path, headers, JSON
body) so tests can check what went on the wire.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.threads import serving


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    hang: bool = False


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Recorded] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                data = self.rfile.read(length)
                server.requests.append(
                    Recorded(
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=json.loads(data) if data else None,
                    )
                )
                reply = server.script.pop(0) if server.script else Reply(status=599)
                if reply.hang:
                    server.release.wait(5)
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)


@contextmanager
def running() -> Iterator[WireServer]:
    server = WireServer()
    with serving(server.httpd):
        try:
            yield server
        finally:
            server.release.set()
