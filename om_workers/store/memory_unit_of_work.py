"""The memory unit of work over the SQL store, and the host-callback view of one session.

:class:`SqlMemoryUnitOfWork` is bound to one tenant's session. As ``om_core``'s
:class:`~om_core.flush.unit_of_work.MemoryUnitOfWork` it reads a flush's view in one transaction
(:meth:`SqlStore.read_memory_view`) and appends a flush's records in one fenced transaction
that advances the snapshot by just those records. The same object offers the callbacks
in-process helpers take (``append_entry``, ``entries``), so the scope controller and the
revocation handler run on the durable store unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from om_core.errors import AppendNotVisibleError
from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.models import SessionEntry
from om_core.scopes.controller import ScopeView
from om_workers.errors import LockLostError, OMWorkersError, StaleEpochError
from om_workers.store.records import AppendResult, ContextState, FlushJob, JobFinish
from om_workers.store.repositories import tombstone_scope
from om_workers.store.store import SqlStore

_T = TypeVar("_T")


class SqlMemoryUnitOfWork:
    """One tenant's session in a :class:`SqlStore`; fenced when it has a flush ``epoch``.

    Constructing it does no I/O; ``SqlMemoryUnitOfWork(store, tenant_id, session_id)`` is all
    a caller needs (a flush job passes its epoch, lock check, start view and ``hold_last``).

    ``view`` is served by the first :meth:`read` (a view read in the transaction that started
    the job). With ``hold_last`` the latest appended batch is held back until the next append,
    :meth:`write_held` or :meth:`finish`, so a flush's last records and its job's finish commit
    in one transaction; the flush job calls :meth:`write_held` before every provider call, so
    records are durable before any further model work starts. ``before_write`` runs before
    every fenced write (the worker checks its session lock there and raises
    :class:`~om_workers.errors.LockLostError` when it lost it). The first fencing failure is kept
    in :attr:`fenced` and raised again on every later append, so no later step of the flush can
    write. Methods raise what the store's methods raise
    (:class:`~om_workers.errors.StaleEpochError`, :class:`~om_workers.errors.SessionNotFoundError`
    ...).
    """

    def __init__(
        self,
        store: SqlStore,
        tenant_id: str,
        session_id: str,
        *,
        epoch: int | None = None,
        before_write: Callable[[], None] | None = None,
        view: MemoryView | None = None,
        hold_last: bool = False,
    ) -> None:
        self._store = store
        self._hold_last = hold_last
        self._held: tuple[SessionEntry, ...] = ()
        self.tenant_id = tenant_id
        self._session_id = session_id
        self.epoch = epoch
        self._before_write = before_write
        self._view = view
        self.fenced: OMWorkersError | None = None

    @property
    def session_id(self) -> str:
        """The session every read and append is bound to."""
        return self._session_id

    # The memory unit of work ---------------------------------------------------------------

    def read(self) -> MemoryView:
        """The flush's view: working ledger, unobserved entries, scope map, tombstones, leaf.

        The first read returns the view the unit of work was made with, if any (the one read
        when its job started, in that transaction); later reads read the store.
        """
        view, self._view = self._view, None
        if view is not None:
            return view
        return self._store.read_memory_view(
            self.tenant_id, self._session_id, tombstone_scope(self._session_id)
        )

    def append(self, records: Sequence[SessionEntry]) -> str:
        """Append memory records at the leaf in one (fenced) transaction; the new leaf.

        Held back until the next write when the unit of work holds its last batch (the
        returned leaf is then the batch's last record, where the write will put it).
        """
        if not self._hold_last:
            return self._landed(records, self.append_entries(records))
        self.write_held()
        if self.fenced is not None:
            raise self.fenced
        self._held = tuple(records)
        return records[-1].id

    def write_held(self) -> None:
        """Write the held batch, if any. Raises what :meth:`append` raises."""
        held, self._held = self._held, ()
        if held:
            self._landed(held, self.append_entries(held))

    def finish(self, finish: JobFinish) -> FlushJob | None:
        """Write the held batch and finish its flush job, in one fenced transaction (just the
        job when nothing is held). The job as finished, ``None`` when it had already finished.

        Raises what :meth:`append` raises; the job is then not finished.
        """
        held, self._held = self._held, ()
        if not held or self.epoch is None:
            return self._store.finish_job_if_open(self.tenant_id, finish)
        result, job = self._fenced(
            lambda epoch: self._store.append_memory_and_finish(
                self.tenant_id, self._session_id, held, epoch, finish
            )
        )
        self._landed(held, result)
        return job

    def _landed(self, records: Sequence[SessionEntry], result: AppendResult) -> str:
        leaf = result.leaf_id
        if leaf is None or leaf != records[-1].id:
            raise AppendNotVisibleError(
                f"memory entry {records[-1].id!r} is not the leaf of session {self._session_id!r}"
            )
        return leaf

    # Host callbacks ------------------------------------------------------------------------

    def append_entries(self, entries: Sequence[SessionEntry]) -> AppendResult:
        """Append a batch (fenced when the unit of work has an epoch)."""
        if self.epoch is None:
            return self._store.append_entries(self.tenant_id, self._session_id, entries)
        return self._fenced(
            lambda epoch: self._store.append_memory(
                self.tenant_id, self._session_id, entries, epoch
            )
        )

    def _fenced(self, write: Callable[[int], _T]) -> _T:
        """Run a fenced write with the unit of work's epoch, after ``before_write``; the first
        fencing failure is kept and raised again by every later write."""
        if self.fenced is not None:
            raise self.fenced
        assert self.epoch is not None
        try:
            if self._before_write is not None:
                self._before_write()
            return write(self.epoch)
        except (LockLostError, StaleEpochError) as exc:
            self.fenced = exc
            raise

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        """Append one entry; returns it as stored (parent and ``created_at`` filled in)."""
        return self.append_entries((entry,)).entries[0]

    def append_visible(self, entry: SessionEntry) -> SessionEntry:
        """Append one entry and confirm, from the append's own transaction, that it became the
        leaf (so it is on the current branch); raises
        :class:`~om_core.errors.AppendNotVisibleError` otherwise. Returns it as stored."""
        result = self.append_entries((entry,))
        self._landed((entry,), result)
        return result.entries[0]

    def scope_view(self) -> ScopeView:
        """The current branch's scope map and ledger, from the stored snapshot plus the entries
        after it (what a scope operation checks against, without reading the whole branch)."""
        state = self._store.read_context_state(self.tenant_id, self._session_id)
        return ScopeView(scope_map=state.scope_map, ledger=state.ledger)

    def entries(self) -> list[SessionEntry]:
        """The current branch, root to leaf (for in-process helpers that fold it whole)."""
        return list(self._store.read_branch(self.tenant_id, self._session_id))

    def context_state(self) -> ContextState:
        """The branch's whole ledger and the entries after its snapshot."""
        return self._store.read_context_state(self.tenant_id, self._session_id)

    def invalidated_ids(self, scope: str) -> frozenset[str]:
        """Entry ids the tenant's ``scope`` withholds (tombstone port)."""
        return self._store.invalidated_ids(self.tenant_id, scope)
