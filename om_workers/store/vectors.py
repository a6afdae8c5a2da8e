"""Vectors of the optional semantic search: embedding a session's messages and memory (what
the ``om.embed`` job and ``om search embed`` run), and the nearest vectors of a query.

Embedding runs outside any transaction (a model call may take seconds): each batch is read,
embedded from its *redacted* text, and written in a write transaction of its own, replacing
what the places held, so a rerun after a failure or a duplicate job only fills what is still
missing. A vector outlives nothing it was made from: memory vectors of items that left the
snapshot are deleted first, and on read a vector whose place holds another item is skipped.

Scoring is an exact cosine (the vectors are unit length: a dot product) over every vector of
the scope, with numpy, in chunks; neither ``sqlite-vec`` (Python's ``sqlite3`` here cannot
load extensions) nor ``pgvector`` (a server extension) is required: :func:`vector_backend`
says which one a database could use.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import redact
from om_core.read.search import SearchKey
from om_workers.embeddings.port import Embedder, EmbeddingError
from om_workers.errors import ConfigError
from om_workers.store.common_directions import CommonDirections, estimate
from om_workers.store.repositories.vectors import MEMORY, MESSAGE, Pending, VectorChunk, pack
from om_workers.store.service import Service

SCAN_CHUNK = 8192
"""Vectors scored per numpy call."""
NUMPY_MISSING = (
    "semantic search needs numpy, part of the embeddings extra: "
    "pip install 'observational-memory-service[embeddings]'"
)


def item_text(item: Pending) -> str:
    """The text a vector is made from: a message's text parts, or a memory item's text."""
    if item.source == MESSAGE:
        entry = SessionEntry.model_validate(item.payload)
        return entry.message.text if entry.message is not None else ""
    return str(item.payload.get("text", ""))


@dataclass(frozen=True)
class EmbedProgress:
    """How far an embedding run is: sessions ``done`` of ``total``, vectors written so far."""

    done: int
    total: int
    vectors: int


class VectorService(Service):
    """Embedding sessions and finding a query's nearest vectors."""

    def embed_session(
        self,
        tenant_id: str,
        session_id: str,
        embedder: Embedder,
        *,
        batch_size: int,
        secrets: Iterable[str] = (),
    ) -> int:
        """Give every message and memory item of the session a vector of ``embedder``'s model
        (from its text with ``secrets`` redacted); how many were written. Raises
        :class:`~om_workers.errors.SessionNotFoundError`, the embedder's
        :class:`~om_workers.embeddings.EmbeddingError` (what was written stays) and the
        store's errors."""
        secrets = tuple(secrets)
        with self._units.write() as uow:
            pk = uow.sessions.head(tenant_id, session_id).pk
            uow.vectors.drop_stale(pk)
            uow.commit()
        written = 0
        for source in (MESSAGE, MEMORY):
            after = -1
            while True:
                with self._units.read() as uow:
                    batch = uow.vectors.pending(
                        pk, embedder.name, source, after=after, limit=batch_size
                    )
                if not batch:
                    break
                texts = [redact(item_text(item), secrets) for item in batch]
                vectors = embedder.embed_documents(texts)
                if len(vectors) != len(batch):
                    raise EmbeddingError("the embedder answered a vector count unlike the texts'")
                with self._units.write() as uow:
                    packed = [(item, pack(v)) for item, v in zip(batch, vectors, strict=True)]
                    uow.vectors.put(tenant_id, pk, embedder.name, packed)
                    uow.commit()
                written += len(batch)
                after = batch[-1].position
        return written

    def sessions(self, tenant_id: str | None) -> list[tuple[str, str]]:
        """``(tenant id, session id)`` of every session not being erased (of one tenant, or
        of all), oldest first: what a backfill embeds."""
        with self._units.read() as uow:
            return uow.vectors.sessions(tenant_id)

    def nearest(
        self,
        tenant_id: str,
        model: str,
        query: Sequence[float],
        *,
        session_pk: int | None,
        depth: int,
    ) -> list[SearchKey]:
        """The keys of the ``depth`` vectors of ``model`` nearest ``query`` (cosine) in the
        session or the tenant, best first, their rank the negated cosine. Raises
        :class:`ConfigError` when numpy (the embeddings extra) is missing."""
        with self._units.read() as uow:
            scope = None if session_pk is None else (session_pk,)
            return top_by_cosine(
                uow.vectors.scan(tenant_id, model, scope, SCAN_CHUNK), query, depth
            )


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:
        raise ConfigError(NUMPY_MISSING) from exc
    return numpy


def top_by_cosine(
    chunks: Iterable[VectorChunk], query: Sequence[float], depth: int
) -> list[SearchKey]:
    """The ``depth`` best of the vectors of ``chunks`` by cosine with ``query`` (both unit
    length), best first, once the scope's common directions are removed from both (see
    :mod:`~om_workers.store.common_directions`; estimated from the first chunk, a scope too
    small for that is scored by the plain dot product); vectors of another dimension are
    skipped."""
    np = _numpy()
    q = np.asarray(query, dtype="<f4")
    width = len(query) * 4
    best: list[tuple[float, int, int]] = []
    common: CommonDirections | None = None
    sampled = False
    for chunk in chunks:
        same = [n for n, vector in enumerate(chunk.vectors) if len(vector) == width]
        if not same:
            continue
        blobs = b"".join(chunk.vectors[n] for n in same)
        matrix = np.frombuffer(blobs, dtype="<f4").reshape(len(same), len(query))
        if not sampled:
            sampled, common = True, estimate(matrix)
            q = common.apply(q.reshape(1, -1))[0] if common is not None else q
        scores = common.scores(matrix, q) if common is not None else matrix @ q
        keep = min(depth, len(same))
        for n in np.argpartition(-scores, keep - 1)[:keep]:
            at = same[n]
            item = (float(scores[n]), -chunk.sources[at], -chunk.rows[at])
            if len(best) < depth:
                heapq.heappush(best, item)
            else:
                heapq.heappushpop(best, item)
    ordered = sorted(best, reverse=True)
    return [SearchKey(-score, -source, -row) for score, source, row in ordered]


def vector_backend(engine: Engine) -> str:
    """One line for an operator on the vector index the database could offer (whether
    Python's ``sqlite3`` can load extensions such as ``sqlite-vec``; whether the server has
    ``pgvector``) and that the search scores by exact cosine either way."""
    if engine.dialect.name == "sqlite":
        return _sqlite_vec()
    with engine.connect() as connection:
        found = connection.execute(
            text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        ).first()
    if found is None:
        return (
            "pgvector is not installed on this PostgreSQL server (no 'vector' extension): "
            "vectors are scored by exact cosine in the API process"
        )
    return "pgvector is available on this server; vectors are still scored by exact cosine"


def _sqlite_vec() -> str:
    import sqlite3

    connection = sqlite3.connect(":memory:")
    try:
        if not hasattr(connection, "enable_load_extension"):
            return (
                "sqlite-vec cannot be loaded: this Python's sqlite3 was built without "
                "extension loading; vectors are scored by exact cosine in the API process"
            )
        return (
            "this Python's sqlite3 can load extensions, but sqlite-vec is not used: vectors "
            "are scored by exact cosine in the API process"
        )
    finally:
        connection.close()


Progress = Callable[[EmbedProgress], None]

__all__ = [
    "EmbedProgress",
    "Progress",
    "VectorService",
    "item_text",
    "top_by_cosine",
    "vector_backend",
]
