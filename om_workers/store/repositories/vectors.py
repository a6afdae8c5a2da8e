"""Vectors of the optional semantic search (``search_vectors``, migration ``0015``): what a
session still lacks, writing and scanning vectors, and the rows a vector hit names.

A vector is keyed like a full-text candidate (``source``, ``session_pk * 2**32 + position``)
and counts only while the row at that place is still the item it was made from (same entry
id, same memory item id) and made by the model asked for; anything else is skipped on read
and replaced by the next embedding run.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, exists, insert, select, text, tuple_

from om_core.read.search import SearchKey
from om_workers.store.repositories.search import SearchRow, row_from_result
from om_workers.store.schema import entries, memory_items, search_vectors, sessions

_ROW_SHIFT = 4294967296
MESSAGE, MEMORY = 0, 1


@dataclass(frozen=True)
class Pending:
    """An item of a session without a current vector: its source, position, id and stored
    payload (an entry's or a memory item's JSON)."""

    source: int
    position: int
    item_id: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class VectorChunk:
    """Vectors as scanned, a chunk at a time and column by column: each one's candidate key
    (``sources[n]``, ``rows[n]``) and its float32 bytes (``vectors[n]``)."""

    sources: list[int]
    rows: list[int]
    vectors: list[bytes]


def pack(vector: Sequence[float]) -> bytes:
    """``vector`` as float32 little-endian bytes."""
    return struct.pack(f"<{len(vector)}f", *vector)


def _missing(source: int, position: Any, item_id: Any, session_pk: Any) -> Any:
    v = search_vectors.c
    return ~exists().where(
        v.session_pk == session_pk,
        v.source == source,
        v.position == position,
        v.item_id == item_id,
        v.model == bindparam("model"),
    )


_PENDING_ENTRIES = (
    select(entries.c.seq, entries.c.id, entries.c.payload)
    .where(
        entries.c.session_pk == bindparam("session_pk"),
        entries.c.kind == "message",
        entries.c.seq > bindparam("after"),
        _missing(MESSAGE, entries.c.seq, entries.c.id, entries.c.session_pk),
    )
    .order_by(entries.c.seq)
    .limit(bindparam("limit"))
)
_PENDING_MEMORY = (
    select(memory_items.c.ord, memory_items.c.item_id, memory_items.c.payload)
    .where(
        memory_items.c.session_pk == bindparam("session_pk"),
        memory_items.c.ord > bindparam("after"),
        _missing(MEMORY, memory_items.c.ord, memory_items.c.item_id, memory_items.c.session_pk),
    )
    .order_by(memory_items.c.ord)
    .limit(bindparam("limit"))
)
_STALE_MEMORY = delete(search_vectors).where(
    search_vectors.c.session_pk == bindparam("session_pk"),
    search_vectors.c.source == MEMORY,
    ~exists().where(
        memory_items.c.session_pk == search_vectors.c.session_pk,
        memory_items.c.ord == search_vectors.c.position,
        memory_items.c.item_id == search_vectors.c.item_id,
    ),
)
# In key order, as the primary key holds them: the same vectors come first whatever the
# number of sessions (the common directions are estimated from the first chunk).
_SCAN_SESSIONS = (
    select(
        search_vectors.c.source,
        search_vectors.c.session_pk,
        search_vectors.c.position,
        search_vectors.c.vector,
    )
    .where(
        search_vectors.c.session_pk.in_(bindparam("session_pks", expanding=True)),
        search_vectors.c.model == bindparam("model"),
    )
    .order_by(search_vectors.c.session_pk, search_vectors.c.source, search_vectors.c.position)
)
_SCAN_TENANT = (
    select(
        search_vectors.c.source,
        search_vectors.c.session_pk,
        search_vectors.c.position,
        search_vectors.c.vector,
    )
    .join(sessions, sessions.c.pk == search_vectors.c.session_pk)
    .where(
        search_vectors.c.tenant_id == bindparam("tenant_id"),
        search_vectors.c.model == bindparam("model"),
        sessions.c.erased_at.is_(None),
    )
)
# The rows vector hits name, shaped as full-text candidates; a vector whose place now holds
# another item (a refreshed snapshot) names nothing.
_ROWS = """
    WITH candidates AS ({keys})
    SELECT c.source, c.row, c.rank, s.id AS session_id,
        e.id AS entry_id, e.created_at, e.payload AS entry_payload,
        m.kind AS memory_kind, m.payload AS memory_payload
    FROM candidates AS c
    JOIN search_vectors AS v ON v.session_pk = c.row / 4294967296 AND v.source = c.source
        AND v.position = c.row % 4294967296
    JOIN sessions AS s ON s.pk = v.session_pk
    LEFT JOIN entries AS e
        ON c.source = 0 AND e.session_pk = v.session_pk AND e.seq = v.position
            AND e.id = v.item_id
    LEFT JOIN memory_items AS m
        ON c.source = 1 AND m.session_pk = v.session_pk AND m.ord = v.position
            AND m.item_id = v.item_id
    WHERE e.id IS NOT NULL OR m.item_id IS NOT NULL
    ORDER BY c.rank, c.source, c.row
