"""Model calls as spans, named and described per OpenTelemetry's GenAI semantic conventions.

Each call of a :class:`~om_core.flush.provider.Provider` is a client span ``chat {model}``
with ``gen_ai.operation.name`` and ``gen_ai.request.model``; an HTTP adapter adds what the
vendor reported (:func:`usage_attributes`): ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens`` and ``gen_ai.response.model``. Prompts and answers are never
attributes.
"""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse, TokenUsage
from om_workers.telemetry import tracing


def usage_attributes(usage: TokenUsage | None, model: object) -> dict[str, str | int]:
    """The GenAI usage attributes of one answer: the token counts the vendor reported (as the
    adapter read them, :meth:`~om_workers.providers.http.JsonApiProvider.usage`) and the model
    that answered (a string of 1 to 200 characters); empty when it reported neither."""
    found: dict[str, str | int] = {}
    if usage is not None:
        found["gen_ai.usage.input_tokens"] = usage.input_tokens
        found["gen_ai.usage.output_tokens"] = usage.output_tokens
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
