"""``AnthropicProvider``: the Messages API (``POST /v1/messages``) with tools.

System messages become the top-level ``system`` field; assistant tool calls become
``tool_use`` blocks; consecutive ``tool`` results are merged into one user message of
``tool_result`` blocks, as the API requires. The derived correlation id is sent, sanitized,
as ``metadata.user_id``.
"""

from __future__ import annotations

from typing import Any

from om_core.flush.provider import ProviderRequest, sanitize_cache_key
from om_core.ledger.models import Message, ToolCall
from om_workers.errors import ProviderResponseError
from om_workers.providers.http import JsonApiProvider

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
# Extended-thinking budgets per worker thinking level, in tokens.
THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
_PASSTHROUGH = ("temperature", "top_p", "top_k")


class AnthropicProvider(JsonApiProvider):
    """The :class:`~om_core.flush.provider.Provider` port over Anthropic's Messages API.

    Credentials and failures as :class:`~om_workers.providers.http.JsonApiProvider`; a
    malformed ``tool_use`` block (no id/name, non-object input) raises
    :class:`~om_workers.errors.ProviderResponseError`.
    """

    DEFAULT_BASE_URL = "https://api.anthropic.com"
    PATH = "/v1/messages"
    MODELS_PATH = "/v1/models"
    USAGE_FIELDS = ("input_tokens", "output_tokens")

    def headers(self, key: str | None) -> dict[str, str]:
        """The API version, and the key as ``x-api-key``."""
        return {"anthropic-version": API_VERSION, **({"x-api-key": key} if key else {})}

    def message(self, answer: dict[str, Any], secrets: tuple[str, ...]) -> Message:
        """:func:`parse_answer` (its errors name no request data)."""
        return parse_answer(answer)

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        """The JSON body of a request (without credentials)."""
        options = request.options
        max_tokens = int(options.get("max_tokens", DEFAULT_MAX_TOKENS))
        body: dict[str, Any] = {"model": request.model, "messages": wire_messages(request)}
        system = "\n\n".join(m.text for m in request.messages if m.role == "system")
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        for option in _PASSTHROUGH:
            if option in options:
                body[option] = options[option]
        budget = THINKING_BUDGETS.get(str(options.get("thinkingLevel")))
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            max_tokens = max(max_tokens, budget + DEFAULT_MAX_TOKENS)
        body["max_tokens"] = max_tokens
        body["metadata"] = {"user_id": sanitize_cache_key(request.correlation_id)}
        return body


def wire_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    """The non-system messages in Messages API form, tool results merged per turn."""
    wire: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.text,
                "is_error": message.is_error,
            }
            if wire and wire[-1]["role"] == "user" and _is_tool_results(wire[-1]):
                wire[-1]["content"].append(block)
            else:
                wire.append({"role": "user", "content": [block]})
        elif message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.text:
                blocks.append({"type": "text", "text": message.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            )
            wire.append({"role": "assistant", "content": blocks or message.text})
        else:
            wire.append({"role": "user", "content": message.text})
    return wire


def _is_tool_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def parse_answer(answer: dict[str, Any]) -> Message:
    """The assistant :class:`Message` of a Messages API answer; thinking blocks are ignored.

    Raises :class:`ProviderResponseError` when ``content`` is missing or a ``tool_use`` block
    is malformed.
    """
    content = answer.get("content")
    if not isinstance(content, list):
        raise ProviderResponseError("answer has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            raise ProviderResponseError("content block is not an object")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append(_tool_call(block))
    return Message(role="assistant", content="".join(texts), tool_calls=tuple(calls))


def _tool_call(block: dict[str, Any]) -> ToolCall:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise ProviderResponseError("tool_use block without id or name")
    if not isinstance(arguments, dict):
        raise ProviderResponseError(f"tool_use {name} input is not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)
