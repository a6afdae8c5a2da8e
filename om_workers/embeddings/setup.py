"""The process's embedder, picked by ``OM_EMBEDDINGS_PROVIDER`` (``None`` when off), and the
secrets it adds to every redaction (its API key)."""

from __future__ import annotations

from om_workers.config import Settings
from om_workers.embeddings.local import LOCAL_MODEL, LocalEmbedder
from om_workers.embeddings.openai import OpenAIEmbedder
from om_workers.embeddings.port import Embedder
from om_workers.errors import ConfigError


def build_embedder(settings: Settings) -> Embedder | None:
    """The embedder of ``settings.embeddings`` (``None`` for ``none``). Builds nothing heavy:
    the local model loads on first use (raising :class:`~om_workers.errors.ConfigError` then
    when the embeddings extra is missing). Raises :class:`ConfigError` for a local model
    other than the bundled one."""
    group = settings.embeddings
    if group.provider == "local":
        if group.model not in ("", LOCAL_MODEL):
            raise ConfigError(f"OM_EMBEDDINGS_PROVIDER=local has one model, {LOCAL_MODEL}")
        return LocalEmbedder()
    if group.provider == "openai":
        key = group.api_key.get_secret_value() if group.api_key is not None else None
        return OpenAIEmbedder(
            base_url=group.url,
            model=group.model or None,
            api_key=key,
            timeout_s=settings.llm.http_timeout_s,
        )
    return None


def embedding_secrets(settings: Settings) -> tuple[str, ...]:
    """The values to redact for the embeddings side: its API key, when set."""
    key = settings.embeddings.api_key
    return (key.get_secret_value(),) if key is not None and key.get_secret_value() else ()


__all__ = ["build_embedder", "embedding_secrets"]
