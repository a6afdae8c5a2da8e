"""Revocation wiring: one tombstone set feeds both the read path and the write path.

Read path: :func:`list_invalidated_ids` names the ids one exact scope withholds right now; pass
them as ``invalidated_ids`` to projection, context, compaction and recall, so memory resting on
a revoked source is not injected even before any drop entry exists.

Write path: :class:`ObservationalMemoryDropHandler` folds the session once and appends one
``om.observations.dropped`` entry naming every active observation whose id or sources intersect
the tombstones, so the ledger itself retires them for audit. It carries ids only (no text) and
no ``coversUpToId``: a tombstone set is not a coverage position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from om_core.errors import InvalidInputError
from om_core.flush.unit_of_work import MemoryUnitOfWork
from om_core.ledger.appending import append_checked, check_own_entries, record_entry
from om_core.ledger.fold import fold_ledger
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    Frozen,
    ObservationalMemoryLedger,
    ObservationsDropped,
    SessionEntry,
)

TombstoneReason = Literal["revoked", "deleted", "corrected"]
"""``revoked`` and ``deleted`` withhold the id; ``corrected`` marks it amended but visible."""


class Tombstone(Frozen):
    """An invalidation of one id (an entry, source or memory id) within one exact scope."""

    id: str = Field(min_length=1, max_length=256)
    scope: str = Field(min_length=1, max_length=512)
    reason: TombstoneReason = "revoked"


@runtime_checkable
class TombstoneSource(Protocol):
    """The port a store implements: the tombstones recorded for one exact scope."""

    def list_tombstones(self, scope: str) -> Iterable[Tombstone]:
        """Every tombstone of ``scope``; a store without invalidation returns none."""


def list_invalidated_ids(
    tombstones: TombstoneSource | Iterable[Tombstone], scope: str
) -> tuple[str, ...]:
    """The ids ``scope`` currently withholds, sorted: one read of the tombstone source.

    Only tombstones of exactly ``scope`` count (no prefix or parent matching). ``corrected``
    ids stay visible, unless the same id also has a withholding tombstone: withholding wins.
    """
    if isinstance(tombstones, TombstoneSource):
        items: Iterable[Tombstone] = tombstones.list_tombstones(scope)
    else:
        items = tombstones
    return tuple(sorted({t.id for t in items if t.scope == scope and t.reason != "corrected"}))


def observations_resting_on(
    ledger: ObservationalMemoryLedger, invalidated_ids: Iterable[str]
) -> tuple[str, ...]:
    """Active observations (record order) whose id or any source id is invalidated."""
    blocked = frozenset(invalidated_ids)
    if not blocked:
        return ()
    return tuple(
        o.id
        for o in ledger.active_observations
        if o.id in blocked or not blocked.isdisjoint(o.source_entry_ids)
    )


class ObservationalMemoryDropHandler:
    """The observational-memory leg of a deletion propagator (``kind = "observational"``).

    Register it with the same ``session_id`` / ``append_entry`` pair the runtime uses. Entries
    come from ``entries=`` on each call or from ``get_entries``; every entry must belong to
    ``session_id`` (:class:`~om_core.errors.WrongSessionError` otherwise, nothing appended).
    """

    kind = "observational"

    def __init__(
        self,
        *,
        session_id: str,
        append_entry: Callable[[SessionEntry], object],
        get_entries: Callable[[], Sequence[SessionEntry]] | None = None,
        new_entry_id: Callable[[], str] = create_memory_id,
        now: Callable[[], str] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInputError("session_id must be a non-empty string")
        self.session_id = session_id
        self._append = append_entry
        self._get_entries = get_entries
        self._new_entry_id = new_entry_id
        self._now = now

    def delete(
        self, ids: Iterable[str], entries: Sequence[SessionEntry] | None = None
    ) -> tuple[str, ...]:
        """Drop every active observation resting on ``ids``; return the dropped ids.

        Appends exactly one ``om.observations.dropped`` entry when anything matches, and
        nothing otherwise. Raises :class:`~om_core.errors.InvalidInputError` when no entries
        were given and there is no ``get_entries``, :class:`~om_core.errors.WrongSessionError`
        for a foreign entry, and :class:`~om_core.errors.AppendNotVisibleError` when
        ``get_entries`` shows the appended entry is not the branch leaf.
        """
        if entries is None:
            if self._get_entries is None:
                raise InvalidInputError("pass entries= or construct the handler with get_entries")
            entries = self._get_entries()
        check_own_entries(entries, self.session_id)
        dropped = observations_resting_on(fold_ledger(entries), ids)
        if not dropped:
            return ()
        record = ObservationsDropped(observation_ids=dropped)
        now = self._now() if self._now is not None else None
        entry = record_entry(record, self.session_id, self._new_entry_id(), now)
        if self._get_entries is not None:
            append_checked(self._append, self._get_entries, entry, "drop entry")
        else:
            self._append(entry)
        return dropped


def drop_resting_on(
    unit_of_work: MemoryUnitOfWork,
    ids: Iterable[str],
    *,
    new_entry_id: Callable[[], str] = create_memory_id,
    now: Callable[[], str] | None = None,
) -> tuple[str, ...]:
    """Drop every active observation resting on ``ids`` through a memory unit of work.

    One read of the view and at most one ``om.observations.dropped`` append: the same record
    :class:`ObservationalMemoryDropHandler` writes, without folding the branch from its root.
    Returns the dropped ids; raises what the unit of work's ``append`` raises.
    """
    dropped = observations_resting_on(unit_of_work.read().ledger, ids)
    if dropped:
        record = ObservationsDropped(observation_ids=dropped)
        at = now() if now is not None else None
        unit_of_work.append([record_entry(record, unit_of_work.session_id, new_entry_id(), at)])
    return dropped
