"""Reads of the service layer: a session's bookkeeping, branch, pages, tail, spans, memory
state, the flush's view, listings and tombstones.

Each is a short function over one read unit of work (one consistent view; on SQLite it never
waits for a writer). :class:`~om_workers.store.SqlStore` delegates to these; its methods'
docstrings state what each raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from om_core.errors import InvalidEntryError
from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.models import SessionEntry
from om_workers.errors import EntryNotFoundError
from om_workers.store.branch import seq_on_branch
from om_workers.store.listing import MAX_SESSIONS_LIMIT, decode_cursor, encode_cursor
from om_workers.store.records import (
    ContextParts,
    ContextState,
    ContextVersion,
    SessionInfo,
    SessionsListing,
    StoredPage,
    StoredTombstone,
)
from om_workers.store.service import Service
from om_workers.store.tail_cache import holds_entry

MAX_PAGE_LIMIT = 1000
"""Most entries one :meth:`SessionReads.read_page` answer holds."""


class SessionReads(Service):
    """The reads of a tenant's sessions (see :class:`~om_workers.store.SqlStore`)."""

    def get_session(self, tenant_id: str, session_id: str) -> SessionInfo:
        """The session's bookkeeping."""
        with self._units.read() as uow:
            return uow.sessions.info(tenant_id, session_id)

    def read_branch(self, tenant_id: str, session_id: str) -> tuple[SessionEntry, ...]:
        """The current branch, root to leaf."""
        with self._units.read() as uow:
            head = uow.sessions.head(tenant_id, session_id)
            return uow.entries.read(head.pk, uow.entries.segments(head.pk, head.leaf_id))

    def read_page(
        self, tenant_id: str, session_id: str, *, after: str | None, limit: int
    ) -> StoredPage:
        """Up to ``limit`` current-branch entries after entry ``after``."""
        if not 1 <= limit <= MAX_PAGE_LIMIT:
            raise InvalidEntryError(f"limit must be within 1..{MAX_PAGE_LIMIT}")
        with self._units.read() as uow:
            head = uow.sessions.head(tenant_id, session_id)
            segments = uow.entries.segments(head.pk, head.leaf_id)
            after_seq = 0
            if after is not None:
                position = uow.entries.position(head.pk, after)
                if position is None or not seq_on_branch(position[0], segments):
                    raise EntryNotFoundError(f"entry {after!r} is not on the current branch")
                after_seq = position[0]
            found = uow.entries.read(head.pk, segments, after_seq=after_seq, limit=limit + 1)
        page = found[:limit]
        return StoredPage(
            entries=page, next_cursor=page[-1].id if len(found) > limit and page else None
        )

    def read_tail(self, tenant_id: str, session_id: str, limit: int) -> tuple[SessionEntry, ...]:
        """The last ``limit`` entries of the current branch, in branch order."""
        if limit < 1:
            raise InvalidEntryError("limit must be at least 1")
        with self._units.read() as uow:
            head = uow.sessions.head(tenant_id, session_id)
            segments = uow.entries.segments(head.pk, head.leaf_id)
            return uow.entries.tail(head.pk, segments, limit, head.rewritten_at)

    def unobserved_before(
        self, tenant_id: str, session_id: str, entry_id: str
    ) -> tuple[int, int, str | None]:
        """Observable messages after the observation cursor and before ``entry_id``."""
        with self._units.read() as uow:
            head = uow.sessions.head(tenant_id, session_id)
            segments = uow.entries.segments(head.pk, head.leaf_id)
            position = uow.entries.position(head.pk, entry_id)
            if position is None or not seq_on_branch(position[0], segments):
                raise EntryNotFoundError(f"entry {entry_id!r} is not on the current branch")
            cursor_at = uow.memory.observation_cursor_seq(head.pk, segments)
            return uow.entries.count_messages(
                head.pk, segments, after_seq=cursor_at, before_seq=position[0]
            )

    def read_span(
        self, tenant_id: str, session_id: str, entry_ids: Sequence[str], *, margin: int
    ) -> tuple[SessionEntry, ...]:
        """Current-branch entries around ``entry_ids``, widened by ``margin`` on each side."""
        with self._units.read() as uow:
            head = uow.sessions.head(tenant_id, session_id)
            segments = uow.entries.segments(head.pk, head.leaf_id)
            positions = (uow.entries.position(head.pk, entry_id) for entry_id in entry_ids)
            seqs = [p[0] for p in positions if p is not None and seq_on_branch(p[0], segments)]
            if not seqs:
                return ()
            low, high = min(seqs), max(seqs)
            return uow.entries.read(
                head.pk,
                segments,
                after_seq=max(0, low - 1 - margin),
                limit=high - low + 1 + 2 * margin,
            )

    def read_context_state(self, tenant_id: str, session_id: str) -> ContextState:
        """The branch's ledger from the stored snapshot plus the entries after it."""
        with self._units.read() as uow:
            return uow.memory.context_state(uow.sessions.head(tenant_id, session_id))

    def read_context_parts(
        self,
        tenant_id: str,
        session_id: str,
        *,
        invalidation_scope: str,
        first_tail: int,
        tail_enough: Callable[[ContextState, tuple[SessionEntry, ...], bool], bool],
        kept: Callable[[ContextVersion], bool],
    ) -> ContextParts | None:
        """Everything a context read needs, in one read transaction: the session row and the
        ids ``invalidation_scope`` withholds (``None`` when ``kept`` says a context built for
        that version is at hand, and nothing more is read), then the stored ledger, the
        branch tail (``first_tail`` entries, doubled until ``tail_enough``, told whether the
        tail holds the observation cursor, or the branch's root) and the unobserved messages
        older than the tail (only when the tail stops short of the observation cursor)."""
        with self._units.read() as uow:
            found = uow.sessions.context_head(tenant_id, session_id, invalidation_scope)
            version = ContextVersion(found.info, found.withheld)
            if kept(version):
                return None
            head, segments = found.head, found.segments
            state = uow.memory.context_state_at(found, memory_only=True)
            cursor = state.ledger.observation_covers_up_to_id
            limit = first_tail
            while True:
                tail, seqs = uow.entries.tail_and_seqs(head.pk, segments, limit, head.rewritten_at)
                holds_cursor = holds_entry(tail, seqs, cursor, state.observation_cursor_seq)
                whole = len(tail) < limit
                if whole or tail_enough(state, tail, holds_cursor):
                    break
                limit *= 2
            older: tuple[int, int, str | None] = (0, 0, None)
            if not whole and not holds_cursor and cursor not in {e.id for e in tail}:
                # The cursor's and the tail's seqs come with the reads above: one count.
                older = uow.entries.count_messages(
                    head.pk,
                    segments,
                    after_seq=state.observation_cursor_seq,
                    before_seq=seqs[0],
                )
        return ContextParts(version=version, state=state, tail=tail, older=older)

    def read_memory_view(
        self, tenant_id: str, session_id: str, invalidation_scope: str | None
    ) -> MemoryView:
        """What a flush reads, in one read transaction."""
        with self._units.read() as uow:
            return uow.memory.view(tenant_id, session_id, invalidation_scope)

    def list_sessions(
        self,
        tenant_id: str,
        *,
        limit: int,
        cursor: str | None,
        updated_since: datetime | None,
    ) -> SessionsListing:
        """A page of the tenant's sessions, newest first."""
        if not 1 <= limit <= MAX_SESSIONS_LIMIT:
            raise InvalidEntryError(f"limit must be within 1..{MAX_SESSIONS_LIMIT}")
        after = decode_cursor(cursor) if cursor is not None else None
        # One row more than the page: whether it exists says whether there is a next page.
        with self._units.read() as uow:
            found = uow.sessions.page(tenant_id, limit + 1, after, updated_since)
        page = tuple(found[:limit])
        more = len(found) > limit and page
        return SessionsListing(
            sessions=page,
            next_cursor=encode_cursor(page[-1].created_at, page[-1].id) if more else None,
        )

    def list_tombstones(self, tenant_id: str, scope: str) -> tuple[StoredTombstone, ...]:
        """The tombstones of one exact scope, oldest first."""
        with self._units.read() as uow:
            return uow.tombstones.of_scope(tenant_id, scope)

    def invalidated_ids(self, tenant_id: str, scope: str) -> frozenset[str]:
        """Entry ids one exact scope withholds."""
        with self._units.read() as uow:
            return uow.tombstones.withheld(tenant_id, scope)
