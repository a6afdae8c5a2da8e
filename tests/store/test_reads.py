"""Context and recall read from the snapshot and the tail equal the same on the whole branch."""

from __future__ import annotations

import pytest
from store_factories import assistant, message, observations, reflections

from om_core import ToolCall, fold_ledger, recall_memory, resolve_settings
from om_core.ledger.models import Message, SessionEntry
from om_core.ledger.tokens import estimate_text_tokens
from om_core.read.context import build_context
from om_workers.reads import session_context, session_recall
from om_workers.store import SqlStore
from om_workers.tails import recent_tail


def _call(entry_id: str, call_id: str) -> SessionEntry:
    return SessionEntry(
        id=entry_id,
        session_id="s1",
        kind="message",
        message=Message(
            role="assistant", tool_calls=(ToolCall(id=call_id, name="search", arguments={}),)
        ),
    )


def _result(entry_id: str, call_id: str) -> SessionEntry:
    return SessionEntry(
        id=entry_id,
        session_id="s1",
        kind="message",
        message=Message(role="tool", content=f"result {entry_id}", tool_call_id=call_id),
    )


def _long_session(store: SqlStore, tenant: str, session_id: str, runs: int) -> None:
    """Runs of user, tool call, many results, answer, and a memory record every few runs."""
    for run in range(runs):
        batch = [message(f"u{run}", text=f"question {run} with secret sk-x")]
        batch.append(_call(f"c{run}", f"call{run}"))
        batch += [_result(f"r{run}-{i}", f"call{run}") for i in range(6)]
        batch.append(assistant(f"a{run}", text=f"answer {run}"))
        store.append_entries(tenant, session_id, batch)
        if run % 3 == 2:
            record, ids = observations(f"o{run}", [f"r{run}-0", f"u{run}"], f"a{run}")
            store.append_entries(tenant, session_id, record)
            store.append_entries(tenant, session_id, reflections(f"rf{run}", ids, f"o{run}"))


@pytest.mark.parametrize("keep", [0, 1, 3, 8, 40])
@pytest.mark.parametrize("max_tokens", [None, 256, 2_000])
def test_context_from_snapshot_and_tail_equals_the_full_branch(
    store: SqlStore, tenant: str, session_id: str, keep: int, max_tokens: int | None
) -> None:
    _long_session(store, tenant, session_id, runs=12)
    # Messages after the last observation: the context must show them all (or name them).
    store.append_entries(
        tenant, session_id, [message(f"late{i}", text="x " * 40) for i in range(30)]
    )
    settings = resolve_settings({"context": {"recentMessages": keep}})
    branch = store.read_branch(tenant, session_id)
    expected = build_context(branch, settings, secrets=["sk-x"], max_tokens=max_tokens)
    got = session_context(
        store, tenant, session_id, settings=settings, secrets=["sk-x"], max_tokens=max_tokens
    )
    assert got == expected
    assert got.unobserved.messages == 30 and got.unobserved.first_id == "late0"
    if max_tokens is None:
        assert got.gap is None
        assert {f"late{i}" for i in range(30)} <= set(got.recent.entry_ids)
    else:
        shown = estimate_text_tokens(got.memory.text) + estimate_text_tokens(got.recent.text)
        assert shown <= max_tokens
    if max_tokens == 256:  # too small for all 30: the gap is named, with its cursor
        assert got.gap is not None and got.gap.first_id == "late0"
        assert got.gap.cursor == got.recent.entry_ids[0]
        assert f"page them backward from entry {got.gap.cursor}" in got.memory.text
    if 4 * keep < len(branch) // 2:  # a short window never reads the whole branch
        assert len(recent_tail(store, tenant, session_id, keep)) < len(branch)


@pytest.mark.parametrize("max_tokens", [None, 256, 2_000, 100_000])
def test_context_of_a_session_nothing_observed_yet_equals_the_full_branch(
    store: SqlStore, tenant: str, session_id: str, max_tokens: int | None
) -> None:
    # No observation cursor: the tail reaches back to the root, or to as many tokens as the
    # budget shows (then the rest is counted), whichever comes first.
    for run in range(20):
        batch = [message(f"u{run}", text="y " * 60), _call(f"c{run}", f"call{run}")]
        store.append_entries(tenant, session_id, [*batch, _result(f"r{run}", f"call{run}")])
    settings = resolve_settings()
    branch = store.read_branch(tenant, session_id)
    expected = build_context(branch, settings, max_tokens=max_tokens)
    got = session_context(store, tenant, session_id, settings=settings, max_tokens=max_tokens)
    assert got == expected
    assert got.unobserved.messages == 60 and got.unobserved.first_id == "u0"
    assert (got.gap is not None) is (max_tokens == 256)


def test_a_window_that_starts_inside_a_tool_run_reads_back_to_its_call(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, [message("u0"), _call("c0", "k")])
    store.append_entries(tenant, session_id, [_result(f"r{i}", "k") for i in range(100)])
    tail = recent_tail(store, tenant, session_id, keep=2)
    assert "c0" in [e.id for e in tail]


def test_recall_reads_a_span_and_equals_recall_on_the_full_branch(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    _long_session(store, tenant, session_id, runs=9)
    branch = store.read_branch(tenant, session_id)
    ledger = fold_ledger(branch)
    ids = [o.id for o in ledger.observations] + [r.id for r in ledger.reflections]
    assert ids
    for memory_id in [*ids, "0" * 12]:
        expected = recall_memory(branch, memory_id, secrets=["sk-x"])
        got = session_recall(store, tenant, session_id, f"om:{memory_id}", secrets=["sk-x"])
        assert got == expected
        assert "sk-x" not in str(got.to_json_dict())


def test_recall_of_a_withheld_id_is_revoked(store: SqlStore, tenant: str, session_id: str) -> None:
    _long_session(store, tenant, session_id, runs=3)
    observation = fold_ledger(store.read_branch(tenant, session_id)).observations[0]
    result = session_recall(
        store, tenant, session_id, observation.id, invalidated_ids=[observation.source_entry_ids[0]]
    )
    assert not result.found and result.reason == "revoked"


def test_status_view_and_pages_from_snapshot_and_spans_equal_the_full_branch(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    from om_core import memory_status, memory_view, recall_branch_page
    from om_workers.reads import session_page, session_status, session_view

    _long_session(store, tenant, session_id, runs=30)
    settings = resolve_settings({"context": {"recentMessages": 5}})
    branch = store.read_branch(tenant, session_id)
    assert session_status(store, tenant, session_id, settings=settings) == memory_status(
        branch, settings
    )
    for mode in ("visible", "full", "nonsense"):
        assert session_view(
            store, tenant, session_id, mode, settings=settings, secrets=["sk-x"]
        ) == memory_view(branch, mode, settings, secrets=["sk-x"])
    messages = [e.id for e in branch if e.message is not None]
    for cursor in (messages[0], messages[len(messages) // 2], messages[-1]):
        for direction in ("forward", "backward"):
            for limit in (1, 7, 100):
                got = session_page(
                    store, tenant, session_id, cursor, limit=limit, direction=direction
                )
                assert got == recall_branch_page(branch, cursor, limit, direction)
