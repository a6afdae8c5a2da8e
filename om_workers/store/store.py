"""The SQL session store: sessions, entries, branches, fenced memory writes, context state, jobs.

:class:`SqlStore` is the face the API and the workers call. Each method is one short operation
of the service layer over one unit of work (:mod:`~om_workers.store.unit_of_work`), grouped by
concern: session operations (:mod:`.sessions`), reads (:mod:`.session_reads`) and flush jobs
(:mod:`.jobs`). Tenants and API keys are not here: they are administration, with their own
transactions (:class:`~om_workers.store.accounts.AccountStore`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.models import SessionEntry
from om_core.portability import EntryCheck
from om_core.read.search import SearchPage
from om_core.read.search_narrowing import MetadataNarrowing
from om_workers.config import Settings, get_settings
from om_workers.store.engine import create_store_engine, in_memory_sqlite
from om_workers.store.erasure import ErasureService
from om_workers.store.jobs import JobService
from om_workers.store.portability import EXPORT_PAGE, ExportItem, PortabilityService
from om_workers.store.records import (
    AppendResult,
    ContextParts,
    ContextState,
    ContextVersion,
    FlushJob,
    ImportResult,
    JobFinish,
    JobState,
    LastFlush,
    SessionInfo,
    SessionsListing,
    StartedJob,
    StoredPage,
    StoredTombstone,
)
from om_workers.store.search import SearchService, Semantic
from om_workers.store.service import UnitsOfWork
from om_workers.store.session_reads import MAX_PAGE_LIMIT, SessionReads
from om_workers.store.sessions import SessionService
from om_workers.store.unit_of_work import utc_now
from om_workers.store.usage import UsageService
from om_workers.store.vectors import VectorService
from om_workers.store.webhooks import WebhookService

__all__ = ["MAX_PAGE_LIMIT", "SqlStore"]


def _as_batch(entries: SessionEntry | Sequence[SessionEntry]) -> Sequence[SessionEntry]:
    return (entries,) if isinstance(entries, SessionEntry) else entries


class SqlStore:
    """The durable store the API and the workers share (SQLite or PostgreSQL).

    Every method is scoped by ``tenant_id`` (the reconciler's job sweeps excepted): another
    tenant's session raises :class:`~om_workers.errors.SessionNotFoundError`, exactly like a
    missing one. Every method runs in its own transaction and either completes or writes
    nothing. Database failures surface as :class:`~om_workers.errors.StoreUnavailableError`
    (unreachable or locked; retry later) or :class:`~om_workers.errors.StoreError`; the schema
    must have been migrated (:func:`om_workers.store.upgrade`).
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._engine = engine
        units = UnitsOfWork(engine, clock)
        self._sessions = SessionService(units)
        self._reads = SessionReads(units)
        self._jobs = JobService(units)
        self._portability = PortabilityService(units)
        self._erasure = ErasureService(units)
        self._search = SearchService(units)
        self._usage = UsageService(units)
        self._webhooks = WebhookService(units)
        self._vectors = VectorService(units)

    @classmethod
    def from_url(cls, database_url: str, **engine_kwargs: Any) -> SqlStore:
        """A store on ``database_url``. Raises :class:`~om_workers.errors.ConfigError`."""
        return cls(create_store_engine(database_url, **engine_kwargs))

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> SqlStore:
        """A store on ``OM_DATABASE_URL`` (or the given settings' ``database_url``)."""
        store = (settings or get_settings()).store
        if in_memory_sqlite(store.url):  # one shared connection: no pool to size
            return cls.from_url(store.url)
        return cls.from_url(store.url, pool_size=store.pool_size, max_overflow=store.pool_size)

    @property
    def vectors(self) -> VectorService:
        """Vectors of the optional semantic search (embedding sessions, see
        :mod:`om_workers.store.vectors`)."""
        return self._vectors

    @property
    def erasure(self) -> ErasureService:
        """Erasure: hiding sessions at once, deleting them for good, the audit trail
        (:mod:`om_workers.store.erasure`)."""
        return self._erasure

    @property
    def usage(self) -> UsageService:
        """Model usage: a flush job's, and totals per tenant per day
        (:mod:`om_workers.store.usage`)."""
        return self._usage

    @property
    def webhooks(self) -> WebhookService:
        """Webhook endpoints and their deliveries (:mod:`om_workers.store.webhooks`)."""
        return self._webhooks

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations, tooling and the account store)."""
        return self._engine

    def close(self) -> None:
        """Close pooled connections; the store can still be used afterwards (it reconnects)."""
        self._engine.dispose()

    # Session operations -----------------------------------------------------------------

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

        Raises :class:`~om_workers.errors.TenantNotFoundError`,
        :class:`~om_workers.errors.SessionExistsError` when the tenant already has this id,
        :class:`~om_core.errors.InvalidEntryError` for an empty or over-long id, and for
        ``workspace`` what :func:`~om_workers.store.funnel.check_link` raises (nothing is
        created then).
        """
        return self._sessions.create_session(
            tenant_id, session_id, metadata=metadata, workspace=workspace
        )

    def append_entries(
        self, tenant_id: str, session_id: str, entries: SessionEntry | Sequence[SessionEntry]
    ) -> AppendResult:
        """Append one entry or a batch atomically, in order; the leaf moves to the last new one.

        A missing ``parent_id`` means "after the previous entry" (the first: after the current
        leaf). Idempotent by entry id: an id stored with the same content is reported in
        ``duplicate_ids`` and not written again. Raises
        :class:`~om_workers.errors.SessionNotFoundError`,
        :class:`~om_core.errors.EntryConflictError` (id stored with other content, or in
        another session), :class:`~om_core.errors.InvalidEntryError` (empty batch, an entry
        naming another session, an id twice in the batch, a parent that is not an earlier
        entry of this session). On any error nothing of the batch is written.

        When the session is linked to a workspace, its newly written observable messages are
        copied onto the workspace in the same transaction
        (:func:`~om_workers.store.funnel.append_with_copies`); a missing workspace raises
        :class:`~om_workers.errors.WorkspaceMissingError` and writes nothing.
        """
        return self._sessions.append_entries(tenant_id, session_id, _as_batch(entries))

    def append_memory(
        self,
        tenant_id: str,
        session_id: str,
        entries: SessionEntry | Sequence[SessionEntry],
        epoch: int,
    ) -> AppendResult:
        """A fenced append: commits only while ``epoch`` is still the session's epoch.

        The epoch check and the append happen in one transaction under the session's write
        lock. Raises :class:`~om_workers.errors.StaleEpochError` (nothing written) when a
        newer flush began, and everything :meth:`append_entries` raises.
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
        return self._sessions.append_memory_and_finish(tenant_id, session_id, batch, epoch, finish)

    def raise_epoch(self, tenant_id: str, session_id: str) -> int:
        """Raise the session's fencing epoch and return it (a flush job starts this way).

        Every earlier epoch is stale from now on, so a worker that lost its lock can no longer
        write. Raises :class:`~om_workers.errors.SessionNotFoundError`.
        """
        return self._sessions.raise_epoch(tenant_id, session_id)

    def fork(self, tenant_id: str, session_id: str, entry_id: str) -> SessionInfo:
        """Move the leaf to ``entry_id``, an entry of this session; the next append branches there.

        Raises :class:`~om_workers.errors.SessionNotFoundError`, or
        :class:`~om_workers.errors.EntryNotFoundError` when the entry is not in this session.
        """
        return self._sessions.fork(tenant_id, session_id, entry_id)

    def link_session(self, tenant_id: str, session_id: str, workspace_id: str) -> SessionInfo:
        """Link ``session_id`` to ``workspace_id``: from the next append on, every observable
        message appended to the session is also appended to the workspace (see
        :func:`~om_workers.store.funnel.append_with_copies`). Entries already stored are not
        copied. Linking again to the same workspace changes nothing; to another one moves the
        link.

        Raises :class:`~om_workers.errors.SessionNotFoundError` for a missing session or
        workspace (or another tenant's), :class:`~om_workers.errors.InvalidLinkError` and
        :class:`~om_workers.errors.LinkConflictError` (see
        :func:`~om_workers.store.funnel.check_link`).
        """
        return self._sessions.link_session(tenant_id, session_id, workspace_id)

    def unlink_session(self, tenant_id: str, session_id: str) -> SessionInfo:
        """Stop copying the session's messages; copies already made stay on the workspace.
        Unlinking a session that is not linked changes nothing. Raises
        :class:`~om_workers.errors.SessionNotFoundError`."""
        return self._sessions.unlink_session(tenant_id, session_id)

    def add_tombstones(
        self, tenant_id: str, scope: str, entry_ids: Iterable[str], *, corrected: bool = False
    ) -> tuple[str, ...]:
        """Withhold ``entry_ids`` in ``scope``; ids already withheld take the new ``corrected``.

        Returns the ids that were not withheld before. Raises
        :class:`~om_workers.errors.TenantNotFoundError`.
        """
        return self._sessions.add_tombstones(tenant_id, scope, entry_ids, corrected=corrected)

    # Reads ------------------------------------------------------------------------------

    def get_session(self, tenant_id: str, session_id: str) -> SessionInfo:
        """The session's bookkeeping. Raises :class:`~om_workers.errors.SessionNotFoundError`."""
        return self._reads.get_session(tenant_id, session_id)

    def read_branch(self, tenant_id: str, session_id: str) -> tuple[SessionEntry, ...]:
        """The current branch, root to leaf. Raises
        :class:`~om_workers.errors.SessionNotFoundError`."""
        return self._reads.read_branch(tenant_id, session_id)

    def read_page(
        self, tenant_id: str, session_id: str, *, after: str | None = None, limit: int = 100
    ) -> StoredPage:
        """Up to ``limit`` current-branch entries after entry ``after`` (from the root if None).

        Raises :class:`~om_workers.errors.SessionNotFoundError`,
        :class:`~om_workers.errors.EntryNotFoundError` when ``after`` is not on the current
        branch, :class:`~om_core.errors.InvalidEntryError` for ``limit`` outside
        ``1..MAX_PAGE_LIMIT``.
        """
        return self._reads.read_page(tenant_id, session_id, after=after, limit=limit)

    def read_tail(self, tenant_id: str, session_id: str, limit: int) -> tuple[SessionEntry, ...]:
        """The last ``limit`` entries of the current branch, in branch order.

        Raises :class:`~om_workers.errors.SessionNotFoundError`,
        :class:`~om_core.errors.InvalidEntryError` for ``limit`` < 1.
        """
        return self._reads.read_tail(tenant_id, session_id, limit)

    def unobserved_before(
        self, tenant_id: str, session_id: str, entry_id: str
    ) -> tuple[int, int, str | None]:
        """Observable messages after the observation cursor and before ``entry_id`` on the
        current branch: how many, their estimated tokens, the oldest one's id. An index range
        count, however many there are (for a context read whose tail stops short of the
        cursor). Raises :class:`~om_workers.errors.SessionNotFoundError`,
        :class:`~om_workers.errors.EntryNotFoundError` when the entry is not on the current
        branch.
        """
        return self._reads.unobserved_before(tenant_id, session_id, entry_id)

    def read_span(
        self, tenant_id: str, session_id: str, entry_ids: Sequence[str], *, margin: int = 32
    ) -> tuple[SessionEntry, ...]:
        """Current-branch entries from the first to the last of ``entry_ids``, widened by
        about ``margin`` entries on each side (so a cited tool result finds its call), in order.

        Ids that are not on the current branch are ignored; with none on it the answer is
        empty. Raises :class:`~om_workers.errors.SessionNotFoundError`.
        """
        return self._reads.read_span(tenant_id, session_id, entry_ids, margin=margin)

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
        """What a context read needs, in one read transaction (one consistent view): the
        session row and the ids ``invalidation_scope`` withholds, which are all that is read
        when ``kept`` (called with them) says a context built for that version is at hand
        (``None``); else the stored ledger, the branch tail (``first_tail`` entries, doubled
        until ``tail_enough``, told whether the tail holds the observation cursor, says so or
        the branch is read whole) and the count of unobserved messages before the tail.

        Raises :class:`~om_workers.errors.SessionNotFoundError`.
        """
        return self._reads.read_context_parts(
            tenant_id,
            session_id,
            invalidation_scope=invalidation_scope,
            first_tail=first_tail,
            tail_enough=tail_enough,
            kept=kept,
        )

    def read_context_state(self, tenant_id: str, session_id: str) -> ContextState:
        """The branch's ledger from the stored snapshot plus the entries after it.

        ``result.ledger == fold_ledger(read_branch(...))`` without reading the branch before the
        snapshot. Raises :class:`~om_workers.errors.SessionNotFoundError`.
        """
        return self._reads.read_context_state(tenant_id, session_id)

    def read_memory_view(
        self, tenant_id: str, session_id: str, invalidation_scope: str | None = None
    ) -> MemoryView:
        """What a flush reads, in one read transaction (see
        :func:`om_workers.store.memory_view.read_memory_view`). Raises
        :class:`~om_workers.errors.SessionNotFoundError`."""
        return self._reads.read_memory_view(tenant_id, session_id, invalidation_scope)

    def list_sessions(
        self,
        tenant_id: str,
        *,
        limit: int = 50,
        cursor: str | None = None,
        updated_since: datetime | None = None,
    ) -> SessionsListing:
        """Up to ``limit`` of the tenant's sessions, newest first, after ``cursor`` (from the
        newest without one), only those updated at or after ``updated_since`` when given (a
        naive time is UTC). An unknown tenant has no sessions.

        Raises :class:`~om_workers.errors.InvalidCursorError` for a cursor this listing did
        not hand out, and :class:`~om_core.errors.InvalidEntryError` for ``limit`` outside
        ``1..MAX_SESSIONS_LIMIT``.
        """
        return self._reads.list_sessions(
            tenant_id, limit=limit, cursor=cursor, updated_since=updated_since
        )

    def list_tombstones(self, tenant_id: str, scope: str) -> tuple[StoredTombstone, ...]:
        """The tombstones of one exact scope, oldest first (empty for an unknown tenant)."""
        return self._reads.list_tombstones(tenant_id, scope)

    def invalidated_ids(self, tenant_id: str, scope: str) -> frozenset[str]:
        """Entry ids one exact scope withholds, ``corrected`` ones included."""
        return self._reads.invalidated_ids(tenant_id, scope)

    # Export and import --------------------------------------------------------------------

    def export_session(
        self, tenant_id: str, session_id: str, *, page_size: int = EXPORT_PAGE
    ) -> Iterator[ExportItem]:
        """The session's export (:mod:`om_core.portability`), item by item: the header, the
        current branch's entries root to leaf, its tombstones, memory items and link, the end.

        Lazy and in constant memory: each ``page_size`` entries (or memory items) are one
        short read transaction, over the branch as it was when the first item was read.
        Raises :class:`~om_workers.errors.SessionNotFoundError` at the first item (also for
        another tenant's session), and the store's errors at any item.
        """
        return self._portability.export_session(tenant_id, session_id, page_size=page_size)

    def import_session(
        self,
        tenant_id: str,
        session_id: str,
        lines: Iterable[tuple[int, bytes]],
        *,
        check_entry: EntryCheck | None = None,
    ) -> ImportResult:
        """Import an export's ``lines`` (``(1-based number, bytes with the newline)``, read
        lazily) into ``session_id``, created with the header's metadata when the tenant has
        no such session; in one transaction, all or nothing.

        Entries keep their ids and go through the append plan (parents, duplicates,
        conflicts); ``check_entry`` adds the caller's checks of each entry. Raises
        :class:`~om_core.errors.ImportLineError` naming the first bad line (see
        :class:`~om_core.portability.ImportReader`; also a parent in neither the file nor
        the session, an id stored in this session with other content),
        :class:`~om_core.errors.ImportClashError` for an id another session of the tenant
        holds, :class:`~om_workers.errors.TenantNotFoundError`, and the store's errors.
        """
        return self._portability.import_session(
            tenant_id, session_id, lines, check_entry=check_entry
        )

    def search(
        self,
        tenant_id: str,
        q: str | None,
        *,
        session_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        secrets: Iterable[str] = (),
        semantic: Semantic | None = None,
        narrowing: MetadataNarrowing | None = None,
    ) -> SearchPage:
        """Full-text (or, with ``semantic``, hybrid) search of the tenant's sessions (those
        whose metadata holds ``narrowing``, with one), or of ``session_id`` alone (see
        :meth:`~om_workers.store.search.SearchService.search` for the rules and errors)."""
        return self._search.search(
            tenant_id,
            q,
            session_id=session_id,
            limit=limit,
            cursor=cursor,
            secrets=secrets,
            semantic=semantic,
            narrowing=narrowing,
        )

    # Flush jobs -------------------------------------------------------------------------

    def create_job(
        self,
        tenant_id: str,
        session_id: str,
        *,
        force: bool = False,
        full_reflection_rebuild: bool = False,
        job_id: str | None = None,
    ) -> FlushJob:
        """Record a queued flush job (durable before anyone is told it was accepted).

        Raises :class:`~om_workers.errors.SessionNotFoundError`.
        """
        return self._jobs.create_job(
            tenant_id,
            session_id,
            force=force,
            full_reflection_rebuild=full_reflection_rebuild,
            job_id=job_id,
        )

    def last_flush(self, tenant_id: str, session_id: str) -> LastFlush:
        """The session's unobserved tokens (as of its last append or flush) and its newest
        flush job that was not folded into another, read in one statement: what answers a
        flush request with nothing to do. Raises
        :class:`~om_workers.errors.SessionNotFoundError` (also for another tenant's session)."""
        return self._jobs.last_flush(tenant_id, session_id)

    def get_job(self, tenant_id: str, job_id: str) -> FlushJob:
        """The job. Raises :class:`~om_workers.errors.FlushJobNotFoundError` (also for another
        tenant's job)."""
        return self._jobs.get_job(tenant_id, job_id)

    def start_job(self, tenant_id: str, job_id: str) -> StartedJob:
        """Start a flush job: mark it running (a redelivered running job restarts; attempts
        count up) and raise its session's epoch, which fences out every earlier flush of the
        session (see :meth:`raise_epoch`), in one transaction; then read the session's view.

        On PostgreSQL the view is read in that same transaction. SQLite has one writer for the
        whole database, so there the write transaction does only the two updates and the view
        is read right after its commit (WAL readers never wait for writers): no older epoch can
        write after the commit, so the view is as current as one read inside it.

        Raises :class:`~om_workers.errors.FlushJobNotFoundError`, or
        :class:`~om_workers.errors.InvalidJobStateError` for a job that already finished.
        """
        return self._jobs.start_job(tenant_id, job_id)

    def finish_job(
        self,
        tenant_id: str,
        job_id: str,
        state: JobState,
        *,
        counts: Mapping[str, int] | None = None,
        error: str | None = None,
        secrets: Iterable[str] = (),
        prompt_version: str | None = None,
    ) -> FlushJob:
        """Mark a job succeeded, failed or skipped, with its counts and redacted error (and
        the prompt version of a job that got as far as the pipeline).

        ``error`` has every exact secret replaced and is cut to 4,000 characters. Raises
        :class:`~om_workers.errors.InvalidJobStateError` for a non-final ``state`` or a job
        already finished, :class:`~om_workers.errors.FlushJobNotFoundError` for an unknown
        job.
        """
        return self._jobs.finish_job(
            tenant_id,
            job_id,
            state,
            counts=counts,
            error=error,
            secrets=secrets,
            prompt_version=prompt_version,
        )

    def finish_job_if_open(self, tenant_id: str, finish: JobFinish) -> FlushJob | None:
        """:meth:`finish_job`, but ``None`` instead of an error when the job does not exist or
        already finished (the reconciler swept it meanwhile)."""
        return self._jobs.finish_job_if_open(tenant_id, finish)

    def widen_job_options(
        self, tenant_id: str, job_id: str, *, force: bool, full_reflection_rebuild: bool
    ) -> bool:
        """Add ``force`` / ``full_reflection_rebuild`` to a queued job a request coalesced into.

        Options only ever widen (a coalesced request never takes one away). Returns False when
        the job is no longer queued (it already read its options; the caller then lets it be).
        """
        return self._jobs.widen_job_options(
            tenant_id, job_id, force=force, full_reflection_rebuild=full_reflection_rebuild
        )

    def fail_running_jobs(self, job_ids: Iterable[str], error: str) -> tuple[str, ...]:
        """Mark the given jobs failed with ``error``, those still ``running`` only (across
        tenants, for the reconciler); the ids it marked."""
        return self._jobs.fail_running_jobs(job_ids, error)

    def fail_stuck_jobs(self, started_before: datetime) -> tuple[str, ...]:
        """Mark every job still ``running`` that started before ``started_before`` as failed.

        For the reconciler, across tenants: such a job's worker died without finishing it.
        Returns the ids it marked.
        """
        return self._jobs.fail_stuck_jobs(started_before)
