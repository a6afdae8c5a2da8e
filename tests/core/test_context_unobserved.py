"""The service's context: every unobserved message shown or named, within a token budget."""

from __future__ import annotations

import re

import pytest

from om_core.ledger.models import Observation, ToolCall
from om_core.ledger.tokens import estimate_text_tokens
from om_core.policy.limits import MAX_RECENT_WINDOW_BYTES
from om_core.read.context import MIN_CONTEXT_TOKENS, Unobserved, build_context, gap_note
from om_core.read.window import render_message
from om_core.settings import resolve_settings
from tests.core.builders import Branch, mid

SETTINGS = resolve_settings({"context": {"recentMessages": 2}})


def observed_then(unobserved: int, text: str = "a message of a few words") -> Branch:
    """Four observed messages, then ``unobserved`` more that no memory covers yet."""
    b = Branch()
    for i in range(4):
        b.user(f"observed {i} {text}")
    b.observe(
        Observation(id=mid(1), text="fact", source_entry_ids=("e1", "e2", "e3", "e4")),
        covers="e4",
    )
    for i in range(unobserved):
        b.user(f"late {i} {text}")
    return b


def test_every_unobserved_message_is_shown_beyond_recent_messages() -> None:
    b = observed_then(10)
    context = build_context(b.entries, SETTINGS)
    late = [e.id for e in b.entries[5:]]
    assert list(context.recent.entry_ids) == late  # 10 shown, though recentMessages is 2
    assert context.unobserved.messages == 10 and context.unobserved.first_id == late[0]
    assert context.gap is None
    assert f"[om:{mid(1)}]" in context.memory.text


def test_recent_messages_stay_a_floor_when_memory_covers_everything() -> None:
    b = observed_then(0)
    context = build_context(b.entries, SETTINGS)
    assert list(context.recent.entry_ids) == ["e3", "e4"]
    assert context.unobserved == Unobserved()


def test_a_budget_drops_the_oldest_first_and_names_the_gap() -> None:
    b = observed_then(200, text="word " * 30)
    context = build_context(b.entries, SETTINGS, max_tokens=2_000)
    shown = list(context.recent.entry_ids)
    assert shown and shown[-1] == b.entries[-1].id  # the newest always stays
    assert context.gap is not None
    assert context.gap.messages == 200 - len(shown)
    assert context.gap.first_id == b.entries[5].id and context.gap.cursor == shown[0]
    assert gap_note(context.gap) in context.memory.text
    total = estimate_text_tokens(context.memory.text) + estimate_text_tokens(context.recent.text)
    assert total <= 2_000
    assert context.unobserved.messages == 200


def test_an_oversized_message_is_clipped_with_its_entry_id() -> None:
    b = observed_then(0)
    big = b.result("c9", "x" * 2_000_000, name="dump")  # a 2 MB tool output, its call unseen
    context = build_context(b.entries, SETTINGS, max_tokens=4_000)
    assert context.recent.entry_ids[-1] == big.id
    assert f"the whole message is entry {big.id}]" in context.recent.text
    assert estimate_text_tokens(context.recent.text) <= 4_000


def test_the_clip_mark_names_the_message_clipped_and_its_true_remainder() -> None:
    b = observed_then(0)
    b.message(
        "assistant",
        "",
        tool_calls=(ToolCall(id="c1", name="dump"), ToolCall(id="c2", name="ls")),
    )
    big = b.result("c1", "x" * 2_000_000, name="dump")  # 2 MB, past the window's 512 KiB cap
    small = b.result("c2", "two small files", name="ls")
    context = build_context(b.entries, SETTINGS, max_tokens=4_000)
    text = context.recent.text
    assert estimate_text_tokens(text) <= 4_000
    assert text.endswith("[tool ls c2] two small files")  # the small result stays whole
    marks = re.findall(
        r"\[clipped: (\d+) more characters; the whole message is entry (\w+)\]", text
    )
    assert [entry for _, entry in marks] == [big.id]
    whole = len(render_message(big.message))  # type: ignore[arg-type]
    shown = text.split("[tool dump c1] ", 1)[1].split(" …[clipped", 1)[0]
    assert int(marks[0][0]) == whole - len("[tool dump c1] ") - len(shown)
    assert list(context.recent.entry_ids or ())[-2:] == [big.id, small.id]


def test_older_unobserved_messages_a_store_did_not_read_are_reported() -> None:
    b = observed_then(3)
    tail = b.entries[5:]  # a store read only the newest three; 7 older are counted
    older = Unobserved(messages=7, tokens=70, first_id="x1")
    context = build_context(tail, SETTINGS, ledger=None, older=older, max_tokens=1_000)
    assert context.unobserved.messages == 10 and context.unobserved.first_id == "x1"
    assert context.gap is not None and context.gap.messages == 7
    assert context.gap.first_id == "x1"


@pytest.mark.parametrize("budget", [0, MIN_CONTEXT_TOKENS - 1])
def test_a_budget_below_the_minimum_is_refused(budget: int) -> None:
    with pytest.raises(ValueError):
        build_context(observed_then(1).entries, SETTINGS, max_tokens=budget)


def test_the_smallest_budget_is_accepted() -> None:
    context = build_context(observed_then(5).entries, SETTINGS, max_tokens=MIN_CONTEXT_TOKENS)
    total = estimate_text_tokens(context.memory.text) + estimate_text_tokens(context.recent.text)
    assert total <= MIN_CONTEXT_TOKENS


@pytest.mark.parametrize(
    ("body", "whole"),
    [
        ("x" * (MAX_RECENT_WINDOW_BYTES - len("[user] ")), True),  # exactly the cap
        ("x" * (MAX_RECENT_WINDOW_BYTES - len("[user] ") + 1), False),  # one byte over
        ("é" * (MAX_RECENT_WINDOW_BYTES // 2), False),  # under in characters, over in bytes
    ],
)
def test_a_large_budget_still_caps_the_recent_block_in_utf8_bytes(body: str, whole: bool) -> None:
    b = Branch()
    message = b.user(body)
    context = build_context(b.entries, SETTINGS, max_tokens=1_000_000)
    text = context.recent.text
    assert len(text.encode("utf-8")) <= MAX_RECENT_WINDOW_BYTES
    assert (text == render_message(message.message)) is whole  # type: ignore[arg-type]
    assert whole or text.endswith(f"the whole message is entry {message.id}]")
    assert list(context.recent.entry_ids) == [message.id]
