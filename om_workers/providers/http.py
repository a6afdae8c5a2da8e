"""The HTTP half every provider adapter shares: one JSON POST with timeouts and retries, and
:class:`JsonApiProvider`, the credential handling around it.

Transient failures (transport errors, timeouts, 408/429/5xx) are retried per a
:class:`~om_core.policy.backoff.RetryPolicy` (by default
:data:`~om_workers.providers.retry.PROVIDER_RETRY_POLICY`), honouring ``Retry-After``. Every
error leaves as a :class:`~om_workers.errors.ProviderError` subclass whose text has the API
key, the request credential and any other known secret redacted, and is cut to a bounded
length.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict

import httpx

from om_core.flush.provider import ProviderRequest, ProviderResponse, TokenUsage
from om_core.ledger.models import Message
from om_core.policy.backoff import RetryPolicy, next_delay_s, parse_retry_after
from om_core.policy.redaction import normalize_secrets, redact
from om_workers.errors import (
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderTransportError,
)
from om_workers.providers.retry import PROVIDER_RETRY_POLICY, is_retryable_status
from om_workers.telemetry import tracing
from om_workers.telemetry.genai import usage_attributes

DEFAULT_TIMEOUT_S = 60.0
MAX_ERROR_CHARS = 1024
_BODY_EXCERPT_CHARS = 512


class JsonPoster:
    """POSTs JSON to one base URL with retries; owns its ``httpx.Client`` unless given one.

    ``sleep``, ``draw`` (random floats in ``[0, 1)``) and ``now_epoch_s`` are injectable so
    tests neither wait nor depend on chance.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        policy: RetryPolicy | None = None,
        client: httpx.Client | None = None,
        secrets: Iterable[str] = (),
        sleep: Callable[[float], None] = time.sleep,
        draw: Callable[[], float] = random.random,
        now_epoch_s: Callable[[], float] = time.time,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.base_url = base_url.rstrip("/")
        self.policy = policy or PROVIDER_RETRY_POLICY
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout_s))
        self._owns_client = client is None
        self._secrets = normalize_secrets(secrets)
        self._sleep = sleep
        self._draw = draw
        self._now = now_epoch_s

    def close(self) -> None:
        """Close the HTTP client if this poster created it."""
        if self._owns_client:
            self._client.close()

    def post(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str], secrets: Iterable[str]
    ) -> dict[str, Any]:
        """POST ``body`` to ``base_url + path`` and return the JSON object answered.

        Raises a :class:`ProviderError` subclass (redacted with ``secrets`` and the poster's
        own) once the policy stops retrying, or at once for a non-retryable answer.
        """
        known = normalize_secrets((*self._secrets, *secrets))
        attempt = 0
        while True:
            attempt += 1
            outcome, retry_after = self._attempt(path, body, headers, known)
            if not isinstance(outcome, ProviderError):
                return outcome
            if not outcome.retryable:
                raise outcome
            delay = next_delay_s(attempt, self.policy, self._draw(), retry_after_s=retry_after)
            if delay is None:
                raise outcome
            self._sleep(delay)

    def _attempt(
        self,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        secrets: tuple[str, ...],
    ) -> tuple[dict[str, Any] | ProviderError, float | None]:
        url = f"{self.base_url}{path}"
        try:
            response = self._client.post(url, json=dict(body), headers=dict(headers))
        except httpx.TimeoutException as exc:
            return _error(ProviderTimeoutError, f"timed out: {exc}", secrets, None, True), None
        except httpx.TransportError as exc:
            text = f"transport error: {exc}"
            return _error(ProviderTransportError, text, secrets, None, True), None
        status = response.status_code
        if status >= 400:
            retry_after = parse_retry_after(response.headers.get("retry-after"), self._now())
            return _status_error(status, response.text, secrets), retry_after
        try:
            value = response.json()
        except ValueError:
            return _error(ProviderResponseError, "answer is not JSON", secrets, status, False), None
        if not isinstance(value, dict):
            text = "answer is not a JSON object"
            return _error(ProviderResponseError, text, secrets, status, False), None
        return value, None


