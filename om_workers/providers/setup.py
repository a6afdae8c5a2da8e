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
    return _checked(spec, _built(spec, _factory(spec)))


def _factory(spec: str) -> Callable[[], object]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"OM_PROVIDER must be 'extractive' or 'module:factory', got {spec!r}")
    try:
        factory: Callable[[], object] = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load provider {spec!r}: {exc}") from exc
    return factory


def _built(spec: str, factory: Callable[[], object]) -> object:
    try:
        return factory()
    except TypeError as exc:
        raise ConfigError(f"cannot load provider {spec!r}: {exc}") from exc


def _checked(spec: str, provider: object) -> Provider:
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


def computes_in_process(settings: Settings) -> bool:
    """Whether ``OM_PROVIDER``'s calls are work in the worker's own process (``extractive``)
    rather than a wait on a model elsewhere: such calls gain nothing from the process's other
    threads under one GIL."""
    return settings.llm.provider == "extractive"


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
    if spec == "extractive":
        return ExtractiveProvider
    factory = _factory(spec)
    # Checked now, to fail loudly at start-up rather than inside every job; then only a
    # provider of another type is checked again (the Protocol check walks every member).
    checked = type(_checked(spec, _built(spec, factory)))

    def build() -> Provider:
        provider = _built(spec, factory)
        return provider if type(provider) is checked else _checked(spec, provider)

    return build


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
