"""Is the configured provider reachable, and does it take the configured key? One ``GET`` of
the vendor's model list, which answers only with a valid key and spends no tokens."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from om_core.policy.redaction import redact
from om_workers.config import Settings
from om_workers.providers.setup import HTTP_ADAPTERS, provider_factory, provider_secrets

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found: ``ok``, a one-line ``detail`` and, when not ok, the ``fix``. No
    text of it holds the key."""

    ok: bool
    detail: str
    fix: str | None = None


def probe_provider(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Probe ``OM_PROVIDER``: the offline provider and a ``module:factory`` need no network
    (the factory is loaded, not called); ``openai`` and ``anthropic`` get one ``GET`` of
    their model list with the key. Raises :class:`~om_workers.errors.ConfigError` for an
    ``OM_PROVIDER`` that names nothing loadable."""
    spec = settings.llm.provider
    provider_factory(settings)
    adapter = HTTP_ADAPTERS.get(spec)
    if adapter is None:
        what = "offline, no model and no key" if spec == "extractive" else "loaded, not probed"
        return ProbeResult(True, f"{spec}: {what}")
    base = (settings.llm.base_url or adapter.DEFAULT_BASE_URL).rstrip("/")
    secrets = provider_secrets(settings)
    key = secrets[0] if secrets else None
    provider = adapter(base, api_key=key)
    try:
        headers = provider.headers(key)
    finally:
        provider.close()
    try:
        answer = httpx.get(f"{base}{adapter.MODELS_PATH}", headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return ProbeResult(
            False,
            redact(f"{spec}: cannot reach {base}: {type(exc).__name__}: {exc}", secrets),
            "check OM_PROVIDER_BASE_URL and that this host can reach it",
        )
    return _judged(spec, base, answer.status_code, key is not None)


def _judged(spec: str, base: str, status: int, has_key: bool) -> ProbeResult:
    if status in (401, 403):
        why = "refused the configured key" if has_key else "wants a key and none is set"
        return ProbeResult(
            False,
            f"{spec}: {base} {why} (HTTP {status})",
            "set OM_PROVIDER_API_KEY to a valid key for this provider",
        )
    if 200 <= status < 300:
        return ProbeResult(True, f"{spec}: {base} reachable, key accepted")
    if status in (404, 405):
        return ProbeResult(True, f"{spec}: {base} reachable; it lists no models, key unchecked")
    return ProbeResult(
        False,
        f"{spec}: {base} answered HTTP {status}",
        "the provider is failing or limiting this key: check its status page and quota",
    )


__all__ = ["PROBE_TIMEOUT_S", "ProbeResult", "probe_provider"]
