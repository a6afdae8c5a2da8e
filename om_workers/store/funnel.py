"""The delegation funnel in the store: links, and copies written with their originals.

A session linked to a workspace (``sessions.workspace_id``) has every observable message
appended to it copied onto the workspace (what is copied, and how a copy looks, is pure:
:mod:`om_core.ledger.funnel`). The copy is written **in the same transaction as the
original**, by :func:`append_with_copies`, so a crash can never leave an original without its
copy, or a copy without its original: either both commit or neither does.

Concurrent children of one workspace are serialised on the workspace row: the copy step
locks it like any append does (``uow.sessions.lock``: ``FOR UPDATE`` on PostgreSQL; SQLite's
``BEGIN IMMEDIATE`` already serialises every writer), so each copy goes after the workspace's
leaf of its moment and the workspace stays one unforked branch. Locks are always taken child
first, then workspace; funnels do not chain (a workspace is never itself linked), so no two
appends can wait on each other in a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from om_core.ledger.funnel import funnel_copies
from om_core.ledger.models import SessionEntry
from om_workers.errors import (
    InvalidLinkError,
    LinkConflictError,
    SessionNotFoundError,
    WorkspaceMissingError,
)
from om_workers.store.appends import append_locked
from om_workers.store.records import AppendResult
from om_workers.store.repositories import LockedSession
from om_workers.store.unit_of_work import SqlUnitOfWork


def append_with_copies(
    uow: SqlUnitOfWork,
    session: LockedSession,
    batch: Sequence[SessionEntry],
    *,
    now: datetime,
) -> AppendResult:
    """Append ``batch`` to the locked ``session`` and, when it is linked, copy the newly
    written observable messages onto its workspace, in this one unit of work.

    Entries reported as duplicates are not copied again: their copies were written with them.
    Raises what :func:`~om_workers.store.appends.append_locked` raises (for the batch or its
    copies; an ``EntryConflictError`` for a copy means the workspace already holds its id
    with other content), and :class:`WorkspaceMissingError` when the linked workspace no
    longer exists. On any error the unit of work rolls back: neither the originals nor the
    copies are written.
    """
    result = append_locked(uow, session, batch, now=now)
    if session.workspace_id is None or not result.appended_ids:
        return result
    new = set(result.appended_ids)
    copies = funnel_copies((e for e in result.entries if e.id in new), session.workspace_id)
    if not copies:
        return result
    try:
        workspace = uow.sessions.lock(session.tenant_id, session.workspace_id)
    except SessionNotFoundError:
        raise WorkspaceMissingError(
            f"session {session.id!r} is linked to workspace {session.workspace_id!r}, "
            "which no longer exists"
        ) from None
    append_locked(uow, workspace, copies, now=now)
    return result


def check_link(
    uow: SqlUnitOfWork, tenant_id: str, session_id: str, workspace_id: str
) -> LockedSession:
    """Check that ``session_id`` may be linked to ``workspace_id`` and lock the workspace row
    (the caller has locked the session's, or is creating it).

    Raises :class:`InvalidLinkError` for a link to itself, :class:`SessionNotFoundError` when
    the tenant has no such workspace (another tenant's session is reported the same), and
    :class:`LinkConflictError` when the workspace is itself linked or ``session_id`` is the
    workspace of other sessions: a chain would copy copies and could order locks in a cycle.
    """
    if workspace_id == session_id:
        raise InvalidLinkError(f"session {session_id!r} cannot be its own workspace")
    # Session first, then workspace, as an append's copy step locks them. Only a request this
    # check refuses anyway (linking W to C while C, linked to W, appends) can meet an append
    # in a lock cycle; PostgreSQL then aborts one of the two (a retryable StoreUnavailable).
    workspace = uow.sessions.lock(tenant_id, workspace_id)
    if workspace.workspace_id is not None:
        raise LinkConflictError(
            f"workspace {workspace_id!r} is itself linked to {workspace.workspace_id!r}; "
            "funnels do not chain"
        )
    linked_here = uow.links.one_linked_to(tenant_id, session_id)
    if linked_here is not None:
        raise LinkConflictError(
            f"session {session_id!r} is the workspace of {linked_here!r}; funnels do not chain"
        )
    return workspace
