"""The memory unit of work: everything one flush reads, and its only write.

A flush (observe, reflect, drop, bind) never reads a session from its root. It reads one
:class:`MemoryView` — the working ledger, the entries after the observation cursor, the scope
map, the invalidated ids and the leaf — and appends memory records through
:meth:`MemoryUnitOfWork.append`, which lands them at the leaf of its moment (fenced, in the
distributed store) and returns the new leaf. After an append the flush folds its own records
onto the view it holds instead of reading again, so a flush costs what is new, not what came
before.

:class:`InMemoryUnitOfWork` is the implementation over a host's own branch (a list, a
callback): what :class:`~om_core.flush.runtime.ObservationalMemoryRuntime` uses in process and what
the fast tests run. The SQL implementation lives in ``om_workers``; one contract suite runs
both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from om_core.errors import InvalidInputError
from om_core.ledger.appending import append_checked
from om_core.ledger.fold import fold_ledger, unscanned_entries
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map


@dataclass(frozen=True)
class MemoryView:
    """What a flush reads of one session's current branch.

    ``ledger`` is the *working* ledger: the coverage cursors, every active observation in
    record order and the ids pending reflection. An implementation may leave out what a flush
    never reads (dropped observations, reflections), so never render or audit from it.
    ``unobserved`` are the branch's entries after the observation cursor (all of them when
    there is none, or it is off the branch), in branch order: the messages the observer may
    read and any memory records among them. ``scope_map`` is the folded work-scope index,
    ``invalidated_ids`` the entry and memory ids the tombstone port withholds, ``leaf_id``
    the branch's last entry (``None`` for an empty session).
    """

    session_id: str
    ledger: ObservationalMemoryLedger = field(default_factory=ObservationalMemoryLedger)
    unobserved: tuple[SessionEntry, ...] = ()
    scope_map: WorkScopeMap = field(default_factory=WorkScopeMap)
    invalidated_ids: frozenset[str] = frozenset()
    leaf_id: str | None = None

    def after_append(self, appended: Sequence[SessionEntry], leaf_id: str) -> MemoryView:
        """The view once ``appended`` (memory records, as stored) landed and ``leaf_id`` leads.

        Records fold onto the ledger and scope map held here: a flush never re-reads what it
        wrote. Messages a host appended meanwhile are not seen; the next flush reads them.
        """
        ledger = fold_ledger(appended, initial=self.ledger, from_snapshot=False)
        return replace(
            self,
            ledger=ledger,
            unobserved=tuple(unscanned_entries([*self.unobserved, *appended], ledger)),
            scope_map=fold_work_scope_map(appended, initial=self.scope_map),
            leaf_id=leaf_id,
        )


class MemoryUnitOfWork(Protocol):
    """One session's memory, as a flush sees it (see the module docstring)."""

    @property
    def session_id(self) -> str:
        """The session every read and append is bound to."""

    def read(self) -> MemoryView:
        """The current view of the session, read as one consistent state."""

    def append(self, records: Sequence[SessionEntry]) -> str:
        """Append memory records (``parent_id=None``) at the leaf, atomically; the new leaf.

        Either every record lands, in order, on the current branch, or none does and the
        implementation raises: :class:`~om_core.errors.AppendNotVisibleError` when the
        records did not land on the branch the view reads, or the store's fencing error when
        a newer flush owns the session.
        """


AppendEntry = Callable[[SessionEntry], object]


class SessionSource(Protocol):
    """A host's session: its id and its current branch, root to leaf."""

    @property
    def id(self) -> str:
        """The session id."""

    def get_entries(self) -> Sequence[SessionEntry]:
        """The current branch, root to leaf."""


class InMemoryUnitOfWork:
    """The unit of work over a host's branch: ``session.get_entries()`` and ``append_entry``.

    ``append_entry`` must append to the branch ``get_entries`` reads; a record that does not
    land there raises :class:`~om_core.errors.AppendNotVisibleError`. The last fold is kept
    with the branch length and leaf it saw, so a growing branch is folded incrementally.
    ``invalidated_ids`` is the tombstone port (read once per :meth:`read`). ``before_write``
    runs before every append and may raise to fence the unit of work out (the host's own
    lease, say); what it raises propagates and nothing is appended.
    """

    def __init__(
        self,
        session: SessionSource,
        append_entry: AppendEntry,
        invalidated_ids: Callable[[], Iterable[str]] | None = None,
        *,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._append = append_entry
        self._invalidated = invalidated_ids
        self._before_write = before_write
        self._cache: tuple[int, str, ObservationalMemoryLedger, WorkScopeMap] | None = None

    @property
    def session_id(self) -> str:
        """The host session's id."""
        return self._session.id

    def entries(self) -> Sequence[SessionEntry]:
        """The host's current branch, root to leaf."""
        return self._session.get_entries()

    def read(self) -> MemoryView:
        """Fold the host's branch (only its new entries when it grew since the last read)."""
        branch = self.entries()
        ledger, scope_map = self._fold(branch)
        invalidated = frozenset(self._invalidated()) if self._invalidated is not None else None
        return MemoryView(
            session_id=self.session_id,
            ledger=ledger,
            unobserved=tuple(unscanned_entries(branch, ledger)),
            scope_map=scope_map,
            invalidated_ids=invalidated or frozenset(),
            leaf_id=branch[-1].id if branch else None,
        )

    def append(self, records: Sequence[SessionEntry]) -> str:
        """Append each record through the host's callback, checking it landed on the branch."""
        if not records:
            raise InvalidInputError("an append needs at least one record")
        if self._before_write is not None:
            self._before_write()
        for record in records:
            append_checked(self._append, self.entries, record)
        return records[-1].id

    def ledger(self, entries: Sequence[SessionEntry] | None = None) -> ObservationalMemoryLedger:
        """The whole folded ledger of the host's branch (or of ``entries``)."""
        return self._fold(self.entries() if entries is None else entries)[0]

    def _fold(
        self, branch: Sequence[SessionEntry]
    ) -> tuple[ObservationalMemoryLedger, WorkScopeMap]:
        cache = self._cache
        if (
            cache is not None
            and 0 < cache[0] <= len(branch)
            and branch[cache[0] - 1].id == cache[1]
        ):
            new = branch[cache[0] :]
            ledger = fold_ledger(new, initial=cache[2]) if new else cache[2]
            scope_map = fold_work_scope_map(new, initial=cache[3]) if new else cache[3]
        else:
            ledger = fold_ledger(branch)
            scope_map = fold_work_scope_map(branch)
        if branch:
            self._cache = (len(branch), branch[-1].id, ledger, scope_map)
        return ledger, scope_map


__all__ = [
    "AppendEntry",
    "InMemoryUnitOfWork",
    "MemoryUnitOfWork",
    "MemoryView",
    "SessionSource",
]
