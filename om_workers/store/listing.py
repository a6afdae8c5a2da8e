"""Listing a tenant's sessions: newest first, in keyset pages.

The order is ``(created_at, id)`` descending. Both columns never change after a session is
created, so a cursor names a fixed position: a session created while a client pages lands
before the first page (the next listing shows it) and shifts nothing, and appends, which
move ``updated_at``, move nothing either. No session is skipped or repeated, unlike offset
paging. ``id`` breaks ties: a tenant's session ids are unique.

Each page is one range scan of the index ``ix_sessions_tenant_id_created_at_id`` (tenant,
created_at, id) inside the tenant, so its cost does not grow with other tenants' sessions.
``updated_since`` filters rows of that range (the tenant's own sessions only).

A cursor is opaque to clients: the last session's ``created_at`` and id, as URL-safe base64
of a JSON pair. A cursor this module did not write is an :class:`InvalidCursorError`.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, select, tuple_

from om_workers.errors import InvalidCursorError
from om_workers.store.schema import sessions

MAX_SESSIONS_LIMIT = 1000
"""Most sessions one page of :meth:`~om_workers.store.SqlStore.list_sessions` holds."""


def _utc(value: datetime) -> datetime:
    # A naive time is taken as UTC. Stored times are UTC, and SQLite compares them as text,
    # so every bound time must be UTC too.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def encode_cursor(created_at: datetime, session_id: str) -> str:
    """The cursor that continues after the session created at ``created_at`` with this id."""
    raw = json.dumps([_utc(created_at).isoformat(), session_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """``(created_at, session id)`` of a cursor from :func:`encode_cursor`.

    Raises :class:`InvalidCursorError` for anything else.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, session_id = json.loads(raw.decode("utf-8"))
        if not isinstance(created, str) or not isinstance(session_id, str):
            raise TypeError("cursor parts must be strings")
        return _utc(datetime.fromisoformat(created)), session_id
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError) as exc:
        raise InvalidCursorError(f"invalid cursor {cursor[:64]!r}: not from this listing") from exc


def listing_query(
    tenant_id: str,
    limit: int,
    after: tuple[datetime, str] | None = None,
    updated_since: datetime | None = None,
) -> Select[Any]:
    """The statement of one page: the tenant's sessions strictly after position ``after``
    (``(created_at, id)``) in newest-first order, at most ``limit``."""
    query = select(sessions).where(
        sessions.c.tenant_id == tenant_id, sessions.c.erased_at.is_(None)
    )
    if after is not None:
        created_at, session_id = after
        # A row comparison, so both backends serve it as one range of the index.
        query = query.where(
            tuple_(sessions.c.created_at, sessions.c.id) < tuple_(_utc(created_at), session_id)
        )
    if updated_since is not None:
        query = query.where(sessions.c.updated_at >= _utc(updated_since))
    return query.order_by(sessions.c.created_at.desc(), sessions.c.id.desc()).limit(limit)
