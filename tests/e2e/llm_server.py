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

Every correct answer reports ``usage`` (``prompt_tokens``, ``completion_tokens``) the way
OpenAI does, figures that differ per request; ``usage`` sums what the server reported per
session cache key, the truth usage accounting is checked against.
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
from tests.threads import serving

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


def _usage(body: dict[str, Any], calls: int) -> dict[str, int]:
    """Figures that follow the request (so a miscount shows): a quarter of the prompt's
    characters, and a few tokens per tool call answered."""
    chars = sum(len(str(m.get("content") or "")) for m in body["messages"])
    return {"prompt_tokens": chars // 4 + 11, "completion_tokens": 7 + 13 * calls}


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
    choice = {"index": 0, "message": wire, "finish_reason": "stop"}
    return {"model": body["model"], "choices": [choice], "usage": _usage(body, len(calls))}


class LlmServer:
    """The server; ``calls`` counts requests per session cache key, ``models`` the models seen."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.usage: dict[str, tuple[int, int]] = {}
        self._usage_lock = threading.Lock()
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
                    answer = _answer(body)
                    server.count_usage(key, answer["usage"])
                    self._send(200, answer)

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

    def count_usage(self, key: str, usage: dict[str, int]) -> None:
        with self._usage_lock:
            used_in, used_out = self.usage.get(key, (0, 0))
            self.usage[key] = (
                used_in + usage["prompt_tokens"],
                used_out + usage["completion_tokens"],
            )

    def usage_for(self, session: str) -> tuple[int, int]:
        """Input and output tokens reported to the session's calls (cache key ``om:<id>``)."""
        with self._usage_lock:
            return self.usage.get(f"om:{session}", (0, 0))

    def calls_for(self, session: str) -> int:
        return sum(n for key, n in self.calls.items() if session in key)


@contextmanager
def running() -> Iterator[LlmServer]:
    server = LlmServer()
    with serving(server.httpd):
        try:
            yield server
        finally:
            server._stop.set()
