"""The upstream's answer as the assistant message the proxy records: read from a whole
chat-completions answer, or assembled from a stream's deltas (text and tool calls) as the
chunks pass through."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from om_api.server.proxy.wire import tool_arguments
from om_core.ledger.models import Message, ToolCall


def answer_message(body: Any) -> Message | None:
    """The first choice's assistant message of a chat-completions answer; ``None`` when the
    answer has none (nothing to record)."""
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    builder = AnswerBuilder()
    builder.add_delta(message, whole=True)
    return builder.message()


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class AnswerBuilder:
    """Assembles the first choice's message from the ``data:`` lines of an SSE stream, fed
    in whatever pieces the bytes arrive in."""

    _text: list[str] = field(default_factory=list)
    _calls: dict[int, _CallParts] = field(default_factory=dict)
    _pending: bytes = b""
    done: bool = False

    def feed(self, chunk: bytes) -> None:
        """Read the complete lines of ``chunk`` (a partial last line waits for the next)."""
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        choices = event.get("choices") if isinstance(event, dict) else None
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    self.add_delta(delta)

    def add_delta(self, delta: dict[str, Any], *, whole: bool = False) -> None:
        """Add one delta (or, ``whole``, a complete message) of the first choice."""
        content = delta.get("content")
        if isinstance(content, str):
            self._text.append(content)
        for position, call in enumerate(delta.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            index = position if whole else call.get("index", position)
            key = index if isinstance(index, int) else position
            parts = self._calls.setdefault(key, _CallParts())
            parts.id = call.get("id") or parts.id
            function = call.get("function")
            if isinstance(function, dict):
                parts.name = function.get("name") or parts.name
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    parts.arguments += arguments
                elif isinstance(arguments, dict):
                    parts.arguments += json.dumps(arguments)

    def message(self) -> Message | None:
        """The assembled assistant message; ``None`` when nothing (no text, no complete tool
        call) arrived."""
        calls = tuple(
            ToolCall(id=p.id, name=p.name, arguments=tool_arguments(p.arguments or "{}"))
            for _, p in sorted(self._calls.items())
            if p.id and p.name
        )
        text = "".join(self._text)
        if not text and not calls:
            return None
        return Message(role="assistant", content=text, tool_calls=calls)
