"""The ``om_core`` ports over the SQL store: an entry sink/source and a tombstone source.

A :class:`SqlSessionHandle` is bound to one tenant's session, so code written against the
in-process runtime (``append_entry(entry)``, ``entries()``, ``invalidated_ids(scope)``) runs
on the durable store unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from om_core.models import SessionEntry
from om_workers.store.records import AppendResult, ContextState

if TYPE_CHECKING:
    from om_workers.store.store import SqlStore


class SqlSessionHandle:
    """One tenant's session in a :class:`SqlStore`; optionally fenced by a pass epoch.

    Methods raise what the store's methods raise (:class:`~om_workers.errors.StaleEpochError`
    for a fenced append after a newer pass, :class:`~om_workers.errors.SessionNotFoundError`
    ...).
    """

    def __init__(
        self, store: SqlStore, tenant_id: str, session_id: str, *, epoch: int | None = None
    ) -> None:
        self._store = store
        self.tenant_id = tenant_id
        self.session_id = session_id
        self.epoch = epoch

    def append_entries(self, entries: Sequence[SessionEntry]) -> AppendResult:
        """Append a batch (fenced when the handle has an epoch)."""
        if self.epoch is not None:
            return self._store.append_memory(self.tenant_id, self.session_id, entries, self.epoch)
        return self._store.append_entries(self.tenant_id, self.session_id, entries)

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        """Append one entry; returns it as stored (parent and ``created_at`` filled in)."""
        return self.append_entries((entry,)).entries[0]

    def entries(self) -> list[SessionEntry]:
        """The current branch, root to leaf."""
        return list(self._store.read_branch(self.tenant_id, self.session_id))

    # The runtime's SessionSource port (om_core.runtime): ``id`` and ``get_entries()``.
    @property
    def id(self) -> str:
        """The session id, as the in-process runtime reads it."""
        return self.session_id

    def get_entries(self) -> list[SessionEntry]:
        """The current branch, root to leaf (same as :meth:`entries`)."""
        return self.entries()

    def context_state(self) -> ContextState:
        """The branch's ledger and the entries after its snapshot."""
        return self._store.read_context_state(self.tenant_id, self.session_id)

    def invalidated_ids(self, scope: str) -> frozenset[str]:
        """Entry ids the tenant's ``scope`` withholds (tombstone port)."""
        return self._store.invalidated_ids(self.tenant_id, scope)
