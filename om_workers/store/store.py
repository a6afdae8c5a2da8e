"""The SQL session store: sessions, entries, branches, fenced memory writes, context state."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, insert, select, update

from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.scopes.index import fold_work_scope_map
from om_workers.config import Settings, get_settings
from om_workers.errors import (
    EntryNotFoundError,
    InvalidEntryError,
    SessionExistsError,
    SessionNotFoundError,
    StaleEpochError,
)
from om_workers.store.accounts import AccountsMixin, require_tenant
from om_workers.store.append import lock_session
from om_workers.store.base import utc_now
from om_workers.store.branch import (
    MEMORY_KINDS,
    Segment,
    branch_segments,
    count_messages,
    entry_position,
    read_branch_payloads,
    seq_on_branch,
    to_entries,
)
from om_workers.store.engine import create_store_engine
from om_workers.store.funnel import FunnelMixin, append_with_copies, check_link
from om_workers.store.jobs import JobsMixin, finish_in
from om_workers.store.listing import SessionListingMixin
from om_workers.store.memory_state import refresh_memory_state
from om_workers.store.memory_view import read_memory_view
from om_workers.store.records import (
    AppendResult,
    ContextState,
    FlushJob,
    JobFinish,
    SessionInfo,
    StoredPage,
    session_info,
)
from om_workers.store.schema import ID_LENGTH, sessions
from om_workers.store.snapshot import (
    SnapshotCache,
    read_snapshot,
    valid_snapshot,
)
from om_workers.store.tombstones import TombstonesMixin
from om_workers.store.unit_of_work import SqlUnitOfWork

MAX_PAGE_LIMIT = 1000


def _session_row(connection: Connection, tenant_id: str, session_id: str) -> Row[Any]:
    row: Row[Any] | None = connection.execute(
        select(sessions).where(sessions.c.tenant_id == tenant_id, sessions.c.id == session_id)
    ).first()
    if row is None:
        # The same answer whether the session is missing or another tenant's.
        raise SessionNotFoundError(f"no session {session_id!r}")
    return row


def _memory_entries(
    connection: Connection, session_pk: int, segments: list[Segment]
) -> tuple[SessionEntry, ...]:
    return to_entries(read_branch_payloads(connection, session_pk, segments, kinds=MEMORY_KINDS))


def _as_batch(entries: SessionEntry | Sequence[SessionEntry]) -> Sequence[SessionEntry]:
    return (entries,) if isinstance(entries, SessionEntry) else entries


class SqlStore(AccountsMixin, FunnelMixin, JobsMixin, SessionListingMixin, TombstonesMixin):
    """The durable store the API and the workers share (SQLite or PostgreSQL).

    Every method is scoped by ``tenant_id``: another tenant's session raises
    :class:`SessionNotFoundError`, exactly like a missing one. Every method runs in its own
    transaction and either completes or writes nothing. Database failures surface as
    :class:`~om_workers.errors.StoreUnavailableError` (unreachable or locked; retry later) or
    :class:`~om_workers.errors.StoreError`; the schema must have been migrated
    (:func:`om_workers.store.upgrade`).
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utc_now) -> None:
        super().__init__(engine, clock=clock)
        self._snapshots = SnapshotCache()

    @classmethod
    def from_url(cls, database_url: str, **engine_kwargs: Any) -> SqlStore:
        """A store on ``database_url``. Raises :class:`~om_workers.errors.ConfigError`."""
        return cls(create_store_engine(database_url, **engine_kwargs))

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> SqlStore:
        """A store on ``OM_DATABASE_URL`` (or the given settings' ``database_url``)."""
        return cls.from_url((settings or get_settings()).store.url)

    # Sessions ---------------------------------------------------------------------------

    def create_session(
        self,
        tenant_id: str,
        session_id: str | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        workspace: str | None = None,
    ) -> SessionInfo:
        """Create an empty session (a random id when none is given), linked to ``workspace``
        when given (see :meth:`link_session`).

        Raises :class:`~om_workers.errors.TenantNotFoundError`, :class:`SessionExistsError`
        when the tenant already has this id, :class:`InvalidEntryError` for an empty or
        over-long id, and for ``workspace`` what :func:`~om_workers.store.funnel.check_link`
        raises (nothing is created then).
        """
        new_id = session_id if session_id is not None else uuid.uuid4().hex
        if not new_id or len(new_id) > ID_LENGTH:
            raise InvalidEntryError(f"a session id has 1 to {ID_LENGTH} characters")

        def create() -> SessionInfo:
            now = self._now()
            with self._write() as connection:
                require_tenant(connection, tenant_id)
                taken = connection.execute(
                    select(sessions.c.pk).where(
                        sessions.c.tenant_id == tenant_id, sessions.c.id == new_id
                    )
                ).first()
                if taken is not None:
                    raise SessionExistsError(f"session {new_id!r} already exists")
                if workspace is not None:
                    check_link(connection, tenant_id, new_id, workspace)
                connection.execute(
                    insert(sessions).values(
                        tenant_id=tenant_id,
                        id=new_id,
                        leaf_id=None,
                        epoch=0,
                        entry_count=0,
                        unobserved_tokens=0,
                        meta=dict(metadata or {}),
                        created_at=now,
                        updated_at=now,
                        workspace_id=workspace,
                    )
                )
                return session_info(_session_row(connection, tenant_id, new_id))

        return self._retrying(create)

    def get_session(self, tenant_id: str, session_id: str) -> SessionInfo:
        """The session's bookkeeping. Raises :class:`SessionNotFoundError`."""
        with self._read() as connection:
            return session_info(_session_row(connection, tenant_id, session_id))

    # Appends and forks ------------------------------------------------------------------

    def append_entries(
        self, tenant_id: str, session_id: str, entries: SessionEntry | Sequence[SessionEntry]
    ) -> AppendResult:
        """Append one entry or a batch atomically, in order; the leaf moves to the last new one.

        A missing ``parent_id`` means "after the previous entry" (the first: after the current
        leaf). Idempotent by entry id: an id stored with the same content is reported in
        ``duplicate_ids`` and not written again. Raises :class:`SessionNotFoundError`,
        :class:`~om_workers.errors.EntryConflictError` (id stored with other content, or in
        another session), :class:`InvalidEntryError` (empty batch, an entry naming another
        session, an id twice in the batch, a parent that is not an earlier entry of this
        session). On any error nothing of the batch is written.

        When the session is linked to a workspace, its newly written observable messages are
        copied onto the workspace in the same transaction
        (:func:`~om_workers.store.funnel.append_with_copies`); a missing workspace raises
        :class:`~om_workers.errors.WorkspaceMissingError` and writes nothing.
        """
        batch = _as_batch(entries)

        def append() -> AppendResult:
            with self._write() as connection:
                session = lock_session(connection, tenant_id, session_id)
                return append_with_copies(connection, session, batch, now=self._now())

        return self._retrying(append)

    def raise_epoch(self, tenant_id: str, session_id: str) -> int:
        """Raise the session's fencing epoch and return it (a flush job starts this way).

        Every earlier epoch is stale from now on, so a worker that lost its lock can no longer
        write. Raises :class:`SessionNotFoundError`.
        """
        with self._write() as connection:
            epoch = connection.execute(
                update(sessions)
                .where(sessions.c.tenant_id == tenant_id, sessions.c.id == session_id)
                .values(epoch=sessions.c.epoch + 1, updated_at=self._now())
                .returning(sessions.c.epoch)
            ).scalar()
            if epoch is None:
                raise SessionNotFoundError(f"no session {session_id!r}")
            return int(epoch)

    def append_memory(
        self,
        tenant_id: str,
        session_id: str,
        entries: SessionEntry | Sequence[SessionEntry],
        epoch: int,
    ) -> AppendResult:
        """A fenced append: commits only while ``epoch`` is still the session's epoch.

        The epoch check and the append happen in one transaction under the session's write
        lock. Raises :class:`StaleEpochError` (nothing written) when a newer flush began, and
        everything :meth:`append_entries` raises.
        """
        return self.append_memory_and_finish(tenant_id, session_id, entries, epoch)[0]

    def append_memory_and_finish(
        self,
        tenant_id: str,
        session_id: str,
        entries: SessionEntry | Sequence[SessionEntry],
        epoch: int,
        finish: JobFinish | None = None,
    ) -> tuple[AppendResult, FlushJob | None]:
        """:meth:`append_memory`, and in the same transaction ``finish`` the flush job that
        wrote the entries (one transaction less per flush). The second value is the finished
        job, ``None`` when there was nothing to finish or the job had already finished (the
        reconciler swept it): the entries are committed all the same. Raises what
        :meth:`append_memory` raises (and then finishes nothing).
        """
        batch = _as_batch(entries)

        def append() -> tuple[AppendResult, FlushJob | None]:
            with self._write() as connection:
                session = lock_session(connection, tenant_id, session_id)
                if session.epoch != epoch:
                    raise StaleEpochError(session_id, epoch, session.epoch)
                now = self._now()
                # Memory records are never copied, but a linked session's invariant (every
                # observable message has its copy) holds for every way in.
                result = append_with_copies(connection, session, batch, now=now)
                job = None if finish is None else finish_in(connection, tenant_id, finish, now=now)
                return result, job

        return self._retrying(append)

    def fork(self, tenant_id: str, session_id: str, entry_id: str) -> SessionInfo:
        """Move the leaf to ``entry_id``, an entry of this session; the next append branches there.

        Raises :class:`SessionNotFoundError`, or :class:`EntryNotFoundError` when the entry is
        not in this session.
        """
        with self._write() as connection:
            session = lock_session(connection, tenant_id, session_id)
            if entry_position(connection, session.pk, entry_id) is None:
                raise EntryNotFoundError(f"no entry {entry_id!r} in session {session_id!r}")
            now = self._now()
            connection.execute(
                update(sessions)
                .where(sessions.c.pk == session.pk)
                .values(leaf_id=entry_id, updated_at=now)
            )
            tokens = refresh_memory_state(connection, session.pk, entry_id, now=now)
            connection.execute(
                update(sessions).where(sessions.c.pk == session.pk).values(unobserved_tokens=tokens)
            )
            return session_info(_session_row(connection, tenant_id, session_id))

    # Reads ------------------------------------------------------------------------------

    def read_branch(self, tenant_id: str, session_id: str) -> tuple[SessionEntry, ...]:
        """The current branch, root to leaf. Raises :class:`SessionNotFoundError`."""
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            segments = branch_segments(connection, int(row.pk), row.leaf_id)
            rows = read_branch_payloads(connection, int(row.pk), segments)
        return to_entries(rows)

    def read_page(
        self, tenant_id: str, session_id: str, *, after: str | None = None, limit: int = 100
    ) -> StoredPage:
        """Up to ``limit`` current-branch entries after entry ``after`` (from the root if None).

        Raises :class:`SessionNotFoundError`, :class:`EntryNotFoundError` when ``after`` is
        not on the current branch, :class:`InvalidEntryError` for ``limit`` outside
        ``1..MAX_PAGE_LIMIT``.
        """
        if not 1 <= limit <= MAX_PAGE_LIMIT:
            raise InvalidEntryError(f"limit must be within 1..{MAX_PAGE_LIMIT}")
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            session_pk = int(row.pk)
            after_seq = 0
            segments = branch_segments(connection, session_pk, row.leaf_id)
            if after is not None:
                position = entry_position(connection, session_pk, after)
                if position is None or not seq_on_branch(position[0], segments):
                    raise EntryNotFoundError(f"entry {after!r} is not on the current branch")
                after_seq = position[0]
            rows = read_branch_payloads(
                connection, session_pk, segments, after_seq=after_seq, limit=limit + 1
            )
        page = to_entries(rows[:limit])
        return StoredPage(
            entries=page, next_cursor=page[-1].id if len(rows) > limit and page else None
        )

    def read_tail(self, tenant_id: str, session_id: str, limit: int) -> tuple[SessionEntry, ...]:
        """The last ``limit`` entries of the current branch, in branch order.

        Raises :class:`SessionNotFoundError`, :class:`InvalidEntryError` for ``limit`` < 1.
        """
        if limit < 1:
            raise InvalidEntryError("limit must be at least 1")
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            segments = branch_segments(connection, int(row.pk), row.leaf_id)
            rows = read_branch_payloads(
                connection, int(row.pk), segments, limit=limit, newest_first=True
            )
        return to_entries(rows)

    def unobserved_before(
        self, tenant_id: str, session_id: str, entry_id: str
    ) -> tuple[int, int, str | None]:
        """Observable messages after the observation cursor and before ``entry_id`` on the
        current branch: how many, their estimated tokens, the oldest one's id. An index range
        count, however many there are (for a context read whose tail stops short of the
        cursor). Raises :class:`SessionNotFoundError`, :class:`EntryNotFoundError` when the
        entry is not on the current branch.
        """
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            session_pk = int(row.pk)
            segments = branch_segments(connection, session_pk, row.leaf_id)
            position = entry_position(connection, session_pk, entry_id)
            if position is None or not seq_on_branch(position[0], segments):
                raise EntryNotFoundError(f"entry {entry_id!r} is not on the current branch")
            snapshot = valid_snapshot(read_snapshot(connection, session_pk), segments)
            cursor_at = snapshot.observation_cursor_seq if snapshot is not None else 0
            return count_messages(
                connection, session_pk, segments, after_seq=cursor_at, before_seq=position[0]
            )

    def read_span(
        self, tenant_id: str, session_id: str, entry_ids: Sequence[str], *, margin: int = 32
    ) -> tuple[SessionEntry, ...]:
        """Current-branch entries from the first to the last of ``entry_ids``, widened by
        about ``margin`` entries on each side (so a cited tool result finds its call), in order.

        Ids that are not on the current branch are ignored; with none on it the answer is
        empty. Raises :class:`SessionNotFoundError`.
        """
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            session_pk = int(row.pk)
            segments = branch_segments(connection, session_pk, row.leaf_id)
            seqs = [
                position[0]
                for position in (entry_position(connection, session_pk, i) for i in entry_ids)
                if position is not None and seq_on_branch(position[0], segments)
            ]
            if not seqs:
                return ()
            low, high = min(seqs), max(seqs)
            rows = read_branch_payloads(
                connection,
                session_pk,
                segments,
                after_seq=max(0, low - 1 - margin),
                limit=high - low + 1 + 2 * margin,
            )
        return to_entries(rows)

    def read_context_state(self, tenant_id: str, session_id: str) -> ContextState:
        """The branch's ledger from the stored snapshot plus the entries after it.

        ``result.ledger == fold_ledger(read_branch(...))`` without reading the branch before the
        snapshot. Raises :class:`SessionNotFoundError`.
        """
        with self._read() as connection:
            row = _session_row(connection, tenant_id, session_id)
            session_pk = int(row.pk)
            segments = branch_segments(connection, session_pk, row.leaf_id)
            stored = read_snapshot(connection, session_pk)
            snapshot = valid_snapshot(stored, segments)
            if snapshot is None and stored is not None:
                # Writes keep the snapshot on the branch; should one not be, fold the branch's
                # memory entries rather than answer from another branch.
                memory = _memory_entries(connection, session_pk, segments)
                return ContextState(
                    ledger=fold_ledger(memory),
                    snapshot_entry_id=row.leaf_id,
                    entries=(),
                    leaf_id=row.leaf_id,
                    scope_map=fold_work_scope_map(memory),
                )
            initial = (
                self._snapshots.ledger(connection, session_pk, snapshot)
                if snapshot is not None
                else None
            )
            rows = read_branch_payloads(
                connection,
                session_pk,
                segments,
                after_seq=snapshot.seq if snapshot is not None else 0,
            )
        after = to_entries(rows)
        ledger = fold_ledger(after, initial=initial) if after else initial
        return ContextState(
            ledger=ledger if ledger is not None else ObservationalMemoryLedger(),
            snapshot_entry_id=snapshot.entry_id if snapshot is not None else None,
            entries=after,
            leaf_id=row.leaf_id,
            scope_map=fold_work_scope_map(
                after, initial=snapshot.scope_map if snapshot is not None else None
            ),
        )

    def read_memory_view(
        self, tenant_id: str, session_id: str, invalidation_scope: str | None = None
    ) -> MemoryView:
        """What a flush reads, in one read transaction (see
        :func:`om_workers.store.memory_view.read_memory_view`). Raises
        :class:`SessionNotFoundError`."""
        with self._read() as connection:
            return read_memory_view(connection, tenant_id, session_id, invalidation_scope)

    # Ports ------------------------------------------------------------------------------

    def session(
        self,
        tenant_id: str,
        session_id: str,
        *,
        epoch: int | None = None,
        before_write: Callable[[], None] | None = None,
        view: MemoryView | None = None,
        hold_last: bool = False,
    ) -> SqlUnitOfWork:
        """The memory unit of work (and entry callbacks) of one tenant's session.

        With ``epoch`` every append through it is fenced (:meth:`append_memory`), after
        ``before_write``; ``view`` answers its first read; ``hold_last`` holds the latest batch
        back (see :class:`SqlUnitOfWork`). Creating it does no I/O; its methods raise what the
        store's raise.
        """
        return SqlUnitOfWork(
            self,
            tenant_id,
            session_id,
            epoch=epoch,
            before_write=before_write,
            view=view,
            hold_last=hold_last,
        )
