"""Appending a batch to a locked session: look up, plan, write.

The decision is pure (:func:`om_core.ledger.append_plan.plan_append`): which entries are new,
their parents, positions and segments, duplicates and conflicts, the new leaf. Here the store
only reads what the plan needs, in one lookup, and writes what it says: the rows, the memory
state (advanced over a straight append's records, refreshed when the leaf left the straight
line) and the leaf. The caller holds the session's write lock for the whole unit of work
(:meth:`~om_workers.store.repositories.SessionRepository.lock`), so the leaf and entry count
the plan starts from stay the session's until commit; the plan raises before anything is
written, so a batch that fails writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

from om_core.ledger.append_plan import append_lookup, plan_append
from om_core.ledger.models import SessionEntry
from om_workers.store.records import AppendResult
from om_workers.store.repositories import LockedSession
from om_workers.store.unit_of_work import SqlUnitOfWork


def append_locked(
    uow: SqlUnitOfWork, session: LockedSession, batch: Sequence[SessionEntry], *, now: datetime
) -> AppendResult:
    """Append ``batch`` to the locked session, in order, and move the leaf (see
    :func:`~om_core.ledger.append_plan.plan_append` for parents, duplicates and conflicts).

    Raises :class:`~om_core.errors.InvalidEntryError` and
    :class:`~om_core.errors.EntryConflictError` before writing anything, and the store's
    errors. Either every new entry is written or, once the unit of work rolls back, none is.
    """
    target = session.target
    ids, refs = append_lookup(target, batch)
    stored, positions = uow.entries.look_up(session, ids, refs)
    plan = plan_append(target, batch, stored, positions, now=now)
    if plan.rows:
        assert plan.leaf_id is not None  # rows were planned
        uow.entries.insert(session, plan.rows, now=now)
        if target.leaf_id is not None:
            # An agent reads its context right after appending its run: that read then finds
            # these rows in the process's tail cache rather than reading them back.
            continued = partial(uow.entries.cache_continued, session.pk, target.leaf_id, plan.rows)
            uow.after_commit(continued)
        recounted: int | None = None
        if not plan.straight:
            recounted = uow.memory.refresh(session.pk, plan.leaf_id, now=now)
        elif plan.has_memory:
            recounted = uow.memory.advance(session, plan, now=now)
        uow.sessions.move_leaf(
            session.pk,
            plan.leaf_id,
            plan.entry_count,
            now=now,
            unobserved_tokens=recounted,
            added_tokens=plan.added_tokens,
        )
    return AppendResult(
        entries=plan.entries,
        appended_ids=plan.appended_ids,
        duplicate_ids=plan.duplicate_ids,
        leaf_id=plan.leaf_id,
    )
