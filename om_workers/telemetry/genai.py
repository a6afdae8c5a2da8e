"""Model calls as spans, named and described per OpenTelemetry's GenAI semantic conventions.

Each call of a :class:`~om_core.flush.provider.Provider` is a client span ``chat {model}``
with ``gen_ai.operation.name`` and ``gen_ai.request.model``; an HTTP adapter adds what the
vendor reported (:func:`usage_attributes`): ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens`` and ``gen_ai.response.model``. Prompts and answers are never
attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse
from om_workers.telemetry import tracing

# OpenAI chat completions report prompt/completion tokens; Anthropic messages input/output.
_TOKEN_FIELDS = {
    "gen_ai.usage.input_tokens": ("prompt_tokens", "input_tokens"),
    "gen_ai.usage.output_tokens": ("completion_tokens", "output_tokens"),
}


def usage_attributes(answer: Mapping[str, Any]) -> dict[str, str | int]:
    """The GenAI usage attributes of a vendor's JSON answer: token counts it reported (whole
    non-negative numbers only) and the model that answered; empty when it reported none."""
    found: dict[str, str | int] = {}
    usage = answer.get("usage")
    if isinstance(usage, Mapping):
        for attribute, names in _TOKEN_FIELDS.items():
            value = next((usage[n] for n in names if n in usage), None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                found[attribute] = value
    model = answer.get("model")
    if isinstance(model, str) and 0 < len(model) <= 200:
        found["gen_ai.response.model"] = model
    return found


class TracedProvider:
    """``inner`` with each call timed as a ``chat {model}`` span (nothing more when tracing is
    off). Raises what ``inner`` raises."""

    def __init__(self, inner: Provider) -> None:
        self._inner = inner

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """One model call of ``inner`` inside its span."""
        if not tracing.enabled():
            return self._inner.generate(request)
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": request.model}
        with tracing.span(f"chat {request.model}", kind=SpanKind.CLIENT, attributes=attributes):
            return self._inner.generate(request)


__all__ = ["TracedProvider", "usage_attributes"]
