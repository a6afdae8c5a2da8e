"""The delegation funnel, pure part: which entries of a child session are copied onto its
workspace session, and what a copy looks like.

A supervisor's children each work in their own session, so by default the parent cannot
recall what a child read or did. Linking a child session to a workspace (the parent's
session, or a shared one) copies every observable message the child appends onto the
workspace; the workspace's own memory then observes those copies and mints its own
observation ids. The child's memory stays on the child, with its ids.

The rules:

- Only observable messages are copied (:func:`~om_core.ledger.fold.is_eligible_observation_source`);
  never ``om.*`` memory records, whose ``sourceEntryIds`` name the child's entries and would
  dangle on the workspace branch.
- A copy has a new id, derived from the workspace, the origin session and the origin entry
  id (:func:`funnel_copy_id`), so copying the same message twice yields the same entry and an
  append of it is idempotent.
- A copy keeps a reference to its origin in ``data.funnelOrigin`` (:func:`funnel_origin`),
  so a recall on the workspace can say which child session and entry a source came from.

Storing the copies (in the same transaction as the originals, onto the workspace's leaf) is
the store's job: :mod:`om_workers.store.funnel`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from om_core.errors import InvalidInputError
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import SessionEntry

ORIGIN_KEY = "funnelOrigin"
"""The key of a copy's ``data`` that names its origin: ``{"sessionId": ..., "entryId": ...}``."""

COPY_ID_PREFIX = "fn-"
"""How every copy id begins, so a copy is recognisable in logs and listings."""


@dataclass(frozen=True, slots=True)
class FunnelOrigin:
    """Where a workspace entry was copied from: the child session and its entry id."""

    session_id: str
    entry_id: str


def funnel_copy_id(workspace_id: str, origin_session_id: str, origin_entry_id: str) -> str:
    """The id of the copy of entry ``origin_entry_id`` of ``origin_session_id`` on
    ``workspace_id``: ``fn-`` and 40 hex digits of a SHA-256 over the three ids.

    Deterministic, so a retried copy is the same entry (an idempotent append); the workspace
    is part of it because entry ids are unique per tenant, and re-linking a child to another
    workspace must not collide with its earlier copies. The result fits the API's entry-id
    pattern, so a copy can be paged and recalled like any entry.
    """
    # NUL cannot occur in an id (the API refuses it), so the joined form is unambiguous.
    digest = hashlib.sha256(
        "\x00".join((workspace_id, origin_session_id, origin_entry_id)).encode()
    ).hexdigest()
    return f"{COPY_ID_PREFIX}{digest[:40]}"


def funnel_copy(entry: SessionEntry, workspace_id: str) -> SessionEntry:
    """The copy of ``entry`` for ``workspace_id``: a new id, the workspace's session id, no
    parent (the store puts it after the workspace's leaf), the same ``created_at`` and message,
    and ``data.funnelOrigin`` naming the origin (any other ``data`` is kept).

    Raises :class:`~om_core.errors.InvalidInputError` (a ``ValueError``) when ``entry`` is not
    an observable message (see :func:`funnel_copies` for the filtering form).
    """
    if not is_eligible_observation_source(entry):
        raise InvalidInputError(
            f"entry {entry.id!r} is not an observable message; it is never copied"
        )
    origin = {"sessionId": entry.session_id, "entryId": entry.id}
    return SessionEntry(
        id=funnel_copy_id(workspace_id, entry.session_id, entry.id),
        session_id=workspace_id,
        parent_id=None,
        kind=entry.kind,
        created_at=entry.created_at,
        message=entry.message,
        data={**(entry.data or {}), ORIGIN_KEY: origin},
    )


def funnel_copies(entries: Iterable[SessionEntry], workspace_id: str) -> list[SessionEntry]:
    """The copies of the observable messages among ``entries`` (in order) for the workspace.

    Everything else (``om.*`` memory records, compactions, system messages, other custom
    entries) is left out. Entries already on the workspace are left out too: a workspace does
    not copy onto itself.
    """
    return [
        funnel_copy(entry, workspace_id)
        for entry in entries
        if entry.session_id != workspace_id and is_eligible_observation_source(entry)
    ]


def funnel_origin(entry: SessionEntry) -> FunnelOrigin | None:
    """The origin a copy names in ``data.funnelOrigin``; ``None`` for an entry that is not a
    copy (or whose reference is malformed)."""
    value = (entry.data or {}).get(ORIGIN_KEY)
    if not isinstance(value, dict):
        return None
    session_id, entry_id = value.get("sessionId"), value.get("entryId")
    if not isinstance(session_id, str) or not isinstance(entry_id, str):
        return None
    return FunnelOrigin(session_id=session_id, entry_id=entry_id)
