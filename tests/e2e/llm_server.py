"""A real local OpenAI-compatible chat-completions server whose answers come from the offline
extractive provider, with per-session faults chosen by the session id.

Worker processes reach it over HTTP through :class:`~om_workers.providers.OpenAICompatibleProvider`
(``OM_PROVIDER=openai``, ``OM_PROVIDER_BASE_URL=<url>``). The session is read from the request's
``prompt_cache_key`` (``om:<session id>``); a session id containing one of :data:`FAULTS` gets
that fault on every call, any other session a correct answer:

- ``timeout``: no answer for :data:`HANG_S` seconds (the client times out first);
- ``ratelimit`` / ``servererror``: HTTP 429 / 500 whose body echoes the request's
  ``authorization`` header, so a stored error that is not redacted would show the API key;
- ``malformed``: HTTP 200 with a tool call whose arguments are not JSON.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ToolSpec
from om_core.ledger.models import Message

FAULTS = ("timeout", "ratelimit", "servererror", "malformed")
HANG_S = 3.0


def _fault(cache_key: str) -> str | None:
    return next((fault for fault in FAULTS if fault in cache_key), None)


def _as_request(body: dict[str, Any]) -> ProviderRequest:
    """Enough of the wire request for the extractive provider: roles, texts, tool names."""
    messages = tuple(
        Message(
            role=m["role"],
            content=m.get("content") or "",
            tool_call_id=m.get("tool_call_id"),
        )
        for m in body["messages"]
    )
    tools = tuple(
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"].get("parameters", {}),
        )
        for t in body.get("tools", [])
    )
    return ProviderRequest(
        messages=messages, tools=tools, model=body["model"], correlation_id="om:wire"
    )


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    message = ExtractiveProvider().generate(_as_request(body)).message
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for c in message.tool_calls
    ]
    wire: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if calls:
        wire["tool_calls"] = calls
    return {
        "model": body["model"],
        "choices": [{"index": 0, "message": wire, "finish_reason": "stop"}],
        "usage": _usage(body, wire),
    }


def _usage(body: dict[str, Any], answer: dict[str, Any]) -> dict[str, int]:
    """Token counts as a vendor reports them; here a deterministic stand-in (a token per four
    characters of the request's messages and of the answer)."""
    prompt = len(json.dumps(body["messages"])) // 4 + 1
    completion = len(json.dumps(answer)) // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class LlmServer:
    """The server; ``calls`` counts requests per session cache key, ``models`` the models seen."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                key = str(body.get("prompt_cache_key", ""))
                server.calls[key] += 1
                server.models[str(body.get("model"))] += 1
                fault = _fault(key)
                auth = self.headers.get("authorization", "")
                if fault == "timeout":
                    server._stop.wait(HANG_S)
                    return
                if fault in ("ratelimit", "servererror"):
                    status = 429 if fault == "ratelimit" else 500
                    self._send(status, {"error": {"message": f"rejected credentials {auth}"}})
                elif fault == "malformed":
                    call = {"id": "c1", "type": "function"}
                    call["function"] = {"name": "record_observation", "arguments": "{not json"}
                    message = {"role": "assistant", "content": None, "tool_calls": [call]}
                    self._send(200, {"choices": [{"message": message}]})
                else:
                    self._send(200, _answer(body))

            def _send(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def calls_for(self, session: str) -> int:
        return sum(n for key, n in self.calls.items() if session in key)


@contextmanager
def running() -> Iterator[LlmServer]:
    server = LlmServer()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._stop.set()
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(5)
