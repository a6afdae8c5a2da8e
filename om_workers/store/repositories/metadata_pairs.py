"""The index of the sessions' metadata pairs (``session_metadata_pairs``): what a tenant-wide
search narrowed by metadata, and an erasure by subject, read to find their sessions.

One row per pair a narrowing can name (:func:`~om_core.read.search_narrowing.narrowable_pairs`),
written with the session (its metadata never changes) and deleted when an erasure hides it, so
the lookup reads the matching rows and not the tenant's sessions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Select, bindparam, delete, exists, insert, select

from om_core.read.search_narrowing import MetadataNarrowing, narrowable_pairs
from om_workers.store.driver import FastStatement
from om_workers.store.schema import session_metadata_pairs, sessions

_INSERT = FastStatement(insert(session_metadata_pairs))
_DROP = delete(session_metadata_pairs).where(
    session_metadata_pairs.c.session_pk == bindparam("session")
)


@functools.cache
def _matching_query(count: int, *, limited: bool) -> Select[int, str]:
    """The ``(key, id)`` of the live sessions holding ``count`` pairs (``k0``/``v0`` ...), in
    key order, up to ``:limit`` when ``limited``: the rows of the first pair, in the index's
    order, each kept when the other pairs are there too. Built at first use, once per shape
    (all of them at import cost a process 10 ms of start-up)."""
    pairs = session_metadata_pairs
    first = pairs.alias("p0")

    def held(alias: Any, n: int) -> tuple[Any, ...]:
        return (
            alias.c.tenant_id == bindparam("tenant"),
            alias.c.key == bindparam(f"k{n}"),
            alias.c.value == bindparam(f"v{n}"),
        )

    others = [pairs.alias(f"p{n}") for n in range(1, count)]
    also = [
        exists().where(*held(other, n), other.c.session_pk == first.c.session_pk)
        for n, other in enumerate(others, start=1)
    ]
    query = (
        select(first.c.session_pk, sessions.c.id)
        .select_from(first.join(sessions, sessions.c.pk == first.c.session_pk))
        .where(*held(first, 0), *also, sessions.c.erased_at.is_(None))
        .order_by(first.c.session_pk)
    )
    return query.limit(bindparam("limit")) if limited else query


def write_pairs(
    connection: Connection, tenant_id: str, session_pk: int, metadata: Mapping[str, Any]
) -> None:
    """Index the pairs of a new session's ``metadata`` (none when it names no pair)."""
    rows = [
        {"tenant_id": tenant_id, "key": key, "value": value, "session_pk": session_pk}
        for key, value in narrowable_pairs(metadata)
    ]
    _INSERT.insert_rows(connection, rows)


def drop_pairs(connection: Connection, session_pk: int) -> None:
    """Forget a session's pairs (it is being erased)."""
    connection.execute(_DROP, {"session": session_pk})


def matching_sessions(
    connection: Connection, tenant_id: str, narrowing: MetadataNarrowing, limit: int | None
) -> list[tuple[int, str]]:
    """``(key, id)`` of the tenant's live sessions whose metadata holds every pair of
    ``narrowing``, in key order, at most ``limit`` (``None``: all of them). Reads the index
    rows of the narrowing's first pair, not the tenant's other sessions; a pair
    :func:`~om_core.read.search_narrowing.narrowable_pairs` does not give is never indexed,
    and finds none."""
    params: dict[str, Any] = {"tenant": tenant_id} | ({} if limit is None else {"limit": limit})
    for n, (key, value) in enumerate(narrowing.pairs):
        params |= {f"k{n}": key, f"v{n}": value}
    statement = _matching_query(len(narrowing.pairs), limited=limit is not None)
    return [(int(pk), session_id) for pk, session_id in connection.execute(statement, params)]
