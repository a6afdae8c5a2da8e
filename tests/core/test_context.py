from __future__ import annotations

import pytest

from om_core.ledger.projection import build_projection
from om_core.policy.limits import MAX_RECENT_WINDOW_BYTES, MAX_RENDERED_MEMORY_BYTES
from om_core.read.context import build_context_blocks
from om_core.read.render import render_observational_memory
from om_core.read.window import render_recent_message_window, select_recent_message_entries
from om_core.settings import resolve_settings

from .builders import Branch, mid, obs, ref


def _ids(entries: list) -> list[str]:  # type: ignore[type-arg]
    return [e.id for e in entries]


def test_recent_window_keeps_the_last_n_messages_in_order() -> None:
    b = Branch()
    for i in range(12):
        b.user(f"m{i}")
    b.custom({"type": "noise"})
    assert _ids(select_recent_message_entries(b.entries, 3)) == ["e10", "e11", "e12"]
    assert select_recent_message_entries(b.entries, 0) == []
    assert len(select_recent_message_entries(b.entries, 50)) == 12


def test_recent_window_never_starts_with_an_orphaned_tool_result() -> None:
    b = Branch()
    b.user("find it")
    call = b.call("c1", q="x")
    r1 = b.result("c1", "one")
    b.assistant("found")
    window = select_recent_message_entries(b.entries, 2)
    # The floor of 2 becomes 3: the call comes with its result.
    assert _ids(window) == [call.id, r1.id, "e4"]


def test_recent_window_keeps_parallel_results_with_their_call() -> None:
    b = Branch()
    b.user("go")
    b.message(
        "assistant",
        "",
        tool_calls=(
            {"id": "a", "name": "t", "arguments": {}},
            {"id": "b", "name": "t", "arguments": {}},
        ),
    )
    b.result("a", "ra")
    b.result("b", "rb")
    assert _ids(select_recent_message_entries(b.entries, 1)) == ["e2", "e3", "e4"]


def test_token_trim_drops_whole_units_oldest_first_and_keeps_the_newest() -> None:
    b = Branch()
    b.user("x" * 400)  # 100 tokens
    b.call("c1", q="y" * 380)
    b.result("c1", "z" * 400)
    b.user("last " * 100)
    window = select_recent_message_entries(b.entries, 10, max_tokens=150)
    assert _ids(window) == ["e4"]
    window = select_recent_message_entries(b.entries, 10, max_tokens=360)
    assert _ids(window) == ["e2", "e3", "e4"]
    assert _ids(select_recent_message_entries(b.entries, 10, max_tokens=1)) == ["e4"]


def test_recent_window_render_respects_its_cap_at_the_boundary() -> None:
    b = Branch()
    b.user("a" * 100)
    b.user("b" * 100)
    text, ids = render_recent_message_window(b.entries)
    size = len(text.encode())
    same, ids_same = render_recent_message_window(b.entries, max_bytes=size)
    assert same == text and ids_same == ids
    smaller, ids_smaller = render_recent_message_window(b.entries, max_bytes=size - 1)
    assert ids_smaller == ("e2",)
    assert len(smaller.encode()) <= size - 1


def test_recent_window_hard_cap_cuts_a_single_huge_message() -> None:
    b = Branch()
    b.user("é" * MAX_RECENT_WINDOW_BYTES)
    text, ids = render_recent_message_window(b.entries)
    assert ids == ("e1",)
    assert len(text.encode()) <= MAX_RECENT_WINDOW_BYTES
    assert text.endswith("[truncated]")


def test_render_orders_reflections_then_observations_with_recall_ids() -> None:
    text = render_observational_memory(
        [ref(9, mid(1))], [obs(1, "e1", text="line one\nline two")], outline=["- task:a"]
    )
    assert text.index("## Scope Outline") < text.index("## Reflections")
    assert text.index("## Reflections") < text.index("## Observations")
    assert f"[reflection:{mid(9)}]" in text and f"[om:{mid(1)}] line one\n  line two" in text
    assert render_observational_memory([], []) == ""


