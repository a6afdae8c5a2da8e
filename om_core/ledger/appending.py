"""Appending memory entries to a host's branch, and checking they landed on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from om_core.errors import AppendNotVisibleError, WrongSessionError
from om_core.ledger.models import Frozen, SessionEntry


def record_entry(
    record: Frozen, session_id: str, entry_id: str, created_at: str | None
) -> SessionEntry:
    """The ``custom`` entry of ``session_id`` that carries ``record`` (its wire JSON as the
    entry's data), with ``parent_id=None`` so it lands at the leaf of its moment (see
    :func:`append_checked`)."""
    return SessionEntry(
        id=entry_id,
        session_id=session_id,
        parent_id=None,
        kind="custom",
        created_at=created_at,
        data=record.to_json_dict(),
    )


def check_own_entries(
    entries: Sequence[SessionEntry],
    session_id: str,
    error: type[WrongSessionError] = WrongSessionError,
) -> None:
    """Refuse, with ``error``, a branch a host's callback read that holds another session's
    entry."""
    for entry in entries:
        if entry.session_id != session_id:
            raise error(
                f"entry {entry.id!r} belongs to session {entry.session_id!r}, not {session_id!r}"
            )


def append_checked(
    append: Callable[[SessionEntry], object],
    get_entries: Callable[[], Sequence[SessionEntry]],
    entry: SessionEntry,
    what: str = "memory entry",
) -> None:
    """Append ``entry`` through the host's callback, then check it is on the current branch.

    Build ``entry`` with ``parent_id=None``: the sink appends it at the leaf of its moment.
    Naming the leaf read a moment earlier would fork the branch whenever the host appends
    messages concurrently (an agent server does, while a worker flushes) and cut those off.
    For the same reason later entries after it are fine. Raises
    :class:`AppendNotVisibleError` when the entry is not on the branch ``get_entries`` reads
    (the callback appended to another session or branch).
    """
    append(entry)
    if not any(e.id == entry.id for e in reversed(get_entries())):
        raise AppendNotVisibleError(
            f"appended {what} {entry.id!r} is not on the current branch of session "
            f"{entry.session_id!r}"
        )
