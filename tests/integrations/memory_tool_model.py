"""A scripted Chat Completions model (for :class:`.openai_server.ChatServer`) that uses the
adapters' memory tools: it searches memory for the user's question, recalls an unknown id and
the memory of the hit that names a port, and answers with the port the recall returned."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.integrations.openai_server import last_user_text

UNKNOWN_ID = "om:000000000000"
# A hit's line: its id, then its snippet (the question may be a hit too, and it names no port).
_PORT_MEMORY = re.compile(r"\[(om:[a-f0-9]{12})\][^\n]*\b6432\b")


def _call(call_id: str, name: str, **arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def _last_calls(messages: list[dict[str, Any]]) -> list[str]:
    """The tool names of the last assistant message's calls."""
    for message in reversed(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            return [call["function"]["name"] for call in message["tool_calls"]]
    return []


def reply(request: dict[str, Any]) -> str | dict[str, Any]:
    """The next step: a search, then two recalls, then the answer."""
    messages = request["messages"]
    if messages[-1]["role"] != "tool":
        query = last_user_text(request)
        return {"tool_calls": [_call("call-search", "search_memory", query=query)]}
    results = [m for m in messages if m["role"] == "tool"]
    if _last_calls(messages) == ["search_memory"]:
        found = _PORT_MEMORY.search(str(results[-1]["content"]))
        assert found is not None, results[-1]
        calls = [
            _call("call-unknown", "recall_memory", memory_id=UNKNOWN_ID),
            _call("call-found", "recall_memory", memory_id=found.group(1)),
        ]
        return {"tool_calls": calls}
    port = re.search(r"port (\d+)", json.dumps(results[-2:]))
    return f"Port {port.group(1)}." if port else "unknown"


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    """The tool messages' contents of ``request``, by call id."""
    return {
        m["tool_call_id"]: str(m["content"]) for m in request["messages"] if m["role"] == "tool"
    }
