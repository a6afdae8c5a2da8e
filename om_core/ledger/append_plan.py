"""Deciding an append: which entries of a batch are new, where each one goes, what the leaf
becomes.

Pure: a store reads the locked session's state (:class:`AppendTarget`), looks up the ids
:func:`append_lookup` names, and asks :func:`plan_append`; then it writes the rows the
:class:`AppendPlan` lists and moves the leaf. Every check happens here, before anything is
written, so a batch that fails writes nothing.

Entries are numbered by ``seq`` (1, 2, ... in append order within a session) and grouped into
segments: a stretch of consecutive ``seq`` where each entry is the child of the one before. An
entry starts a new segment (``segment_start == seq``) unless its parent is the entry appended
just before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from om_core.errors import EntryConflictError, InvalidEntryError
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.models import OBSERVATIONS_RECORDED, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens

MEMORY_KINDS: tuple[str, ...] = ("custom", "compaction")
"""Entry kinds the ledger fold reads; every other kind leaves the ledger as it is."""

Position = tuple[int, int]
"""Where an entry of the session is stored: ``(seq, segment_start)``."""


@dataclass(frozen=True, slots=True)
class AppendTarget:
    """The session an append goes to, as read under its write lock: its id, its leaf
    (``None`` while empty) and how many entries it holds (the last ``seq``)."""

    session_id: str
    leaf_id: str | None
    entry_count: int


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """A batch id the store already holds: in this session (``in_session``) or in another
    session of the tenant, at ``(seq, segment_start)``, with its stored wire ``payload``."""

    in_session: bool
    seq: int
    segment_start: int
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PlannedRow:
    """One entry to insert: its id, parent, position, kind, the tokens it adds to the
    unobserved count (0 unless it is an observable message) and its wire ``payload`` (parent
    and ``created_at`` filled in)."""

    id: str
    parent_id: str | None
    seq: int
    segment_start: int
    kind: str
    eligible_tokens: int
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What an append writes and answers.

    ``rows`` are the new entries to insert, in order; ``entries`` the whole batch as stored
    (duplicates as they were stored before, new ones with parent and ``created_at`` filled
    in), in batch order; ``appended_ids`` and ``duplicate_ids`` split the batch. ``leaf_id``
    is the session's leaf afterwards (unchanged when nothing is new) and ``entry_count`` its
    entry count. ``straight`` is true when every new entry went right after the leaf of its
    moment (so the stored memory state only has to advance), ``has_memory`` when a new entry
    is of a kind the ledger fold reads, and ``added_tokens`` the estimated tokens of the new
    observable messages. ``positions`` holds the ``(seq, segment_start)`` of every batch
    entry and every referenced entry found.
    """

    rows: tuple[PlannedRow, ...]
    entries: tuple[SessionEntry, ...]
    appended_ids: tuple[str, ...]
    duplicate_ids: tuple[str, ...]
    leaf_id: str | None
    entry_count: int
    straight: bool
    has_memory: bool
    added_tokens: int
    positions: Mapping[str, Position]

    @property
    def written(self) -> tuple[SessionEntry, ...]:
        """The new entries as stored, in order (``entries`` without the duplicates)."""
        new = set(self.appended_ids)
        return tuple(entry for entry in self.entries if entry.id in new)


def wire(entry: SessionEntry) -> dict[str, Any]:
    """The entry's wire form: what a store keeps as its payload and compares for idempotency."""
    return entry.model_dump(mode="json", by_alias=True, exclude_none=True)


def iso_timestamp(moment: datetime) -> str:
    """``moment`` as JavaScript's ``toISOString`` writes it (UTC, milliseconds, ``Z``)."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_batch(target: AppendTarget, batch: Sequence[SessionEntry]) -> None:
    """Raise :class:`InvalidEntryError` for an empty batch, an entry naming another session
    or an id twice in the batch."""
    if not batch:
        raise InvalidEntryError("an append needs at least one entry")
    seen: set[str] = set()
    for entry in batch:
        if entry.session_id != target.session_id:
            raise InvalidEntryError(
                f"entry {entry.id!r} names session {entry.session_id!r}, not {target.session_id!r}"
            )
        if entry.id in seen:
            raise InvalidEntryError(f"entry id {entry.id!r} appears twice in one batch")
        seen.add(entry.id)


def append_lookup(
    target: AppendTarget, batch: Sequence[SessionEntry]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a store looks up before planning, after :func:`check_batch`: the batch's ids (to
    find those already stored anywhere in the tenant) and, sorted, the other ids of this
    session whose positions the plan needs: explicit parents, the leaf, and the coverage
    cursors the batch's observation records move to (so advancing the memory state needs no
    lookup of its own). Raises what :func:`check_batch` raises."""
    check_batch(target, batch)
    ids = tuple(entry.id for entry in batch)
    wanted = {entry.parent_id for entry in batch if entry.parent_id is not None}
    if target.leaf_id is not None:
        wanted.add(target.leaf_id)
    wanted.update(_cursors(batch))
    return ids, tuple(sorted(wanted - set(ids)))


