"""The ``Provider`` port: one ``generate`` call, messages + tools in, assistant message out.

Workers only ever talk to a model through this port, so the offline extractive provider, the
scripted test provider and the HTTP adapters in ``om_workers`` are interchangeable. The port is
synchronous on purpose: the core does no I/O itself, an adapter does.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from om_core.errors import ScriptExhaustedError
from om_core.ledger.models import Frozen, Message

CORRELATION_PREFIX = "om:"
MAX_CACHE_KEY_CHARS = 64
_CACHE_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")


class ToolSpec(Frozen):
    """A tool offered to the model: its name, what it does, and a JSON schema of its arguments."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str
    parameters: dict[str, Any]


class ProviderRequest(Frozen):
    """One provider turn.

    ``correlation_id`` is the derived ``om:{session_id}`` shared by a session's workers (never
    the agent session id itself, so worker prompt caches do not collide with chat).
    ``credential`` is only set when the host explicitly resolved one; it is excluded from
    ``repr`` and from the wire dump so it never lands in logs or transcripts.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)
    correlation_id: str = Field(min_length=1)
    credential: str | None = Field(default=None, repr=False, exclude=True)


class TokenUsage(Frozen):
    """The tokens one call used, as the provider's own answer reports them.

    ``input_tokens`` are the prompt's (OpenAI ``usage.prompt_tokens``, Anthropic
    ``usage.input_tokens``), ``output_tokens`` the answer's (``completion_tokens`` /
    ``output_tokens``). Never an estimate: a provider that reports nothing gives no usage.
    """

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)


class ProviderResponse(Frozen):
    """One provider answer: an assistant message (only its ``tool_calls`` matter to workers)
    and the call's :class:`TokenUsage` when the provider reported one (``None``: no model was
    billed, as with the offline extractive provider, or the answer said nothing)."""

    message: Message
    usage: TokenUsage | None = None


@runtime_checkable
class Provider(Protocol):
    """Anything that turns a :class:`ProviderRequest` into a :class:`ProviderResponse`.

    Implementations raise an exception for a failed call; workers report it (redacted and
    bounded to ``maxWorkerErrorBytes``) and fail the run closed.
    """

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Run one turn; raise on failure."""


def correlation_id_for(session_id: str) -> str:
    """The derived worker correlation id ``om:{session_id}``."""
    return f"{CORRELATION_PREFIX}{session_id}"


def sanitize_cache_key(value: str, max_chars: int = MAX_CACHE_KEY_CHARS) -> str:
    """A provider-safe cache key: ``[A-Za-z0-9._:-]`` only, at most ``max_chars`` characters.

    Unsafe characters become ``_``. A value that had to change, or is too long, gets a short
    SHA-256 suffix of the original, so two distinct ids never share a key. Empty input raises
    ``ValueError``.
    """
    if not value:
        raise ValueError("cache key source must not be empty")
    if max_chars < 16:
        raise ValueError("max_chars must be at least 16")
    cleaned = _CACHE_KEY_UNSAFE.sub("_", value)
    if cleaned == value and len(value) <= max_chars:
        return value
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]
    return f"{cleaned[: max_chars - 13]}-{digest}"


Script = ProviderResponse | Message | Exception | Callable[[ProviderRequest], ProviderResponse]


class ScriptedProvider:
    """A test provider: replays scripted answers in order and records every request.

    Each script item is a response, an assistant message, an exception to raise, or a
    callable computing a response from the request. Running past the script raises
    :class:`ScriptExhaustedError` unless ``then_stop`` is set, in which case an assistant
    message without tool calls (a no-op turn) is returned.
    """

    def __init__(self, script: Iterable[Script], *, then_stop: bool = False) -> None:
        self._script = list(script)
        self._then_stop = then_stop
        self.requests: list[ProviderRequest] = []

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Record ``request`` and answer with the next script item."""
        self.requests.append(request)
        if not self._script:
            if self._then_stop:
                return ProviderResponse(message=Message(role="assistant"))
            raise ScriptExhaustedError(f"script exhausted after {len(self.requests) - 1} turns")
        item = self._script.pop(0)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, ProviderResponse):
            return item
        if isinstance(item, Message):
            return ProviderResponse(message=item)
        return item(request)
