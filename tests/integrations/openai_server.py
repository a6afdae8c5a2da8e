"""A real local OpenAI-compatible Chat Completions server for the adapters' tests.

It listens on ``127.0.0.1`` (a free port), answers ``POST /v1/chat/completions`` (plain and
``stream: true``) with whatever a reply function returns, and records every request body it
received, so a test can assert on exactly what an agent framework sent over the wire::

    with ChatServer(lambda request: "Noted.") as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
        ...
        assert server.requests[-1].body["messages"][0]["role"] == "system"

A reply function gets the request body (a dict) and returns the assistant's text, or a whole
assistant message (``{"content": ..., "tool_calls": [...]}``) to script tool calls. An
exception it raises becomes a 500, so a bad script fails the framework's call loudly; a
:class:`UpstreamFailure` it raises is answered with its own status and body (an upstream
error to pass through). ``stream_pieces`` splits a streamed answer's text into that many
deltas (one by default).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from tests.threads import SHUTDOWN_POLL_S

Reply = Callable[[dict[str, Any]], "str | dict[str, Any]"]


class UpstreamFailure(Exception):
    """Raised by a reply function: the server answers ``status`` with ``body`` (JSON)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received: its path and its JSON body."""

    path: str
    body: dict[str, Any]

    def messages_text(self) -> str:
        """Every message of the request as JSON, to look for a fact anywhere in it."""
        return json.dumps(self.body.get("messages", []), ensure_ascii=False)


def last_user_text(request: dict[str, Any]) -> str:
    """The text of the request's last user message ("" when it has none)."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content") or ""
            if isinstance(content, str):
                return content
            return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ChatServer:
    """The server; a context manager that starts it on entry and stops it on exit.

    ``base_url`` ends in ``/v1`` (what OpenAI clients expect); ``requests`` lists every
    request received, oldest first.
    """

    def __init__(self, reply: Reply, model: str = "test-model", stream_pieces: int = 1) -> None:
        self.reply = reply
        self.model = model
        self.stream_pieces = stream_pieces
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True
        )
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for a request: the reply function's, in wire form."""
        reply = self.reply(body)
        message: dict[str, Any] = {"content": reply} if isinstance(reply, str) else dict(reply)
        message.setdefault("content", None)
        message["role"] = "assistant"
        return message

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output clean

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(RecordedRequest(self.path, body))
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    message = server.answer(body)
                except UpstreamFailure as failure:
                    self._json(failure.status, failure.body)
                    return
                except Exception as exc:  # the script's fault: fail the caller loudly
                    self._json(500, {"error": {"message": f"reply failed: {exc!r}"}})
                    return
                if body.get("stream"):
                    self._stream(message)
                else:
                    self._json(200, server._completion(message))

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any]) -> None:
                # The whole answer in one delta, then the finish chunk: what clients parse.
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                delta = dict(message)
                if "tool_calls" in delta:
                    delta["tool_calls"] = [
                        {"index": i, **call} for i, call in enumerate(delta["tool_calls"])
                    ]
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                choices: list[dict[str, Any]] = [
                    *({"delta": piece} for piece in server._pieces(delta)),
                    {"delta": {}, "finish_reason": finish},
                ]
                for choice in choices:
                    chunk = server._chunk({"index": 0, "finish_reason": None, **choice})
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler

    def _pieces(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        # The text cut in stream_pieces deltas; tool calls ride on the first one.
        text = delta.get("content") or ""
        size = max(1, -(-len(text) // self.stream_pieces))
        cuts = [text[i : i + size] for i in range(0, len(text), size)] or [text]
        first = {**delta, "content": cuts[0]} if text else delta
        return [first, *({"content": cut} for cut in cuts[1:])]

    def _completion(self, message: dict[str, Any]) -> dict[str, Any]:
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
        }