"""


class VectorRepository:
    """The ``search_vectors`` rows of one unit of work's connection."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def pending(
        self, session_pk: int, model: str, source: int, *, after: int, limit: int
    ) -> list[Pending]:
        """Up to ``limit`` of the session's message entries (``source`` 0) or memory items
        (1) past position ``after`` that have no current vector of ``model``, in order."""
        params = {"session_pk": session_pk, "model": model, "after": after, "limit": limit}
        statement = _PENDING_ENTRIES if source == MESSAGE else _PENDING_MEMORY
        return [
            Pending(source, int(row[0]), str(row[1]), _payload(row[2]))
            for row in self._connection.execute(statement, params)
        ]

    def put(
        self, tenant_id: str, session_pk: int, model: str, items: Sequence[tuple[Pending, bytes]]
    ) -> None:
        """Write the vectors of ``items`` (each with its packed floats), replacing what their
        places held."""
        if not items:
            return
        places = [(session_pk, p.source, p.position) for p, _ in items]
        v = search_vectors.c
        self._connection.execute(
            delete(search_vectors).where(tuple_(v.session_pk, v.source, v.position).in_(places))
        )
        self._connection.execute(
            insert(search_vectors),
            [
                {
                    "session_pk": session_pk,
                    "source": p.source,
                    "position": p.position,
                    "tenant_id": tenant_id,
                    "item_id": p.item_id,
                    "model": model,
                    "dimension": len(packed) // 4,
                    "vector": packed,
                }
                for p, packed in items
            ],
        )

    def drop_stale(self, session_pk: int) -> int:
        """Delete the session's memory vectors whose item left the snapshot; how many."""
        return self._connection.execute(_STALE_MEMORY, {"session_pk": session_pk}).rowcount or 0

    def forget_entries(self, session_pk: int, entry_ids: Sequence[str]) -> None:
        """Delete the vectors of these entries of the session and all its memory vectors (a
        rewrite of its entries, by erasure of copies, rebuilds its memory)."""
        v = search_vectors.c
        self._connection.execute(
            delete(search_vectors).where(
                v.session_pk == session_pk,
                (v.source == MEMORY) | and_(v.source == MESSAGE, v.item_id.in_(list(entry_ids))),
            )
        )

    def scan(
        self, tenant_id: str, model: str, session_pks: Sequence[int] | None, chunk: int
    ) -> Iterator[VectorChunk]:
        """Every vector of ``model`` in the sessions ``session_pks`` (one statement, in key
        order) or in the tenant's sessions not being erased, streamed ``chunk`` at a time.
        Columns, not an object a vector: a scan is read row by row only here."""
        if session_pks is not None:
            statement = _SCAN_SESSIONS
            params: dict[str, Any] = {"session_pks": list(session_pks), "model": model}
        else:
            statement, params = _SCAN_TENANT, {"tenant_id": tenant_id, "model": model}
        streamed = self._connection.execution_options(stream_results=True, yield_per=chunk)
        for part in streamed.execute(statement, params).partitions(chunk):
            yield VectorChunk(
                [int(row[0]) for row in part],
                [int(row[1]) * _ROW_SHIFT + int(row[2]) for row in part],
                [bytes(row[3]) for row in part],
            )

    def sessions(self, tenant_id: str | None) -> list[tuple[str, str]]:
        """``(tenant id, session id)`` of every session not being erased, of one tenant or
        of all, oldest first."""
        statement = select(sessions.c.tenant_id, sessions.c.id).where(
            sessions.c.erased_at.is_(None)
        )
        if tenant_id is not None:
            statement = statement.where(sessions.c.tenant_id == tenant_id)
        rows = self._connection.execute(statement.order_by(sessions.c.pk))
        return [(str(row.tenant_id), str(row.id)) for row in rows]

    def rows(self, keys: Sequence[SearchKey]) -> list[SearchRow]:
        """The stored rows ``keys`` name, in key order; a key whose vector no longer matches
        its place's item is left out."""
        if not keys:
            return []
        selects = " UNION ALL ".join(
            f"SELECT CAST(:r{n} AS FLOAT) AS rank, CAST(:s{n} AS INTEGER) AS source, "
            f"CAST(:w{n} AS BIGINT) AS row"
            for n in range(len(keys))
        )
        params: dict[str, Any] = {}
        for n, key in enumerate(keys):
            params.update({f"r{n}": key.rank, f"s{n}": key.source, f"w{n}": key.row})
        result = self._connection.execute(text(_ROWS.format(keys=selects)), params)
        return [row_from_result(row) for row in result]


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {}


__all__ = ["MEMORY", "MESSAGE", "Pending", "VectorChunk", "VectorRepository", "pack"]
