from __future__ import annotations

from typing import Any

import pytest

from om_core.errors import (
    AmbiguousInputError,
    InvalidInputError,
    InvalidMemoryIdError,
    NonMessageCursorError,
    OversizedPageError,
    UnknownCursorError,
    WrongSessionError,
)
from om_core.ledger.models import SessionEntry
from om_core.read.paging import recall_branch_page
from om_core.read.recall import recall_memory
from om_core.read.recall_tool import RecallMemoryTool

from .builders import Branch, mid, obs, ref


def _session() -> Branch:
    b = Branch()
    u = b.user("my api key is sk-secret")  # e1
    call = b.call("c1", "weather", city="Lisbon")  # e2
    res = b.result("c1", "sunny")  # e3
    b.assistant("It is sunny")  # e4
    b.observe(obs(1, u.id), obs(2, res.id), obs(3, "gone-entry"), covers="e4")  # e5
    b.reflect(ref(10, mid(1), mid(2), "eeeeeeeeeeee"))  # e6
    b.drop(mid(2))  # e7
    assert call.id == "e2"
    return b


def test_observation_recall_returns_its_raw_sources() -> None:
    b = _session()
    result = recall_memory(b.entries, mid(1))
    assert result.found and result.kind == "observation"
    assert [e.id for e in result.sources] == ["e1"]
    assert result.to_json_dict()["sourceEntryIds"] == ["e1"]


def test_a_cited_tool_result_comes_with_its_call() -> None:
    result = recall_memory(_session().entries, f"om:{mid(2)}")
    assert [e.id for e in result.sources] == ["e2", "e3"]
    assert result.dropped


def test_missing_sources_are_reported() -> None:
    result = recall_memory(_session().entries, mid(3))
    assert (
        result.found and result.sources == () and result.missing_source_entry_ids == ("gone-entry",)
    )


def test_reflection_recall_reports_dropped_and_missing_supports_but_returns_sources() -> None:
    result = recall_memory(_session().entries, f"reflection:{mid(10)}")
    assert result.kind == "reflection"
    assert result.supporting_observation_ids == (mid(1), mid(2), "eeeeeeeeeeee")
    assert result.dropped_supporting_observation_ids == (mid(2),)
    assert result.missing_supporting_observation_ids == ("eeeeeeeeeeee",)
    assert [e.id for e in result.sources] == ["e1", "e2", "e3"]


def test_unknown_and_invalid_ids() -> None:
    b = _session()
    missing = recall_memory(b.entries, mid(99))
    assert not missing.found and missing.reason == "not_found"
    assert missing.to_json_dict() == {
        "id": mid(99),
        "found": False,
        "reason": "not_found",
        **{k: v for k, v in missing.to_json_dict().items() if k not in ("id", "found", "reason")},
    }
    with pytest.raises(InvalidMemoryIdError):
        recall_memory(b.entries, "nope")


def test_revoked_ids_answer_without_derived_text() -> None:
    b = _session()
    result = recall_memory(b.entries, mid(1), invalidated_ids=["e1"])
    assert not result.found and result.reason == "revoked"
    assert result.text is None and result.sources == ()
    ref_result = recall_memory(b.entries, mid(10), invalidated_ids=["e1"])
    assert ref_result.reason == "revoked" and ref_result.text is None


def test_recall_redacts_secrets_from_sources_and_text() -> None:
    b = _session()
    result = recall_memory(b.entries, mid(1), secrets=["sk-secret"])
    dumped = str(result.to_json_dict())
    assert "sk-secret" not in dumped and "[REDACTED]" in dumped


def _paged() -> Branch:
    b = Branch()
    for i in range(30):
        b.user(f"message {i}")
    b.custom({"type": "bookkeeping"})  # e31
    return b


def test_branch_page_forward_backward_and_cursor_chain() -> None:
    b = _paged()
    page = recall_branch_page(b.entries, "e1", limit=10)
    assert [i.entry_id for i in page.items] == [f"e{i}" for i in range(2, 12)]
    assert page.has_more and page.next_cursor == "e11"
    back = recall_branch_page(b.entries, "e30", limit=5, direction="backward")
    assert [i.entry_id for i in back.items] == ["e25", "e26", "e27", "e28", "e29"]
    assert back.next_cursor == "e25"
    last = recall_branch_page(b.entries, "e25", limit=20)
    assert not last.has_more and last.next_cursor is None
    assert recall_branch_page(b.entries, "e1").items[0].message is None
    assert recall_branch_page(b.entries, "e1", detail="full").items[0].message is not None


