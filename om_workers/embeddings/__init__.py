"""Embedders for the optional semantic search: the port, its two adapters, and the setup that
picks one from ``OM_EMBEDDINGS_*`` (:func:`~om_workers.embeddings.setup.build_embedder`)."""

from om_workers.embeddings.port import (
    Embedder,
    EmbeddingError,
    EmbeddingsOffError,
    EmbeddingsUnavailableError,
)

__all__ = ["Embedder", "EmbeddingError", "EmbeddingsOffError", "EmbeddingsUnavailableError"]
