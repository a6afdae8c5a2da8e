"""A real OpenAI-compatible ``POST /embeddings`` server on 127.0.0.1 for tests: it answers a
bag-of-words vector per input (each word hashed to one of :data:`DIMENSION` slots, so texts
sharing words are near), records every input and ``Authorization`` header, and answers 500
while ``failing`` is set."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.threads import serving

DIMENSION = 64


def bag_of_words(text: str) -> list[float]:
    """The server's vector of ``text`` (not normalised: the adapter normalises)."""
    vector = [0.0] * DIMENSION
    for word in text.lower().split():
        slot = int(hashlib.sha256(word.strip(".,!?").encode()).hexdigest(), 16) % DIMENSION
        vector[slot] += 1.0
    vector[0] += 0.01  # never all zero
    return vector


class EmbeddingsServer:
    """The server: ``inputs`` every text asked for, ``auth`` every Authorization header."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.auth: list[str] = []
        self.failing = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                server.auth.append(self.headers.get("authorization", ""))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                server.inputs.extend(texts)
                if server.failing or self.path != "/v1/embeddings":
                    self._send(500 if server.failing else 404, {"error": {"message": "no"}})
                    return
                data = [
                    {"object": "embedding", "index": n, "embedding": bag_of_words(t)}
                    for n, t in enumerate(texts)
                ]
                self._send(200, {"object": "list", "data": data, "model": body["model"]})

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@contextmanager
def running() -> Iterator[EmbeddingsServer]:
    server = EmbeddingsServer()
    with serving(server.httpd):
        yield server
