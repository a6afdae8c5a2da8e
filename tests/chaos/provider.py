"""A local OpenAI-compatible chat-completions server whose behaviour the harness switches at
run time (``server.mode = "error_500"``); the workers reach it over HTTP with
``OM_PROVIDER=openai`` and ``OM_PROVIDER_BASE_URL=<url>``.

Correct answers come from the offline extractive provider, through the wire conversion of
:mod:`tests.e2e.llm_server` (imported, not copied). Modes:

- ``ok``: a correct answer after ``delay_s`` (so a flush is in flight long enough to be killed);
- ``error_500`` / ``rate_limit_429``: HTTP 500 / 429 (``Retry-After: 1``) whose error message
  echoes the request's ``authorization`` header, so an unredacted stored error shows the key;
- ``timeout``: no answer for :attr:`ProviderServer.hang_s` seconds (the client times out);
- ``malformed``: HTTP 200 with a tool call whose arguments are not JSON;
- ``echo_key``: HTTP 401 "Incorrect API key provided: <the key>", as some vendors answer.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal, Self, get_args

from tests.e2e.llm_server import _answer
from tests.threads import SHUTDOWN_POLL_S

Mode = Literal["ok", "error_500", "rate_limit_429", "timeout", "malformed", "echo_key"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)


class ProviderServer:
    """The server on ``host`` (127.0.0.1 by default; any port), answering on its own threads.

    ``calls`` counts requests by the mode that answered them; ``in_flight`` is how many are
    being answered now. :meth:`close` releases hanging requests and stops it.
    """

    def __init__(
        self, *, delay_s: float = 0.0, hang_s: float = 15.0, host: str = "127.0.0.1"
    ) -> None:
        self.mode: Mode = "ok"
        self.delay_s = delay_s
        self.hang_s = hang_s
        self.calls: Counter[str] = Counter()
        self.in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.httpd = ThreadingHTTPServer((host, 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            args=(SHUTDOWN_POLL_S,),
            name="chaos-provider",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        self.httpd.server_close()

    def _reply(self, body: dict[str, Any], auth: str) -> tuple[int, dict[str, str], Any] | None:
        """Status, headers and JSON of the answer in the current mode; ``None``: no answer."""
        mode = self.mode
        with self._lock:
            self.calls[mode] += 1
        if mode == "ok":
            if self.delay_s > 0:
                self._stop.wait(self.delay_s)
            return 200, {}, _answer(body)
        if mode == "timeout":
            self._stop.wait(self.hang_s)
            return None
        if mode == "error_500":
            return 500, {}, {"error": {"message": f"upstream failed for credentials {auth}"}}
        if mode == "rate_limit_429":
            error = {"message": f"rate limited: {auth}", "type": "rate_limit"}
            return 429, {"Retry-After": "1"}, {"error": error}
        if mode == "echo_key":
            key = auth.removeprefix("Bearer ").strip()
            error = {"message": f"Incorrect API key provided: {key}", "type": "invalid_api_key"}
            return 401, {}, {"error": error}
        call = {"id": "c1", "type": "function"}
        call["function"] = {"name": "record_observation", "arguments": "{not json"}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return 200, {}, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                with server._lock:
                    server.in_flight += 1
                try:
                    length = int(self.headers.get("content-length", "0"))
                    body = json.loads(self.rfile.read(length))
                    reply = server._reply(body, self.headers.get("authorization", ""))
                    if reply is not None:
                        self._send(*reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker went away (killed, timed out): nothing to answer
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, status: int, headers: dict[str, str], payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