def _status_error(status: int, body: str, secrets: tuple[str, ...]) -> ProviderError:
    excerpt = body[:_BODY_EXCERPT_CHARS]
    text = f"HTTP {status}: {excerpt}"
    if status == 429:
        return _error(ProviderRateLimitError, text, secrets, status, True)
    if 500 <= status <= 599:
        return _error(ProviderServerError, text, secrets, status, True)
    kind = ProviderServerError if is_retryable_status(status) else ProviderRequestError
    return _error(kind, text, secrets, status, is_retryable_status(status))


def _error(
    kind: type[ProviderError],
    text: str,
    secrets: tuple[str, ...],
    status: int | None,
    retryable: bool,
) -> ProviderError:
    return kind(bounded(text, secrets), status=status, retryable=retryable)


def _count(value: Any) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else 0


def bounded(text: str, secrets: Iterable[str]) -> str:
    """``text`` with known secrets redacted, cut to :data:`MAX_ERROR_CHARS` characters."""
    redacted = redact(text, secrets)
    return redacted if len(redacted) <= MAX_ERROR_CHARS else redacted[: MAX_ERROR_CHARS - 1] + "…"


class JsonApiOptions(TypedDict, total=False):
    """The keyword arguments of :class:`JsonApiProvider` (see its ``__init__``), for a
    subclass that adds its own."""

    api_key: str | None
    timeout_s: float
    policy: RetryPolicy | None
    secrets: Iterable[str]
    poster: JsonPoster | None


class JsonApiProvider(ABC):
    """A :class:`~om_core.flush.provider.Provider` over one vendor's JSON API.

    What every such adapter does the same way: ``api_key`` is sent unless the request carries
    its own credential, and both are redacted (with ``secrets``) from every error; each
    :meth:`generate` is one :class:`JsonPoster` POST to :attr:`PATH`. A subclass says what
    differs: the default base URL, the headers that carry the key, the body and the answer's
    reading. Failures raise :class:`~om_workers.errors.ProviderError` subclasses.
    """

    DEFAULT_BASE_URL: str
    PATH: str
    MODELS_PATH: str
    """The vendor's model list (``GET``): answers only with a valid key, so it checks one
    without spending tokens (``om doctor``)."""
    USAGE_FIELDS: tuple[str, str]
    """The names of the input and output token counts in the answer's ``usage`` object."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        policy: RetryPolicy | None = None,
        secrets: Iterable[str] = (),
        poster: JsonPoster | None = None,
    ) -> None:
        self._api_key = api_key
        self._secrets = tuple(secrets) + ((api_key,) if api_key else ())
        self._poster = poster or JsonPoster(
            base_url or self.DEFAULT_BASE_URL,
            timeout_s=timeout_s,
            policy=policy,
            secrets=self._secrets,
        )

    def close(self) -> None:
        """Release the HTTP client."""
        self._poster.close()

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """One call of the vendor's API; see the class docstring for failures."""
        key = request.credential or self._api_key
        headers = {"content-type": "application/json", **self.headers(key)}
        secrets = (*self._secrets, *((key,) if key else ()))
        answer = self._poster.post(self.PATH, self.body(request), headers, secrets)
        usage = self.usage(answer)
        if tracing.enabled():
            tracing.set_attributes(usage_attributes(usage, answer.get("model")))
        return ProviderResponse(message=self.message(answer, secrets), usage=usage)

    def usage(self, answer: dict[str, Any]) -> TokenUsage | None:
        """The call's tokens from the answer's ``usage`` object, read under the vendor's
        :attr:`USAGE_FIELDS` (input, output); ``None`` when the answer has no ``usage``
        object. A field that is missing or not a non-negative integer counts as 0: a
        malformed figure must not fail a flush whose work was done."""
        reported = answer.get("usage")
        if not isinstance(reported, dict):
            return None
        input_field, output_field = self.USAGE_FIELDS
        return TokenUsage(
            input_tokens=_count(reported.get(input_field)),
            output_tokens=_count(reported.get(output_field)),
        )

    @abstractmethod
    def headers(self, key: str | None) -> dict[str, str]:
        """The vendor's headers besides the content type: ``key`` (if any) among them."""

    @abstractmethod
    def body(self, request: ProviderRequest) -> dict[str, Any]:
        """The JSON body of a request (without credentials)."""

    @abstractmethod
    def message(self, answer: dict[str, Any], secrets: tuple[str, ...]) -> Message:
        """The assistant message of an answer; ``secrets`` are redacted from any error.

        Raises :class:`~om_workers.errors.ProviderResponseError` for a malformed answer.
        """
