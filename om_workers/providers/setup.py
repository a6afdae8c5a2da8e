"""The memory workers' provider, models, retry policy and secrets, built from ``OM_*`` settings.

``OM_PROVIDER`` picks the adapter:

- ``extractive``: the offline heuristic (no network, no key);
- ``openai``: :class:`~om_workers.providers.OpenAICompatibleProvider` at
  ``OM_PROVIDER_BASE_URL`` (OpenAI itself when unset; vLLM, Ollama, LiteLLM ... otherwise);
- ``anthropic``: :class:`~om_workers.providers.AnthropicProvider`;
- ``package.module:factory``: a zero-argument callable returning a Provider.

The HTTP adapters share one instance per worker process (its ``httpx`` pool is thread-safe), with
``OM_HTTP_TIMEOUT_S`` per call and a retry policy from ``OM_PROVIDER_MAX_ATTEMPTS``,
``OM_BACKOFF_BASE_S`` and ``OM_BACKOFF_CAP_S``, the same numbers the task time limits are
derived from (:func:`om_workers.coordination.timing.derive_time_limits`), so a retry chain always
ends before Celery's soft limit. ``OM_PROVIDER_API_KEY`` is never logged: it lives in a
``SecretStr`` and joins every job's redaction secrets (:func:`provider_secrets`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Final

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import Provider
from om_workers.config import Settings
from om_workers.errors import ConfigError
from om_workers.providers import AnthropicProvider, OpenAICompatibleProvider, RetryPolicy
from om_workers.providers.http import JsonApiProvider
from om_workers.providers.retry import PROVIDER_RETRY_POLICY

HTTP_ADAPTERS: Final[Mapping[str, type[JsonApiProvider]]] = {
    "openai": OpenAICompatibleProvider,
    "anthropic": AnthropicProvider,
}
HTTP_PROVIDERS: Final = frozenset(HTTP_ADAPTERS)
WORKERS: Final = ("observer", "reflector", "dropper")


def load_provider(spec: str) -> Provider:
    """The provider named by ``OM_PROVIDER``: ``extractive`` (offline) or
    ``package.module:factory``, a zero-argument callable returning an ``om_core`` Provider.

    Raises :class:`ConfigError` for a malformed spec, an unimportable module, a missing
    attribute or a factory whose result is not a Provider.
    """
    if spec == "extractive":
        return ExtractiveProvider()
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"OM_PROVIDER must be 'extractive' or 'module:factory', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
        provider = factory()
    except (ImportError, AttributeError, TypeError) as exc:
        raise ConfigError(f"cannot load provider {spec!r}: {exc}") from exc
    if not isinstance(provider, Provider):
        raise ConfigError(f"provider {spec!r} returned {type(provider).__name__}, not a Provider")
    return provider


def retry_policy(settings: Settings) -> RetryPolicy:
    """The provider retry policy: ``OM_PROVIDER_MAX_ATTEMPTS`` calls per request, backoff from
    ``OM_BACKOFF_BASE_S`` doubling up to ``OM_BACKOFF_CAP_S`` seconds, half jitter.

    A ``Retry-After`` longer than the cap gives up at once: waiting longer would break the time
    limits the task was given. Raises ``ValueError`` for an invalid combination.
    """
    cap = settings.llm.backoff_cap_s
    return replace(
        PROVIDER_RETRY_POLICY,
        attempts=settings.llm.max_attempts,
        base_s=min(settings.llm.backoff_base_s, cap),
        cap_s=cap,
        max_retry_after_s=cap,
    )


def provider_secrets(settings: Settings) -> tuple[str, ...]:
    """Secrets every job redacts from stored errors and prompts: the provider API key, if set."""
    key = _api_key(settings)
    return (key,) if key else ()


def provider_factory(settings: Settings) -> Callable[[], Provider]:
    """A callable returning the provider for one flush job, per ``OM_PROVIDER``.

    HTTP adapters are built once here and shared (connection pooling); ``extractive`` and
    ``module:factory`` providers are built per job. Raises :class:`ConfigError` for
    an unknown name or a factory that cannot be loaded (checked now, not at the first job).
    """
    spec = settings.llm.provider
    if spec in HTTP_PROVIDERS:
        shared = build_http_provider(settings)
        return lambda: shared
    if spec != "extractive" and ":" not in spec:
        raise ConfigError(
            f"OM_PROVIDER must be extractive, openai, anthropic or module:factory, got {spec!r}"
        )
    load_provider(spec)  # fail loudly at startup, not inside every job
    return lambda: load_provider(spec)


def build_http_provider(settings: Settings) -> JsonApiProvider:
    """The ``openai`` or ``anthropic`` adapter configured from settings (at the vendor's own
    base URL unless ``OM_PROVIDER_BASE_URL`` is set).

    Raises :class:`ConfigError` when ``OM_PROVIDER`` names neither.
    """
    adapter = HTTP_ADAPTERS.get(settings.llm.provider)
    if adapter is None:
        raise ConfigError(f"{settings.llm.provider!r} is not an HTTP provider")
    return adapter(
        settings.llm.base_url,
        api_key=_api_key(settings),
        timeout_s=settings.llm.http_timeout_s,
        policy=retry_policy(settings),
    )


def worker_models(settings: Settings) -> Mapping[str, str]:
    """Per-worker model overrides (``OM_OBSERVER_MODEL`` ...), only those that are set.

    A worker without one uses its memory-settings group's model, then ``OM_MODEL``.
    """
    chosen = {
        "observer": settings.llm.observer_model,
        "reflector": settings.llm.reflector_model,
        "dropper": settings.llm.dropper_model,
    }
    return {name: model for name, model in chosen.items() if model}


def _api_key(settings: Settings) -> str | None:
    secret = settings.llm.api_key
    value = secret.get_secret_value() if secret is not None else ""
    return value or None


__all__ = [
    "HTTP_ADAPTERS",
    "HTTP_PROVIDERS",
    "WORKERS",
    "build_http_provider",
    "load_provider",
    "provider_factory",
    "provider_secrets",
    "retry_policy",
    "worker_models",
]
