"""The ``Embedder`` port: texts in, unit-length vectors out.

Documents and queries are embedded apart because retrieval models often mark them differently
(e5 prefixes ``passage:`` and ``query:``); an adapter without that difference embeds both the
same way. Vectors are compared by cosine only between vectors of one model (``name``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from om_core.errors import InvalidInputError, UnavailableError
from om_workers.errors import OMWorkersError

Vector = tuple[float, ...]


class EmbeddingError(OMWorkersError):
    """An embedder answered something unusable (wrong count, no vectors, mixed dimensions)."""


class EmbeddingsUnavailableError(EmbeddingError, UnavailableError):
    """The embeddings endpoint is down, refused the call or timed out; retry later."""


class EmbeddingsOffError(OMWorkersError, InvalidInputError):
    """A hybrid search asked of a service whose embeddings are off
    (``OM_EMBEDDINGS_PROVIDER=none``)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dimension`` floats (``None`` until an adapter that learns
    it from its first answer has answered). Implementations are thread-safe."""

    @property
    def name(self) -> str:
        """The model's name, stored beside each vector."""

    @property
    def dimension(self) -> int | None:
        """Floats per vector."""

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, in order. Raises :class:`EmbeddingError` subclasses."""

    def embed_query(self, text: str) -> Vector:
        """The vector of a search query. Raises :class:`EmbeddingError` subclasses."""


__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingsOffError",
    "EmbeddingsUnavailableError",
    "Vector",
]