def test_branch_page_limit_boundary() -> None:
    b = Branch()
    for i in range(120):
        b.user(f"m{i}")
    assert len(recall_branch_page(b.entries, "e1", limit=100).items) == 100
    assert len(recall_branch_page(b.entries, "e1", limit=1).items) == 1
    for bad in (101, 0, -1, True, 2.5):
        with pytest.raises(OversizedPageError):
            recall_branch_page(b.entries, "e1", limit=bad)  # type: ignore[arg-type]


def test_branch_page_fails_closed_on_bad_cursors() -> None:
    b = _paged()
    with pytest.raises(UnknownCursorError):
        recall_branch_page(b.entries, "nope")
    with pytest.raises(NonMessageCursorError):
        recall_branch_page(b.entries, "e31")
    with pytest.raises(InvalidInputError):
        recall_branch_page(b.entries, "e1", direction="sideways")  # type: ignore[arg-type]


def _tool(b: Branch, **kwargs: Any) -> RecallMemoryTool:
    sessions = {b.session_id: b.entries}
    return RecallMemoryTool(get_entries=lambda sid: sessions.get(sid, []), **kwargs)


def test_recall_tool_by_id_and_by_cursor() -> None:
    b = _session()
    tool = _tool(b, secrets=["sk-secret"])
    assert tool.definition["name"] == "recall"
    by_id = tool("s1", {"id": f"om:{mid(1)}"})
    assert by_id["found"] is True and "sk-secret" not in str(by_id)
    page = tool("s1", {"cursor": "e1", "limit": 2})
    assert [i["entryId"] for i in page["items"]] == ["e2", "e3"]


def test_recall_tool_default_page_limit_comes_from_settings() -> None:
    b = _paged()
    tool = _tool(b, page_limit=3)
    assert len(tool("s1", {"cursor": "e1"})["items"]) == 3


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"id": "abcabcabcabc", "cursor": "e1"}, AmbiguousInputError),
        ({}, AmbiguousInputError),
        ({"id": "abcabcabcabc", "limit": 3}, AmbiguousInputError),
        ({"query": "weather"}, InvalidInputError),
        ({"id": "not-an-id"}, InvalidMemoryIdError),
        ({"cursor": "nope"}, UnknownCursorError),
        ({"cursor": "e1", "limit": 101}, OversizedPageError),
        ({"cursor": 7}, InvalidInputError),
    ],
)
def test_recall_tool_fails_closed(arguments: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        _tool(_session())("s1", arguments)


def test_recall_tool_rejects_entries_of_another_session() -> None:
    b = _session()
    tool = RecallMemoryTool(get_entries=lambda sid: b.entries)
    with pytest.raises(WrongSessionError):
        tool("other-session", {"id": mid(1)})


def test_recall_tool_withholds_invalidated_ids() -> None:
    b = _session()
    tool = _tool(b, get_invalidated_ids=lambda sid: ["e1"])
    assert tool("s1", {"id": mid(1)})["reason"] == "revoked"


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"id": "not-an-id"}, InvalidMemoryIdError),
        ({"id": "om:ABCABCABCABC"}, InvalidMemoryIdError),
        ({"id": 7}, InvalidMemoryIdError),
        ({"cursor": 7}, InvalidInputError),
        ({"cursor": "e1", "limit": 101}, OversizedPageError),
        ({"cursor": "e1", "direction": "sideways"}, InvalidInputError),
        ({"cursor": "e1", "detail": "everything"}, InvalidInputError),
    ],
)
def test_recall_tool_refutes_invalid_arguments_before_reading_entries(
    arguments: dict[str, Any], error: type[Exception]
) -> None:
    b = _session()
    calls: list[str] = []

    def get_entries(session_id: str) -> list[SessionEntry]:
        calls.append(f"entries:{session_id}")
        return b.entries

    def get_invalidated(session_id: str) -> list[str]:
        calls.append(f"invalidated:{session_id}")
        return []

    tool = RecallMemoryTool(get_entries=get_entries, get_invalidated_ids=get_invalidated)
    with pytest.raises(error):
        tool("s1", arguments)
    assert calls == []


@pytest.mark.parametrize(
    "arguments",
    [{"id": mid(1)}, {"id": f"reflection:{mid(10)}"}, {"id": mid(99)}, {"cursor": "e1"}],
)
def test_recall_tool_reads_entries_for_valid_arguments(arguments: dict[str, Any]) -> None:
    b = _session()
    calls: list[str] = []

    def get_entries(session_id: str) -> list[SessionEntry]:
        calls.append(session_id)
        return b.entries

    RecallMemoryTool(get_entries=get_entries)("s1", arguments)
    assert calls == ["s1"]
