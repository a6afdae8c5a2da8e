"""The tail walked once answers as the window functions do, for every tail of runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om_core.ledger.fold import unscanned_entries
from om_core.ledger.models import Message, SessionEntry
from om_core.read.context import _newest_fitting  # the walk over units the index replaces
from om_core.read.tail_messages import EXTEND_SCAN, TailMessages
from om_core.read.window import select_recent_message_entries, tool_units

from .builders import Branch

RUNS = ["user", "assistant", "system", "custom", "run", "orphan", "again"]
OTHER = ["late", "toolcall"]


def _steps(kinds: list[str]) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    step = st.tuples(st.sampled_from(kinds), st.integers(0, 3), st.integers(1, 400))
    return st.lists(step, max_size=30)


# Half the tails are all runs, so that most examples check the index's answers.
STEPS = st.one_of(_steps(RUNS), _steps(RUNS + OTHER))


def tail_of(steps: list[tuple[str, int, int]]) -> list[SessionEntry]:
    """A branch from ``steps``: plain messages, runs (a call and its results, its id new or
    used before), and each shape that is not a run (a result after another message, a tool
    message that calls)."""
    b = Branch()
    calls: list[str] = []
    for step, results, size in steps:
        text = "x" * size
        if step in {"user", "assistant", "system"}:
            b.message(step, text)
        elif step == "custom":
            b.custom({"type": "note", "text": text})
        elif step == "run":
            call = f"c{len(b.entries)}"
            calls.append(call)
            b.call(call, q=text)
            for _ in range(results):
                b.result(call, text)
        elif step == "orphan":
            b.result(f"gone{len(b.entries)}", text)
        elif step == "late" and calls:
            b.result(calls[results % len(calls)], text)
        elif step == "again" and calls:  # a call id again (a framework counting per run)
            call = calls[results % len(calls)]
            b.call(call, q=text)
            for _ in range(results % 2):
                b.result(call, text)
        elif step == "toolcall":
            b.message("tool", text, tool_call_id="x", tool_calls=({"id": f"t{size}", "name": "n"},))
    return b.entries


def cursor_of(entries: list[SessionEntry], pick: int) -> str | None:
    if pick == 0 or not entries:
        return None
    if pick == 1:
        return "not-on-this-branch"
    return entries[pick % len(entries)].id


def old_window(entries: list[SessionEntry], keep: int, cap: int | None) -> list[str]:
    return [e.id for e in select_recent_message_entries(entries, keep, cap)]


@settings(max_examples=400, deadline=None)
@given(STEPS, st.integers(0, 40), st.integers(0, 12), st.one_of(st.none(), st.integers(1, 600)))
def test_the_unobserved_messages_and_their_tokens_are_those_after_the_cursor(
    steps: list[tuple[str, int, int]], pick: int, keep: int, cap: int | None
) -> None:
    entries = tail_of(steps)
    cursor = cursor_of(entries, pick)
    tail = TailMessages.of(entries, cursor)
    scanned = _unscanned(entries, cursor)
    assert [e.id for e in tail.messages_from(tail.observed)] == [e.id for e in scanned]
    tokens = sum(m.estimated_tokens for e in scanned if (m := e.message))
    assert tail.tokens_from(tail.observed) == tokens
    if tail.runs:
        start = tail.window_start(keep, cap)
        assert [e.id for e in tail.messages_from(start)] == old_window(entries, keep, cap)


@settings(max_examples=400, deadline=None)
@given(STEPS, st.integers(0, 12), st.integers(0, 3000))
def test_the_newest_units_that_fit_are_those_the_walk_over_units_keeps(
    steps: list[tuple[str, int, int]], keep: int, room: int
) -> None:
    entries = tail_of(steps)
    tail = TailMessages.of(entries, None)
    if not tail.runs:
        return
    start = tail.window_start(keep)
    window = tail.messages_from(start)
    units = tool_units(window)
    assert tail.rendered_size(start) == sum(len(e.message.rendered) + 1 for e in window) - 1  # type: ignore[union-attr]
    if tail.rendered_size(start) <= room:
        return
    kept = [e.id for unit in units[_newest_fitting(units, room) :] for e in unit]
    assert [e.id for e in tail.messages_from(tail.newest_fitting(start, room))] == kept


def _unscanned(entries: list[SessionEntry], cursor: str | None) -> list[SessionEntry]:
    class Cursor:
        observation_covers_up_to_id = cursor

    return [e for e in unscanned_entries(entries, Cursor()) if e.is_eligible_observation_source]  # type: ignore[arg-type]


def _shape(*steps: str) -> bool:
    return TailMessages.of(tail_of([(s, 2, 10) for s in steps]), None).runs


@pytest.mark.parametrize(
    ("steps", "runs"),
    [
        ((), True),
        (("user", "run", "assistant"), True),
        (("run", "run", "custom", "user"), True),
        (("orphan", "user", "orphan"), True),
        (("system", "run", "system"), True),  # a system message is not in the window at all
        (("run", "user", "late"), False),  # a result apart from its call
        (("run", "again"), True),  # a call id again: its results join the latest call
        (("run", "again", "user", "late"), False),  # a result apart from the latest call
        (("toolcall",), False),  # a tool message that calls
    ],
)
def test_runs_are_told_from_other_shapes(steps: tuple[str, ...], runs: bool) -> None:
    assert _shape(*steps) is runs


def test_a_result_after_another_runs_result_is_not_a_run() -> None:
    b = Branch()
    b.call("a")
    b.call("b")
    b.result("a", "answer a")
    b.result("b", "answer b")
    assert not TailMessages.of(b.entries, None).runs


def test_the_window_keeps_a_call_whose_result_opens_it() -> None:
    b = Branch()
    b.user("ask")
    call = b.call("c1")
    b.result("c1", "one")
    b.result("c1", "two")
    b.assistant("done")
    tail = TailMessages.of(b.entries, None)
    assert tail.messages_from(tail.window_start(1)) == [b.entries[-1]]
    assert tail.messages_from(tail.window_start(2))[0] == call  # the second result brings it
    assert tail.window_start(1, max_tokens=1) == 4
    assert tail.window_start(3, max_tokens=1) == 4  # whole units out, oldest first


def test_an_empty_window_and_a_cursor_on_a_custom_entry() -> None:
    b = Branch()
    b.user("one")
    marker = b.custom({"type": "note"})
    b.user("two")
    tail = TailMessages.of(b.entries, marker.id)
    assert (tail.observed, tail.unobserved) == (1, 1)
    assert tail.window_start(0) == 2
    with pytest.raises(ValueError, match="keep"):
        tail.window_start(-1)


def test_a_message_with_no_role_the_observer_reads_is_left_out() -> None:
    b = Branch()
    b.message("system", "rules")
    b._add(kind="message", message=Message(role="user", content="hi"))
    tail = TailMessages.of(b.entries, None)
    assert [e.message.role for e in tail.messages_from(0) if e.message] == ["user"]


@settings(max_examples=400, deadline=None)
@given(
    STEPS,
    st.integers(0, 40),
    st.lists(st.tuples(st.integers(0, 8), st.integers(-3, 6)), min_size=1, max_size=6),
    st.integers(0, 12),
)
def test_a_walk_continued_over_later_tails_answers_as_a_walk_of_each(
    steps: list[tuple[str, int, int]], pick: int, moves: list[tuple[int, int]], keep: int
) -> None:
    entries = tail_of(steps)
    cursor = cursor_of(entries, pick)
    walk, first, end = TailMessages.of((), cursor), 0, 0
    for grown, cut in moves:  # each tail: entries appended, some cut (or reached back to)
        end = min(end + grown, len(entries))
        first = max(0, min(first + cut, end))
        walk = _checked(entries[first:end], cursor, walk, keep)


def _checked(
    later: list[SessionEntry], cursor: str | None, earlier: TailMessages, keep: int
) -> TailMessages:
    continued = TailMessages.of(later, cursor, earlier)
    fresh = TailMessages.of(later, cursor)
    assert continued.messages_from(0) == fresh.messages_from(0)
    assert continued.lines_from(0) == fresh.lines_from(0)
    assert continued.observed == fresh.observed
    for start in range(fresh.count + 1):
        assert continued.rendered_size(start) == fresh.rendered_size(start)
        assert continued.tokens_from(start) == fresh.tokens_from(start)
    assert continued.runs <= fresh.runs  # a continued walk may only be more careful
    if continued.runs:
        assert continued.window_start(keep) == fresh.window_start(keep)
        assert continued.window_start(keep, 300) == fresh.window_start(keep, 300)
        assert continued.newest_fitting(0, 900) == fresh.newest_fitting(0, 900)
    return continued


def test_a_walk_goes_on_from_an_earlier_one_only_over_its_own_entries() -> None:
    b = Branch()
    b.user("one")
    b.call("c1")
    b.result("c1", "done")
    earlier = TailMessages.of(tuple(b.entries), None)
    b.assistant("two")
    continued = TailMessages.of(tuple(b.entries), None, earlier)
    assert continued.columns is earlier.columns and continued.runs  # nothing copied
    assert continued.messages_from(0)[:3] == earlier.messages_from(0)
    assert TailMessages.of(tuple(b.entries), None, earlier).columns is not earlier.columns
    copied = [e.model_copy() for e in b.entries]  # equal entries, other objects: walked anew
    assert TailMessages.of(copied, None, continued).messages_from(0) == copied
    assert TailMessages.of(tuple(b.entries), "e1", earlier).observed == 1  # another cursor


@pytest.mark.parametrize(("appended", "continued"), [(EXTEND_SCAN - 1, True), (EXTEND_SCAN, False)])
def test_a_walk_goes_on_only_when_its_newest_entry_is_within_the_scan(
    appended: int, continued: bool
) -> None:
    # The earlier walk's newest entry is looked for among the last EXTEND_SCAN entries: a
    # read after that many appends walks its tail anew, with the same answers.
    b = Branch()
    b.user("one")
    earlier = TailMessages.of(tuple(b.entries), None)
    for n in range(appended):
        b.assistant(f"reply {n}")
    walked = TailMessages.of(tuple(b.entries), None, earlier)
    assert (walked.columns is earlier.columns) is continued
    assert walked.messages_from(0) == b.entries and walked.count == appended + 1


def test_a_reused_call_id_brings_only_the_call_its_result_answers() -> None:
    b = Branch()
    b.call("call_0")
    b.result("call_0", "the first run's")
    b.user("again")
    latest = b.call("call_0")  # a framework that numbers calls per run
    b.result("call_0", "the second run's")
    assert select_recent_message_entries(b.entries, 1) == [latest, b.entries[-1]]
    tail = TailMessages.of(b.entries, None)
    assert tail.runs and tail.messages_from(tail.window_start(1)) == [latest, b.entries[-1]]


def test_the_lines_are_the_rendered_messages_with_the_secrets_redacted() -> None:
    b = Branch()
    b.user("my token is hunter2")
    b.custom({"type": "note"})
    b.assistant("noted")
    plain = TailMessages.of(b.entries, None)
    ids, lines = plain.lines_from(0)
    assert lines == ["[user] my token is hunter2", "[assistant] noted"]
    assert ids == [b.entries[0].id, b.entries[2].id]
    redacted = TailMessages.of(b.entries, None, plain, ["hunter2"])  # other keys: walked anew
    assert "hunter2" not in redacted.lines_from(0)[1][0] and redacted.keys == ("hunter2",)
    assert TailMessages.of(b.entries, None, redacted, ("hunter2",)) == redacted
