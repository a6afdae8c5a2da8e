"""A session's memory as stored: the snapshot row, its items, the flush's view and the context
state, and keeping them in line with the branch on every write.

The statements and the fold mechanics live in :mod:`~om_workers.store.snapshot` (reading),
:mod:`~om_workers.store.memory_state` (writing) and :mod:`~om_workers.store.memory_view`
(the views); this repository binds them to one unit of work's connection and the store's
cache of parsed ledgers.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, or_, select

from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.append_plan import AppendPlan
from om_workers.store.branch import Segment
from om_workers.store.memory_state import advance_memory_state, refresh_memory_state
from om_workers.store.memory_view import context_state_from, read_context_state, read_memory_view
from om_workers.store.records import ContextState, StoredMemoryItem
from om_workers.store.repositories.sessions import ContextHead, LockedSession, SessionHead
from om_workers.store.schema import memory_items
from om_workers.store.snapshot import SnapshotCache, read_snapshot, valid_snapshot

# Keyset over the primary key's order (kind, item id): a page is one index range scan.
_ITEMS_PAGE = (
    select(
        memory_items.c.kind,
        memory_items.c.item_id,
        memory_items.c.payload,
        memory_items.c.dropped_ord,
    )
    .where(
        memory_items.c.session_pk == bindparam("session_pk"),
        or_(
            memory_items.c.kind > bindparam("kind"),
            and_(
                memory_items.c.kind == bindparam("kind"),
                memory_items.c.item_id > bindparam("item_id"),
            ),
        ),
    )
    .order_by(memory_items.c.kind, memory_items.c.item_id)
    .limit(bindparam("limit"))
)


class MemoryRepository:
    """Snapshot and memory items of a tenant's sessions, on one unit of work's connection."""

    def __init__(self, connection: Connection, cache: SnapshotCache) -> None:
        self._connection = connection
        self._cache = cache

    def view(self, tenant_id: str, session_id: str, invalidation_scope: str | None) -> MemoryView:
        """What a flush reads (see :func:`~om_workers.store.memory_view.read_memory_view`).
        Raises :class:`~om_workers.errors.SessionNotFoundError`."""
        return read_memory_view(self._connection, tenant_id, session_id, invalidation_scope)

    def context_state(
        self,
        head: SessionHead,
        segments: list[Segment] | None = None,
        *,
        memory_only: bool = False,
    ) -> ContextState:
        """The branch's whole ledger from the snapshot plus the entries after it (see
        :func:`~om_workers.store.memory_view.read_context_state`, also for ``memory_only``);
        ``segments``: the branch's, when the caller read them already."""
        return read_context_state(
            self._connection,
            head.pk,
            head.leaf_id,
            self._cache,
            segments,
            rewritten_at=head.rewritten_at,
            memory_only=memory_only,
        )

    def context_state_at(self, found: ContextHead, *, memory_only: bool = False) -> ContextState:
        """:meth:`context_state` of the session row, snapshot and segments ``found`` holds
        (read in this unit of work): no further read of the session or its snapshot."""
        return context_state_from(
            self._connection,
            found.head.pk,
            found.head.leaf_id,
            self._cache,
            found.segments,
            found.snapshot,
            rewritten_at=found.head.rewritten_at,
            memory_only=memory_only,
        )

    def observation_cursor_seq(self, session_pk: int, segments: Sequence[Segment]) -> int:
        """Seq of the observation cursor on the branch the segments describe, as the snapshot
        records it (0: nothing observed, or no snapshot on this branch)."""
        snapshot = valid_snapshot(read_snapshot(self._connection, session_pk), list(segments))
        return snapshot.observation_cursor_seq if snapshot is not None else 0

    def advance(self, session: LockedSession, plan: AppendPlan, *, now: datetime) -> int | None:
        """Advance the snapshot over a straight append's new entries (see
        :func:`~om_workers.store.memory_state.advance_memory_state`); the recounted
        unobserved tokens, ``None`` when the append only added its own messages' tokens."""
        return advance_memory_state(
            self._connection, session.pk, session.snapshot, plan.written, plan.positions, now=now
        )

    def items_page(
        self, session_pk: int, after: tuple[str, str], limit: int
    ) -> tuple[StoredMemoryItem, ...]:
        """Up to ``limit`` of the session's stored observations and reflections after
        ``after`` (``(kind, item id)``; ``("", "")`` from the first), in that order."""
        params = {"session_pk": session_pk, "kind": after[0], "item_id": after[1], "limit": limit}
        return tuple(
            StoredMemoryItem(
                kind=str(row.kind),
                item_id=str(row.item_id),
                payload=dict(row.payload),
                dropped=row.dropped_ord is not None,
            )
            for row in self._connection.execute(_ITEMS_PAGE, params)
        )

    def refresh(self, session_pk: int, leaf_id: str | None, *, now: datetime) -> int:
        """Bring the snapshot in line with the branch ending at ``leaf_id`` after the leaf
        moved off the straight line (see
        :func:`~om_workers.store.memory_state.refresh_memory_state`); its unobserved tokens."""
        return refresh_memory_state(self._connection, session_pk, leaf_id, now=now)
