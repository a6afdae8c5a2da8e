"""Deleting an erased session's rows, and blanking what its funnel copies left on workspaces.

Every statement is built once, with bound parameters. Entries are deleted a chunk at a time
(highest seqs first), so erasing a long session never holds one huge transaction: on SQLite the
other writers get the lock back between chunks, on PostgreSQL no transaction grows without
bound. A hidden session is unreachable, so the rows a chunk leaves behind are never read.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import Connection, bindparam, delete, func, select, update

from om_core.ledger.append_plan import wire
from om_core.ledger.funnel import COPY_ID_PREFIX, ORIGIN_KEY
from om_core.ledger.models import SessionEntry
from om_workers.store.memory_state import refresh_memory_state
from om_workers.store.schema import (
    entries,
    flush_jobs,
    memory_items,
    sessions,
    snapshots,
    tombstones,
)

# Bound parameters per IN list or executemany batch: far below SQLite's and PostgreSQL's limits.
_IN_CHUNK = 500
_ORIGIN_SESSION = entries.c.payload[("data", ORIGIN_KEY, "sessionId")].as_string()
_COPIES_OF = (
    select(entries.c.session_pk, entries.c.id)
    .where(
        entries.c.tenant_id == bindparam("tenant"),
        entries.c.id.like(f"{COPY_ID_PREFIX}%"),
        bindparam("origin") == _ORIGIN_SESSION,
    )
    .order_by(entries.c.session_pk, entries.c.seq)
)
_SEQS_OF = select(func.min(entries.c.seq)).where(
    entries.c.session_pk == bindparam("session"), entries.c.id.in_(bindparam("ids", expanding=True))
)
_FROM_SEQ = (
    select(entries.c.payload)
    .where(entries.c.session_pk == bindparam("session"), entries.c.seq >= bindparam("from_seq"))
    .order_by(entries.c.seq)
)
_BLANK = (
    update(entries)
    .where(entries.c.session_pk == bindparam("session"), entries.c.id == bindparam("entry"))
    .values(kind="custom", eligible_tokens=0, payload=bindparam("new_payload"))
)
_LEAF = select(sessions.c.leaf_id).where(sessions.c.pk == bindparam("session"))
_SET_TOKENS = (
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(unobserved_tokens=bindparam("tokens"), updated_at=bindparam("now"))
)
_MAX_SEQ = select(func.max(entries.c.seq)).where(entries.c.session_pk == bindparam("session"))
_DELETE_ABOVE = delete(entries).where(
    entries.c.session_pk == bindparam("session"), entries.c.seq > bindparam("above")
)
_DELETE_ITEMS = delete(memory_items).where(memory_items.c.session_pk == bindparam("session"))
_DELETE_SNAPSHOT = delete(snapshots).where(snapshots.c.session_pk == bindparam("session"))
_DELETE_JOBS = delete(flush_jobs).where(flush_jobs.c.session_pk == bindparam("session"))
_DELETE_SESSION = delete(sessions).where(sessions.c.pk == bindparam("session"))
_DELETE_TOMBSTONED = delete(tombstones).where(
    tombstones.c.tenant_id == bindparam("tenant"),
    tombstones.c.entry_id.in_(bindparam("ids", expanding=True)),
)


class ErasedRowsRepository:
    """Physical erasure on one unit of work's connection (see the module docstring)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def copies_of(self, tenant_id: str, session_id: str) -> dict[int, list[str]]:
        """The funnel copies of session ``session_id``'s messages on any workspace of the
        tenant: workspace key -> copy ids, in seq order. A range scan of the tenant's copies."""
        found: dict[int, list[str]] = defaultdict(list)
        params = {"tenant": tenant_id, "origin": session_id}
        for row in self._connection.execute(_COPIES_OF, params):
            found[int(row.session_pk)].append(row.id)
        return dict(found)

    def entries_from_first(self, session_pk: int, entry_ids: list[str]) -> list[SessionEntry]:
        """The session's entries from the first of ``entry_ids`` on, in seq order (empty when
        none of them is stored)."""
        firsts = [
            self._connection.execute(
                _SEQS_OF, {"session": session_pk, "ids": entry_ids[start : start + _IN_CHUNK]}
            ).scalar()
            for start in range(0, len(entry_ids), _IN_CHUNK)
        ]
        found = [int(seq) for seq in firsts if seq is not None]
        if not found:
            return []
        first = min(found)
        rows = self._connection.execute(_FROM_SEQ, {"session": session_pk, "from_seq": first})
        return [SessionEntry.model_validate(row.payload) for row in rows]

    def blank(self, session_pk: int, placeholders: list[SessionEntry]) -> None:
        """Replace stored entries by their placeholders (same ids, no content, not
        observable), one statement per ``_IN_CHUNK`` of them."""
        rows = [
            {"session": session_pk, "entry": p.id, "new_payload": wire(p)} for p in placeholders
        ]
        for start in range(0, len(rows), _IN_CHUNK):
            self._connection.execute(_BLANK, rows[start : start + _IN_CHUNK])

    def rebuild_memory(self, session_pk: int, *, now: datetime) -> None:
        """Drop the session's stored snapshot and items and fold them again from its branch's
        memory records (what is left of them), with its unobserved-token count."""
        params = {"session": session_pk}
        self._connection.execute(_DELETE_ITEMS, params)
        self._connection.execute(_DELETE_SNAPSHOT, params)
        leaf = self._connection.execute(_LEAF, params).scalar()
        tokens = refresh_memory_state(self._connection, session_pk, leaf, now=now)
        self._connection.execute(_SET_TOKENS, {"session": session_pk, "tokens": tokens, "now": now})

    def forget_tombstones(self, tenant_id: str, entry_ids: list[str]) -> None:
        """Delete the tenant's tombstones of these entry ids, whatever their scope."""
        for start in range(0, len(entry_ids), _IN_CHUNK):
            params = {"tenant": tenant_id, "ids": entry_ids[start : start + _IN_CHUNK]}
            self._connection.execute(_DELETE_TOMBSTONED, params)

    def delete_entries_chunk(self, session_pk: int, chunk: int) -> int:
        """Delete up to about ``chunk`` of the session's entries, highest seqs first; how many
        went (0: none were left)."""
        top = self._connection.execute(_MAX_SEQ, {"session": session_pk}).scalar()
        if top is None:
            return 0
        params = {"session": session_pk, "above": int(top) - chunk}
        return int(self._connection.execute(_DELETE_ABOVE, params).rowcount or 0)

    def delete_session(self, session_pk: int) -> None:
        """Delete everything else of the session, and its row: memory items, snapshot, flush
        jobs (its tombstones went when it was hidden)."""
        params = {"session": session_pk}
        for statement in (_DELETE_ITEMS, _DELETE_SNAPSHOT, _DELETE_JOBS, _DELETE_SESSION):
            self._connection.execute(statement, params)
