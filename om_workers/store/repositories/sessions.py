"""The session rows: finding, locking and creating them, their leaf and epoch, and listing.

Every statement is built once, with bound parameters: constructing one costs several times
more than running it on SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Connection, bindparam, func, insert, select, true, update

from om_core.ledger.append_plan import AppendTarget
from om_core.read.search_narrowing import MetadataNarrowing
from om_workers.errors import SessionNotFoundError, TenantNotFoundError
from om_workers.store.branch import Segment, segment_cte
from om_workers.store.driver import FastStatement
from om_workers.store.listing import listing_query
from om_workers.store.memory_view import WITHHELD_IDS
from om_workers.store.records import SessionInfo, SessionRef, session_info
from om_workers.store.repositories.metadata_pairs import matching_sessions, write_pairs
from om_workers.store.schema import sessions, snapshots, tenants
from om_workers.store.snapshot import SNAPSHOT_COLUMNS, Snapshot, joined_snapshot

_THIS_SESSION = (
    sessions.c.tenant_id == bindparam("tenant_id"),
    sessions.c.id == bindparam("session_id"),
)
_TENANT = select(tenants.c.id).where(tenants.c.id == bindparam("tenant_id"))
_ROW = select(sessions).where(*_THIS_SESSION)
_ROW_FAST = FastStatement(_ROW)
_ROW_BY_PK = select(sessions).where(sessions.c.pk == bindparam("session"))
_HEAD = select(sessions.c.pk, sessions.c.leaf_id, sessions.c.rewritten_at).where(*_THIS_SESSION)


def _context_head_query(*, postgresql: bool) -> Any:
    # A context read's one round trip before its tail: the session row, its snapshot row, the
    # ids its tombstone scope withholds (one JSON array) and its branch's segments; the
    # recursive walk starts from the row's leaf and key, read as scalar subqueries.
    aggregate = func.json_agg if postgresql else func.json_group_array
    ids = WITHHELD_IDS.subquery("withheld_ids")
    withheld = select(aggregate(ids.c.entry_id, type_=JSON)).scalar_subquery().label("withheld")
    head = (
        select(sessions, *SNAPSHOT_COLUMNS, withheld)
        .select_from(sessions.outerjoin(snapshots, snapshots.c.session_pk == sessions.c.pk))
        .where(*_THIS_SESSION)
        .cte("session_head")
    )
    seg = segment_cte(
        select(head.c.pk).scalar_subquery(),
        select(head.c.leaf_id).scalar_subquery(),
        lateral=postgresql,
    )
    return (
        select(head, seg.c.lo, seg.c.hi).select_from(head.outerjoin(seg, true())).order_by(seg.c.lo)
    )


_CONTEXT_HEAD_PG = _context_head_query(postgresql=True)
_CONTEXT_HEAD_FAST = FastStatement(
    _context_head_query(postgresql=False), postgresql=_CONTEXT_HEAD_PG
)
_LOCK = (
    select(
        sessions.c.pk,
        sessions.c.tenant_id,
        sessions.c.id,
        sessions.c.leaf_id,
        sessions.c.epoch,
        sessions.c.entry_count,
        sessions.c.workspace_id,
        *SNAPSHOT_COLUMNS,
    )
    .select_from(sessions.outerjoin(snapshots, snapshots.c.session_pk == sessions.c.pk))
    .where(*_THIS_SESSION)
)
_LOCK_FAST = FastStatement(_LOCK, postgresql=_LOCK.with_for_update(of=sessions))
_INSERTED_COLUMNS = (
    "tenant_id",
    "id",
    "leaf_id",
    "epoch",
    "entry_count",
    "unobserved_tokens",
    "meta",
    "created_at",
    "updated_at",
    "workspace_id",
)
_INSERT = FastStatement(
    insert(sessions)
    .values({name: bindparam(name) for name in _INSERTED_COLUMNS})
    .returning(sessions.c.pk)
)
_RAISE_EPOCH = (
    update(sessions)
    # An UPDATE may not bind a parameter named like one of its table's columns.
    .where(sessions.c.tenant_id == bindparam("tenant"), sessions.c.id == bindparam("session_id"))
    .values(epoch=sessions.c.epoch + 1, updated_at=bindparam("now"))
    .returning(sessions.c.epoch)
)
_RAISE_EPOCH_BY_PK = FastStatement(
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(epoch=sessions.c.epoch + 1, updated_at=bindparam("now"))
    .returning(sessions.c.epoch)
)
_MARK_REWRITTEN = (
    update(sessions)
    .where(sessions.c.pk == bindparam("session"))
    .values(rewritten_at=bindparam("now"), updated_at=bindparam("now"))
)


def _move_leaf(unobserved_tokens: Any, **values: Any) -> Any:
    """The UPDATE moving a session's leaf to ``new_leaf`` at ``now``: its unobserved tokens
    become ``unobserved_tokens``, and ``values`` set what else changes with it."""
    return (
        update(sessions)
        .where(sessions.c.pk == bindparam("session"))
        .values(
            leaf_id=bindparam("new_leaf"),
            updated_at=bindparam("now"),
            unobserved_tokens=unobserved_tokens,
            **values,
        )
    )


_MOVE_LEAF = FastStatement(_move_leaf(bindparam("new_tokens"), entry_count=bindparam("new_count")))
_MOVE_LEAF_ADDING = FastStatement(
    _move_leaf(
        sessions.c.unobserved_tokens + bindparam("added_tokens"),
        entry_count=bindparam("new_count"),
    )
)
# A fork moves the leaf to an entry already stored: the entry count stays.
_FORK = _move_leaf(bindparam("new_tokens"))
_OVER_UNOBSERVED = (
    select(sessions.c.tenant_id, sessions.c.id, sessions.c.unobserved_tokens)
    .where(sessions.c.unobserved_tokens >= bindparam("threshold"), sessions.c.erased_at.is_(None))
    .order_by(sessions.c.unobserved_tokens.desc(), sessions.c.pk)
    .limit(bindparam("limit"))
)


@dataclass(frozen=True, slots=True)
class SessionHead:
    """What a read needs of the session row: its key, its leaf (``None`` while empty) and
    when its stored entries were last rewritten in place (``None``: never; see
    ``sessions.rewritten_at``), which versions every cache of its parsed entries."""

    pk: int
    leaf_id: str | None
    rewritten_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ContextHead:
    """What a context read reads first: the session's bookkeeping (``info``) and key
    (``pk``), its current branch's seq ranges (ascending; empty while it has no entries), its
    snapshot row (``None`` without one; not yet checked against the branch) and the entry ids
    the session's tombstone scope withholds."""

    info: SessionInfo
    pk: int
    segments: list[Segment]
    snapshot: Snapshot | None
    withheld: frozenset[str]

    @property
    def head(self) -> SessionHead:
        """The session's key, leaf and last rewrite, as :meth:`SessionRepository.head` reads."""
        return SessionHead(self.pk, self.info.leaf_id, self.info.rewritten_at)


