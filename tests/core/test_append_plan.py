"""The append plan: parents, positions and segments, duplicates and conflicts, the new leaf.

Tables of cases over :func:`plan_append` (and :func:`append_lookup`, what a store reads before
planning); the SQL store's tests check that it writes what these plans say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from om_core.errors import EntryConflictError, InvalidEntryError
from om_core.ledger.append_plan import (
    AppendTarget,
    Position,
    StoredEntry,
    append_lookup,
    iso_timestamp,
    plan_append,
    wire,
)
from om_core.ledger.models import Message, ObservationsRecorded, SessionEntry
from om_core.ledger.tokens import estimate_entry_tokens

S = "s1"
NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
STAMP = "2026-01-02T03:04:05.678Z"
EARLIER = "2025-12-31T23:59:59.000Z"

EMPTY = AppendTarget(S, None, 0)
AT_X = AppendTarget(S, "x", 3)
"""A session of three entries whose leaf ``x`` continues the segment that starts at seq 1."""
X_POSITIONS: dict[str, Position] = {"x": (3, 1)}


def msg(
    entry_id: str,
    parent: str | None = None,
    *,
    role: str = "user",
    text: str | None = None,
    created_at: str | None = None,
    session: str = S,
) -> SessionEntry:
    return SessionEntry(
        id=entry_id,
        session_id=session,
        parent_id=parent,
        kind="message",
        created_at=created_at,
        message=Message(role=role, content=text or f"{role} {entry_id}"),  # type: ignore[arg-type]
    )


def note(entry_id: str, parent: str | None = None) -> SessionEntry:
    return SessionEntry(id=entry_id, session_id=S, parent_id=parent, kind="custom", data={"n": 1})


def observed(entry_id: str, covers: str) -> SessionEntry:
    record = ObservationsRecorded(observations=(), covers_up_to_id=covers)
    return SessionEntry(id=entry_id, session_id=S, kind="custom", data=record.to_json_dict())


def kept(
    entry: SessionEntry, seq: int, segment_start: int, *, in_session: bool = True
) -> StoredEntry:
    """``entry`` as stored (parent and time filled in) at ``(seq, segment_start)``."""
    return StoredEntry(in_session, seq, segment_start, wire(entry))


@dataclass(frozen=True)
class Planned:
    """A case: the target, batch, lookup results and the plan expected."""

    target: AppendTarget
    batch: list[SessionEntry]
    rows: list[tuple[str, str | None, int, int]]
    """``(id, parent, seq, segment_start)`` of every row to insert."""
    leaf: str | None
    straight: bool = True
    duplicates: tuple[str, ...] = ()
    has_memory: bool = False
    stored: dict[str, StoredEntry] = field(default_factory=dict)
    positions: dict[str, Position] = field(default_factory=dict)


PLANNED = {
    "an empty session's first entries chain from the first": Planned(
        EMPTY, [msg("a"), msg("b")], [("a", None, 1, 1), ("b", "a", 2, 1)], "b"
    ),
    "after the leaf, its segment continues": Planned(
        AT_X, [msg("a")], [("a", "x", 4, 1)], "a", positions=X_POSITIONS
    ),
    "a leaf that began a segment is continued by its child": Planned(
        AT_X, [msg("a")], [("a", "x", 4, 3)], "a", positions={"x": (3, 3)}
    ),
    "naming the leaf as parent is still straight": Planned(
        AT_X, [msg("a", "x")], [("a", "x", 4, 1)], "a", positions=X_POSITIONS
    ),
    "an earlier parent branches: a new segment, and the next entry continues it": Planned(
        AT_X,
        [msg("a", "p"), msg("b")],
        [("a", "p", 4, 4), ("b", "a", 5, 4)],
        "b",
        straight=False,
        positions={**X_POSITIONS, "p": (1, 1)},
    ),
    "a parent earlier in the same batch branches within it": Planned(
        AT_X,
        [msg("a"), msg("b"), msg("c", "a")],
        [("a", "x", 4, 1), ("b", "a", 5, 1), ("c", "a", 6, 6)],
        "c",
        straight=False,
        positions=X_POSITIONS,
    ),
    "a retried batch writes only its new entry, after the duplicate": Planned(
        AppendTarget(S, "b", 2),
        [msg("b"), msg("c")],
        [("c", "b", 3, 1)],
        "c",
        duplicates=("b",),
        stored={"b": kept(msg("b", "a", created_at=EARLIER), 2, 1)},
        positions={"b": (2, 1)},
    ),
    "a batch of duplicates moves nothing": Planned(
        AppendTarget(S, "b", 2),
        [msg("a"), msg("b")],
        [],
        "b",
        duplicates=("a", "b"),
        stored={
            "a": kept(msg("a", created_at=EARLIER), 1, 1),
            "b": kept(msg("b", "a", created_at=EARLIER), 2, 1),
        },
    ),
    "a duplicate earlier on the branch is where the next entry branches": Planned(
        AT_X,
        [msg("a"), msg("n")],
        [("n", "a", 4, 4)],
        "n",
        straight=False,
        duplicates=("a",),
        stored={"a": kept(msg("a", created_at=EARLIER), 1, 1)},
        positions=X_POSITIONS,
    ),
    "custom entries are memory kinds": Planned(
        AT_X,
        [msg("a"), note("n")],
        [("a", "x", 4, 1), ("n", "a", 5, 1)],
        "n",
        has_memory=True,
        positions=X_POSITIONS,
    ),
}


@pytest.mark.parametrize("case", PLANNED.values(), ids=PLANNED.keys())
def test_a_plan_places_every_entry(case: Planned) -> None:
    plan = plan_append(case.target, case.batch, case.stored, case.positions, now=NOW)
    assert [(r.id, r.parent_id, r.seq, r.segment_start) for r in plan.rows] == case.rows
    assert plan.leaf_id == case.leaf
    assert plan.straight is case.straight
    assert plan.has_memory is case.has_memory
    assert plan.duplicate_ids == case.duplicates
    assert plan.appended_ids == tuple(row[0] for row in case.rows)
    assert plan.entry_count == case.target.entry_count + len(case.rows)
    # The answer lists the whole batch, in order, each as stored.
    assert [e.id for e in plan.entries] == [e.id for e in case.batch]
    assert [e.id for e in plan.written] == list(plan.appended_ids)
    for row, entry in zip(plan.rows, plan.written, strict=True):
        assert row.payload == wire(entry) and entry.parent_id == row.parent_id
        assert plan.positions[row.id] == (row.seq, row.segment_start)
    for entry_id in case.duplicates:
        stored = case.stored[entry_id]
        assert plan.positions[entry_id] == (stored.seq, stored.segment_start)
        assert wire(next(e for e in plan.entries if e.id == entry_id)) == stored.payload


def test_defaults_fill_parent_and_time_and_keep_what_is_given() -> None:
    batch = [msg("a", created_at=EARLIER), msg("b")]
    plan = plan_append(AT_X, batch, {}, X_POSITIONS, now=NOW)
    assert [(e.parent_id, e.created_at) for e in plan.entries] == [("x", EARLIER), ("a", STAMP)]
    # The caller's entries are not changed: the plan holds copies.
    assert batch[1].parent_id is None and batch[1].created_at is None


def test_only_observable_messages_add_unobserved_tokens() -> None:
    batch = [
        msg("u", text="a user asks something long enough to count"),
        msg("a", role="assistant", text="and the assistant answers"),
        msg("sys", role="system", text="a system prompt is never observed"),
        note("n"),
    ]
    plan = plan_append(AT_X, batch, {}, X_POSITIONS, now=NOW)
    tokens = {row.id: row.eligible_tokens for row in plan.rows}
    assert tokens == {
        "u": estimate_entry_tokens(batch[0]),
        "a": estimate_entry_tokens(batch[1]),
        "sys": 0,
        "n": 0,
    }
    assert plan.added_tokens == tokens["u"] + tokens["a"] > 0
    assert [row.kind for row in plan.rows] == ["message", "message", "message", "custom"]


REFUSED: dict[str, tuple[Any, list[SessionEntry], dict[str, StoredEntry], dict[str, Position]]] = {
    "an empty batch": (InvalidEntryError, [], {}, {}),
    "an entry of another session": (InvalidEntryError, [msg("a", session="s2")], {}, {}),
    "an id twice in one batch": (InvalidEntryError, [msg("a"), msg("a")], {}, X_POSITIONS),
    "a parent the session does not have": (InvalidEntryError, [msg("a", "nope")], {}, X_POSITIONS),
    "a parent later in the batch": (InvalidEntryError, [msg("a", "b"), msg("b")], {}, X_POSITIONS),
    "an id stored with other content": (
        EntryConflictError,
        [msg("a", text="two")],
        {"a": kept(msg("a", "x", text="one", created_at=EARLIER), 4, 1)},
        X_POSITIONS,
    ),
    "an id stored with another parent": (
        EntryConflictError,
        [msg("a", "w")],
        {"a": kept(msg("a", "x", created_at=EARLIER), 4, 1)},
        {**X_POSITIONS, "w": (2, 1)},
    ),
    "an id stored with another time": (
        EntryConflictError,
        [msg("a", created_at=STAMP)],
        {"a": kept(msg("a", "x", created_at=EARLIER), 4, 1)},
        X_POSITIONS,
    ),
    "an id stored in another session of the tenant": (
        EntryConflictError,
        [msg("a")],
        {"a": kept(msg("a", "x", created_at=EARLIER), 1, 1, in_session=False)},
        X_POSITIONS,
    ),
}


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_a_batch_that_cannot_be_appended_is_refused_whole(case: Any) -> None:
    error, batch, stored, positions = case
    with pytest.raises(error) as raised:
        plan_append(AT_X, batch, stored, positions, now=NOW)
    if error is EntryConflictError:
        assert raised.value.entry_id == "a"


def test_a_first_entry_naming_a_parent_in_an_empty_session_is_refused() -> None:
    with pytest.raises(InvalidEntryError):
        plan_append(EMPTY, [msg("a", "x")], {}, {}, now=NOW)


def test_the_lookup_names_the_batch_and_what_it_refers_to() -> None:
    batch = [msg("a", "p"), msg("b"), observed("r", covers="m9"), msg("c", "a")]
    ids, refs = append_lookup(AT_X, batch)
    assert ids == ("a", "b", "r", "c")
    # The leaf, explicit parents and coverage cursors, sorted; never the batch's own ids.
    assert refs == ("m9", "p", "x")
    assert append_lookup(EMPTY, [msg("a")]) == (("a",), ())
    with pytest.raises(InvalidEntryError):
        append_lookup(AT_X, [])


def test_timestamps_are_written_as_javascript_writes_them() -> None:
    assert iso_timestamp(NOW) == STAMP
    plus_one = NOW.astimezone(timezone(timedelta(hours=1)))
    assert iso_timestamp(plus_one) == STAMP
