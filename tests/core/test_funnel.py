"""The funnel's pure rules: what is copied, the ids copies get, and the origin they keep."""

from __future__ import annotations

import pytest

from om_core import funnel_copies, funnel_copy_id, funnel_origin
from om_core.ledger.funnel import COPY_ID_PREFIX, ORIGIN_KEY, FunnelOrigin, funnel_copy
from om_core.ledger.models import Message, SessionEntry


def _message(entry_id: str, role: str = "user", **extra: object) -> SessionEntry:
    return SessionEntry(
        id=entry_id,
        session_id="child",
        kind="message",
        created_at="2026-01-01T00:00:00.000Z",
        message=Message(role=role, content=f"{role} says {entry_id}"),  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )


def test_only_observable_messages_are_copied() -> None:
    entries = [
        _message("u1"),
        _message("s1", "system"),
        SessionEntry(
            id="r1", session_id="child", kind="custom", data={"type": "om.observations.recorded"}
        ),
        SessionEntry(id="x1", session_id="child", kind="custom", data={"type": "note"}),
        SessionEntry(id="c1", session_id="child", kind="compaction", summary="s", data={}),
        _message("a1", "assistant"),
        _message("t1", "tool", parent_id="a1"),
    ]
    copies = funnel_copies(entries, "ws")
    assert [funnel_origin(c) for c in copies] == [
        FunnelOrigin("child", "u1"),
        FunnelOrigin("child", "a1"),
        FunnelOrigin("child", "t1"),
    ]
    with pytest.raises(ValueError, match="never copied"):
        funnel_copy(entries[2], "ws")
    # A workspace's own entries are not copied onto itself.
    own = SessionEntry(id="w1", session_id="ws", kind="message", message=Message(role="user"))
    assert funnel_copies([own], "ws") == []


def test_a_copy_is_a_new_entry_of_the_workspace_keeping_content_and_origin() -> None:
    original = _message("u1", data={"tag": "kept"})
    copy = funnel_copy(original, "ws")
    assert copy.id == funnel_copy_id("ws", "child", "u1") != original.id
    assert copy.id.startswith(COPY_ID_PREFIX) and len(copy.id) == len(COPY_ID_PREFIX) + 40
    assert (copy.session_id, copy.parent_id) == ("ws", None)
    assert (copy.message, copy.created_at) == (original.message, original.created_at)
    assert copy.data == {"tag": "kept", ORIGIN_KEY: {"sessionId": "child", "entryId": "u1"}}
    assert funnel_copy(original, "ws") == copy  # deterministic: a retry is the same entry


def test_copy_ids_differ_by_workspace_session_and_entry() -> None:
    ids = {
        funnel_copy_id("ws", "child", "e1"),
        funnel_copy_id("ws2", "child", "e1"),
        funnel_copy_id("ws", "child2", "e1"),
        funnel_copy_id("ws", "child", "e2"),
        # Joining with a separator keeps ("a", "bc") and ("ab", "c") apart.
        funnel_copy_id("ws", "a", "bc"),
        funnel_copy_id("ws", "ab", "c"),
    }
    assert len(ids) == 6


def test_funnel_origin_of_entries_that_are_not_copies() -> None:
    assert funnel_origin(_message("u1")) is None
    assert funnel_origin(_message("u1", data={ORIGIN_KEY: "child/u1"})) is None
    assert funnel_origin(_message("u1", data={ORIGIN_KEY: {"sessionId": "c"}})) is None