def _cursors(batch: Sequence[SessionEntry]) -> set[str]:
    found = set()
    for entry in batch:
        if entry.kind == "custom" and entry.data and entry.record_type == OBSERVATIONS_RECORDED:
            cursor = entry.data.get("coversUpToId")
            if isinstance(cursor, str):
                found.add(cursor)
    return found


def plan_append(
    target: AppendTarget,
    batch: Sequence[SessionEntry],
    stored: Mapping[str, StoredEntry],
    positions: Mapping[str, Position],
    *,
    now: datetime,
) -> AppendPlan:
    """Plan appending ``batch`` to ``target``, in order.

    ``stored`` maps the batch ids already stored (in any session of the tenant) to what is
    stored; ``positions`` the referenced entries of this session that exist (see
    :func:`append_lookup`). ``now`` stamps ``created_at`` on new entries that have none (as
    :func:`iso_timestamp` writes it).

    An entry without ``parent_id`` goes after the entry before it in the batch (the first after
    the leaf); an explicit parent must be an entry of this session stored or planned before
    it. An id already stored in this session with the same content is a duplicate, not
    written again (a missing ``parent_id``/``created_at`` matches whatever was filled in when
    it was stored). Raises :class:`EntryConflictError` for an id stored with other content or
    in another session, and :class:`InvalidEntryError` for an unknown parent and what
    :func:`check_batch` raises.
    """
    check_batch(target, batch)
    known = dict(positions)
    stamp = iso_timestamp(now)
    leaf = running_parent = target.leaf_id
    next_seq = target.entry_count + 1
    straight, has_memory, added_tokens = True, False, 0
    rows: list[PlannedRow] = []
    entries: list[SessionEntry] = []
    appended: list[str] = []
    duplicates: list[str] = []
    for entry in batch:
        old = stored.get(entry.id)
        if old is not None:
            entries.append(_duplicate(entry, old))
            known[entry.id] = (old.seq, old.segment_start)
            duplicates.append(entry.id)
            running_parent = entry.id
            continue
        parent = entry.parent_id if entry.parent_id is not None else running_parent
        row, resolved = _new_row(entry, parent, next_seq, known, stamp)
        known[entry.id] = (row.seq, row.segment_start)
        straight = straight and parent == leaf
        has_memory = has_memory or entry.kind in MEMORY_KINDS
        added_tokens += row.eligible_tokens
        rows.append(row)
        entries.append(resolved)
        appended.append(entry.id)
        next_seq += 1
        leaf = running_parent = entry.id
    return AppendPlan(
        rows=tuple(rows),
        entries=tuple(entries),
        appended_ids=tuple(appended),
        duplicate_ids=tuple(duplicates),
        leaf_id=leaf,
        entry_count=next_seq - 1,
        straight=straight,
        has_memory=has_memory,
        added_tokens=added_tokens,
        positions=known,
    )


def _duplicate(entry: SessionEntry, old: StoredEntry) -> SessionEntry:
    """The stored entry ``entry`` repeats; raises :class:`EntryConflictError` unless it does."""
    if not old.in_session:
        raise EntryConflictError(entry.id)
    kept = SessionEntry.model_validate(old.payload)
    candidate = entry.model_copy(
        update={
            "parent_id": entry.parent_id if entry.parent_id is not None else kept.parent_id,
            "created_at": entry.created_at if entry.created_at is not None else kept.created_at,
        }
    )
    if wire(candidate) != old.payload:
        raise EntryConflictError(entry.id)
    return kept


def _new_row(
    entry: SessionEntry,
    parent: str | None,
    seq: int,
    known: Mapping[str, Position],
    stamp: str,
) -> tuple[PlannedRow, SessionEntry]:
    """The row of a new entry at ``seq`` under ``parent``, and the entry as stored."""
    if parent is None:
        segment_start = seq
    else:
        position = known.get(parent)
        if position is None:
            raise InvalidEntryError(
                f"entry {entry.id!r}: parent {parent!r} is not an earlier entry of this session"
            )
        # A segment continues only when the parent is the entry appended just before.
        segment_start = position[1] if position[0] == seq - 1 else seq
    resolved = entry.model_copy(
        update={"parent_id": parent, "created_at": entry.created_at or stamp}
    )
    tokens = estimate_entry_tokens(entry) if is_eligible_observation_source(entry) else 0
    row = PlannedRow(
        id=entry.id,
        parent_id=parent,
        seq=seq,
        segment_start=segment_start,
        kind=entry.kind,
        eligible_tokens=tokens,
        payload=wire(resolved),
    )
    return row, resolved