@dataclass(frozen=True, slots=True)
class LockedSession:
    """The session row as read under the write lock, with its snapshot row (``workspace_id``:
    the funnel's link)."""

    pk: int
    tenant_id: str
    id: str
    leaf_id: str | None
    epoch: int
    entry_count: int
    snapshot: Snapshot | None
    workspace_id: str | None = None

    @property
    def target(self) -> AppendTarget:
        """The session as an append plan sees it (:mod:`om_core.ledger.append_plan`)."""
        return AppendTarget(self.id, self.leaf_id, self.entry_count)


def _missing(session_id: str) -> SessionNotFoundError:
    # The same answer whether the session is missing or another tenant's.
    return SessionNotFoundError(f"no session {session_id!r}")


class SessionRepository:
    """The ``sessions`` rows, on one unit of work's connection. Every lookup is scoped by
    tenant and raises :class:`SessionNotFoundError` for a missing (or another tenant's)
    session."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def require_tenant(self, tenant_id: str) -> None:
        """Raise :class:`TenantNotFoundError` unless the tenant exists."""
        if self._connection.execute(_TENANT, {"tenant_id": tenant_id}).first() is None:
            raise TenantNotFoundError(f"no tenant {tenant_id!r}")

    def info(self, tenant_id: str, session_id: str) -> SessionInfo:
        """The session's bookkeeping."""
        params = {"tenant_id": tenant_id, "session_id": session_id}
        row = _ROW_FAST.first(self._connection, params)
        if row is None:
            raise _missing(session_id)
        return session_info(row)

    def info_by_pk(self, session_pk: int) -> SessionInfo:
        """The bookkeeping of a session already found (locked) in this unit of work."""
        return session_info(self._connection.execute(_ROW_BY_PK, {"session": session_pk}).one())

    def head(self, tenant_id: str, session_id: str) -> SessionHead:
        """The session's key and leaf."""
        params = {"tenant_id": tenant_id, "session_id": session_id}
        row = self._connection.execute(_HEAD, params).first()
        if row is None:
            raise _missing(session_id)
        return SessionHead(int(row.pk), row.leaf_id, row.rewritten_at)

    def context_head(self, tenant_id: str, session_id: str, tombstone_scope: str) -> ContextHead:
        """The session's bookkeeping, key and leaf, its snapshot row, the entry ids
        ``tombstone_scope`` withholds and its current branch's seq ranges, in one round trip.
        Raises :class:`SessionNotFoundError`."""
        params = {"tenant_id": tenant_id, "session_id": session_id, "scope": tombstone_scope}
        rows = _CONTEXT_HEAD_FAST.rows(self._connection, params)
        if not rows:
            raise _missing(session_id)
        first = rows[0]
        return ContextHead(
            info=session_info(first),
            pk=int(first.pk),
            segments=[(int(row.lo), int(row.hi)) for row in rows if row.lo is not None],
            snapshot=joined_snapshot(first),
            withheld=frozenset(first.withheld or ()),  # no row: SQL's aggregate gives NULL
        )

    def matching(self, tenant_id: str, narrowing: MetadataNarrowing, limit: int) -> list[int]:
        """The keys of the tenant's sessions (not being erased) whose metadata holds every
        pair of ``narrowing``, in key order, at most ``limit``. Reads the index rows of the
        narrowing's first pair, up to ``limit`` matches: not the tenant's other sessions."""
        return [pk for pk, _ in matching_sessions(self._connection, tenant_id, narrowing, limit)]

    def exists(self, tenant_id: str, session_id: str) -> bool:
        """Whether the tenant has this session."""
        params = {"tenant_id": tenant_id, "session_id": session_id}
        return self._connection.execute(_HEAD, params).first() is not None

    def lock(self, tenant_id: str, session_id: str) -> LockedSession:
        """Read and lock the session row (and its snapshot) until the transaction ends.

        PostgreSQL takes a row lock (``FOR UPDATE``); SQLite's ``BEGIN IMMEDIATE`` already holds
        the database's write lock.
        """
        params = {"tenant_id": tenant_id, "session_id": session_id}
        row = _LOCK_FAST.first(self._connection, params)
        if row is None:
            raise _missing(session_id)
        return LockedSession(
            pk=int(row.pk),
            tenant_id=row.tenant_id,
            id=row.id,
            leaf_id=row.leaf_id,
            epoch=int(row.epoch),
            entry_count=int(row.entry_count),
            snapshot=joined_snapshot(row),
            workspace_id=row.workspace_id,
        )

    def insert(
        self,
        tenant_id: str,
        session_id: str,
        *,
        metadata: Mapping[str, Any],
        workspace_id: str | None,
        now: datetime,
    ) -> None:
        """Insert an empty session (no entries, epoch 0) and the metadata pairs a search can
        be narrowed by."""
        row = _INSERT.one(
            self._connection,
            {
                "tenant_id": tenant_id,
                "id": session_id,
                "leaf_id": None,
                "epoch": 0,
                "entry_count": 0,
                "unobserved_tokens": 0,
                "meta": dict(metadata),
                "created_at": now,
                "updated_at": now,
                "workspace_id": workspace_id,
            },
        )
        write_pairs(self._connection, tenant_id, int(row.pk), metadata)

    def raise_epoch(self, tenant_id: str, session_id: str, *, now: datetime) -> int:
        """Raise the session's fencing epoch; the new epoch."""
        params = {"tenant": tenant_id, "session_id": session_id, "now": now}
        epoch = self._connection.execute(_RAISE_EPOCH, params).scalar()
        if epoch is None:
            raise _missing(session_id)
        return int(epoch)

    def raise_epoch_of(self, session_pk: int, *, now: datetime) -> int:
        """Raise the fencing epoch of a session found in this unit of work; the new epoch."""
        params = {"session": session_pk, "now": now}
        return int(_RAISE_EPOCH_BY_PK.one(self._connection, params)[0])

    def mark_rewritten(self, session_pk: int, *, now: datetime) -> None:
        """Record that stored entries of the session changed in place (see
        ``sessions.rewritten_at``): every cache of its parsed entries is void from now on."""
        self._connection.execute(_MARK_REWRITTEN, {"session": session_pk, "now": now})

    def move_leaf(
        self,
        session_pk: int,
        leaf_id: str,
        entry_count: int,
        *,
        now: datetime,
        unobserved_tokens: int | None,
        added_tokens: int,
    ) -> None:
        """Move the leaf after an append. ``unobserved_tokens`` is the recounted total, or
        ``None`` when the append only adds ``added_tokens`` to it (messages after the leaf
        change no ledger)."""
        params: dict[str, Any] = {
            "session": session_pk,
            "new_leaf": leaf_id,
            "new_count": entry_count,
            "now": now,
        }
        if unobserved_tokens is None:
            _MOVE_LEAF_ADDING.execute(self._connection, {**params, "added_tokens": added_tokens})
        else:
            _MOVE_LEAF.execute(self._connection, {**params, "new_tokens": unobserved_tokens})

    def fork(self, session_pk: int, leaf_id: str, *, unobserved_tokens: int, now: datetime) -> None:
        """Move the leaf to an existing entry, with the new branch's unobserved tokens."""
        params = {
            "session": session_pk,
            "new_leaf": leaf_id,
            "new_tokens": unobserved_tokens,
            "now": now,
        }
        self._connection.execute(_FORK, params)

    def page(
        self,
        tenant_id: str,
        limit: int,
        after: tuple[datetime, str] | None,
        updated_since: datetime | None,
    ) -> list[SessionInfo]:
        """Up to ``limit`` of the tenant's sessions after position ``after``, newest first
        (see :func:`~om_workers.store.listing.listing_query`)."""
        query = listing_query(tenant_id, limit, after, updated_since)
        return [session_info(row) for row in self._connection.execute(query)]

    def over_unobserved(self, threshold: int, limit: int) -> list[SessionRef]:
        """Sessions of every tenant with at least ``threshold`` unobserved tokens, most
        backlogged first, at most ``limit``."""
        params = {"threshold": threshold, "limit": limit}
        rows = self._connection.execute(_OVER_UNOBSERVED, params)
        return [SessionRef(row.tenant_id, row.id, int(row.unobserved_tokens)) for row in rows]