def test_render_cap_boundary_and_lowest_relevance_goes_first() -> None:
    low = obs(1, "e1", text="L" * 200, relevance=0.1)
    high = obs(2, "e2", text="H" * 200, relevance=0.9)
    full = render_observational_memory([], [low, high])
    assert render_observational_memory([], [low, high], max_bytes=len(full.encode())) == full
    cut = render_observational_memory([], [low, high], max_bytes=len(full.encode()) - 1)
    assert "H" * 200 in cut and "L" * 200 not in cut
    assert "1 memories omitted" in cut
    assert len(cut.encode()) <= len(full.encode()) - 1


def test_render_never_exceeds_the_hard_cap() -> None:
    many = [obs(i, "e1", text="x" * 1000) for i in range(400)]
    text = render_observational_memory([ref(9999, mid(1), text="r" * 1000)], many)
    assert len(text.encode()) <= MAX_RENDERED_MEMORY_BYTES
    assert render_observational_memory([], many, max_bytes=10**9).encode().__len__() <= (
        MAX_RENDERED_MEMORY_BYTES
    )


def test_render_redacts_exact_secrets() -> None:
    text = render_observational_memory(
        [ref(9, mid(1), text="key sk-123 in reflection")],
        [obs(1, "e1", text="the key is sk-123")],
        outline=["scope sk-123"],
        secrets=["sk-123"],
    )
    assert "sk-123" not in text and "[REDACTED]" in text


def test_projection_withholds_invalidated_sources_and_dependent_reflections() -> None:
    b = Branch()
    u1 = b.user("a")
    u2 = b.user("b")
    b.observe(obs(1, u1.id), obs(2, u2.id))
    b.reflect(ref(10, mid(1)), ref(11, mid(2)))
    p = build_projection(b.entries, invalidated_ids=[u1.id])
    assert [o.id for o in p.observations] == [mid(2)]
    assert [r.id for r in p.reflections] == [mid(11)]
    assert len(p.full.observations) == 2
    assert p.folded.resumable
    p2 = build_projection(b.entries, invalidated_ids=[mid(2)])
    assert [o.id for o in p2.observations] == [mid(1)] and [r.id for r in p2.reflections] == [
        mid(10)
    ]


def test_context_blocks_show_memory_before_the_window_and_the_window_itself() -> None:
    b = Branch()
    old = b.user("I was born in Porto")
    b.observe(obs(1, old.id, text="User was born in Porto"), covers=old.id)
    for i in range(8):
        recent = b.user(f"recent {i}")
    b.observe(obs(2, recent.id, text="inside the window"))
    memory, window = build_context_blocks(b.entries)
    assert memory.id == "observational-memory" and window.id == "recent-messages"
    assert "born in Porto" in memory.text
    # Aligned to the recent-message boundary: what the window shows verbatim is not repeated.
    assert "inside the window" not in memory.text
    assert window.entry_ids[-1] == recent.id and len(window.entry_ids) == 8
    assert "recent 7" in window.text


def test_context_blocks_honour_settings_invalidation_and_secrets() -> None:
    b = Branch()
    u = b.user("token sk-9")
    b.observe(obs(1, u.id, text="user token sk-9"))
    for _ in range(3):
        b.user("filler")
    settings = resolve_settings({"context": {"recentMessages": 2}})
    memory, window = build_context_blocks(b.entries, settings, secrets=["sk-9"])
    assert "[REDACTED]" in memory.text and "sk-9" not in memory.text
    assert len(window.entry_ids) == 2
    memory, _ = build_context_blocks(b.entries, settings, invalidated_ids=[u.id])
    assert memory.text == ""


@pytest.mark.parametrize("keep", [-1])
def test_negative_keep_is_rejected(keep: int) -> None:
    with pytest.raises(ValueError):
        select_recent_message_entries([], keep)
