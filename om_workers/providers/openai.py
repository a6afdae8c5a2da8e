"""``OpenAICompatibleProvider``: chat completions with tools, for any OpenAI-compatible server.

Works with OpenAI, vLLM, Ollama, LiteLLM and others that speak ``POST /chat/completions``
with ``tools``. The derived correlation id is sent, sanitized, as ``prompt_cache_key`` (set
``cache_key_field=None`` for servers that reject unknown fields).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Unpack

from om_core.flush.provider import ProviderRequest, sanitize_cache_key
from om_core.ledger.models import Message, ToolCall
from om_workers.errors import ProviderResponseError
from om_workers.providers.http import JsonApiOptions, JsonApiProvider, bounded

# Options forwarded verbatim; anything else a worker sets is not part of this wire format.
_PASSTHROUGH = ("temperature", "top_p", "max_tokens", "seed")


class OpenAICompatibleProvider(JsonApiProvider):
    """The :class:`~om_core.flush.provider.Provider` port over OpenAI-style chat completions.

    Credentials and failures as :class:`~om_workers.providers.http.JsonApiProvider`; malformed
    tool calls (non-JSON or non-object arguments, missing ids or names) raise
    :class:`~om_workers.errors.ProviderResponseError`.
    """

    DEFAULT_BASE_URL = "https://api.openai.com/v1"
    PATH = "/chat/completions"
    MODELS_PATH = "/models"
    USAGE_FIELDS = ("prompt_tokens", "completion_tokens")

    def __init__(
        self,
        base_url: str | None = None,
        *,
        cache_key_field: str | None = "prompt_cache_key",
        **options: Unpack[JsonApiOptions],
    ) -> None:
        super().__init__(base_url, **options)
        self._cache_key_field = cache_key_field

    def headers(self, key: str | None) -> dict[str, str]:
        """The key as a bearer token."""
        return {"authorization": f"Bearer {key}"} if key else {}

    def message(self, answer: dict[str, Any], secrets: tuple[str, ...]) -> Message:
        """:func:`parse_answer`."""
        return parse_answer(answer, secrets)

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        """The JSON body of a request (without credentials)."""
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [_wire_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        for option in _PASSTHROUGH:
            if option in request.options:
                body[option] = request.options[option]
        if "thinkingLevel" in request.options:
            body["reasoning_effort"] = request.options["thinkingLevel"]
        if self._cache_key_field:
            body[self._cache_key_field] = sanitize_cache_key(request.correlation_id)
        return body


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    wire: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        wire["content"] = message.text or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, separators=(",", ":")),
                },
            }
            for call in message.tool_calls
        ]
    return wire


def parse_answer(answer: dict[str, Any], secrets: Iterable[str] = ()) -> Message:
    """The assistant :class:`Message` of a chat-completions answer.

    Raises :class:`ProviderResponseError` when there is no message or a tool call is
    malformed.
    """
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderResponseError("answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderResponseError("answer has no message")
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ProviderResponseError("tool_calls is not a list")
    return Message(
        role="assistant",
        content=content if isinstance(content, str) else "",
        tool_calls=tuple(_tool_call(call, secrets) for call in calls),
    )


def _tool_call(call: Any, secrets: Iterable[str]) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise ProviderResponseError("malformed tool call")
    function = call["function"]
    call_id, name, raw = call.get("id"), function.get("name"), function.get("arguments", "{}")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise ProviderResponseError("tool call without id or name")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        text = f"tool call {name} has non-JSON arguments: {str(raw)[:200]}"
        raise ProviderResponseError(bounded(text, secrets)) from None
    if not isinstance(arguments, dict):
        raise ProviderResponseError(f"tool call {name} arguments are not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)
