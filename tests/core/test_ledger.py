from __future__ import annotations

from functools import partial

from om_core.ledger.fold import (
    eligible_observation_sources,
    fold_ledger,
    is_eligible_observation_source,
    merge_ledgers,
    observations_uncovered_by_reflection,
    unscanned_entries,
)
from om_core.ledger.models import Message, ObservationalMemoryLedger, SessionEntry, ToolCall
from om_core.ledger.projection import snapshot_of
from om_core.ledger.tokens import (
    estimate_entry_tokens,
    estimate_message_tokens,
    estimate_text_tokens,
)
from om_core.policy.redaction import redact
from om_core.read.window import render_message
from om_core.scopes.index import WorkScope, WorkScopeMap

from .builders import Branch, mid, obs, ref


def test_fold_collects_observations_reflections_drops_and_both_cursors() -> None:
    b = Branch()
    u = b.user("I live in Lisbon")
    a = b.assistant("Noted")
    b.observe(obs(1, u.id), obs(2, a.id), covers=a.id)
    b.reflect(ref(10, mid(1), mid(2)), covers="r-cursor")
    u2 = b.user("My cat is Tom")
    b.observe(obs(3, u2.id), covers=u2.id)
    b.drop(mid(2))
    ledger = fold_ledger(b.entries)
    assert [o.id for o in ledger.observations] == [mid(1), mid(2), mid(3)]
    assert [o.id for o in ledger.active_observations] == [mid(1), mid(3)]
    assert ledger.dropped_observation_ids == (mid(2),)
    assert [r.id for r in ledger.reflections] == [mid(10)]
    assert ledger.observation_covers_up_to_id == u2.id
    assert ledger.reflection_covers_up_to_id == "r-cursor"
    assert [o.id for o in observations_uncovered_by_reflection(ledger)] == [mid(3)]


def test_empty_observer_run_still_advances_coverage() -> None:
    b = Branch()
    u = b.user("hello")
    b.observe(covers=u.id)
    assert fold_ledger(b.entries).observation_covers_up_to_id == u.id
    assert unscanned_entries(b.entries, fold_ledger(b.entries)) == [b.entries[-1]]


def test_revocation_drop_without_cursor_keeps_coverage() -> None:
    b = Branch()
    u = b.user("x")
    b.observe(obs(1, u.id), covers=u.id)
    b.drop(mid(1))
    ledger = fold_ledger(b.entries)
    assert ledger.observation_covers_up_to_id == u.id
    assert ledger.active_observations == ()


def test_malformed_records_are_not_memory() -> None:
    b = Branch()
    u = b.user("x")
    b.custom({"type": "om.observations.recorded", "observations": [{"id": "NOTHEX", "text": "t"}]})
    b.custom(
        {
            "type": "om.observations.recorded",
            "observations": [{"id": mid(1), "text": "t", "sourceEntryIds": []}],
        }
    )
    b.custom({"type": "other.thing", "x": 1})
    b.observe(obs(2, u.id))
    assert [o.id for o in fold_ledger(b.entries).observations] == [mid(2)]


def test_replayed_record_does_not_duplicate_or_overwrite() -> None:
    b = Branch()
    u = b.user("x")
    b.observe(obs(1, u.id, text="first"))
    b.observe(obs(1, u.id, text="second"))
    ledger = fold_ledger(b.entries)
    assert [o.text for o in ledger.observations] == ["first"]


def test_drop_of_unknown_id_is_ignored() -> None:
    b = Branch()
    b.drop(mid(9))
    assert fold_ledger(b.entries).dropped_observation_ids == ()


def test_fold_resumes_from_initial_ledger() -> None:
    b = Branch()
    u = b.user("a")
    b.observe(obs(1, u.id), covers=u.id)
    half = len(b.entries)
    u2 = b.user("b")
    b.observe(obs(2, u2.id), covers=u2.id)
    b.drop(mid(1))
    start = fold_ledger(b.entries[:half])
    assert fold_ledger(b.entries[half:], initial=start) == fold_ledger(b.entries)


def test_fold_starts_from_latest_resumable_snapshot() -> None:
    b = Branch()
    u = b.user("a")
    b.observe(obs(1, u.id), covers=u.id)
    snapshot = snapshot_of(fold_ledger(b.entries))
    b.compaction("summary", {"memory": snapshot.to_json_dict()})
    u2 = b.user("b")
    b.observe(obs(2, u2.id), covers=u2.id)
    assert fold_ledger(b.entries) == fold_ledger(b.entries, from_snapshot=False)
    # The snapshot is authoritative: a fold that starts there never reads earlier entries.
    tail = b.entries[2:]
    assert fold_ledger(tail) == fold_ledger(b.entries)


def test_snapshot_without_coverage_state_is_not_resumed_from() -> None:
    b = Branch()
    u = b.user("a")
    b.observe(obs(1, u.id), covers=u.id)
    foreign = {
        "type": "om.folded",
        "version": 1,
        "fullFold": False,
        "observations": [],
        "reflections": [],
        "droppedObservationIds": [],
    }
    b.compaction("summary", {"memory": foreign})
    assert [o.id for o in fold_ledger(b.entries).observations] == [mid(1)]


def test_merge_is_an_id_keyed_union_without_cursors() -> None:
    one = ObservationalMemoryLedger(
        observations=(obs(1, "a"), obs(2, "b")),
        dropped_observation_ids=(mid(2),),
        observation_covers_up_to_id="a",
    )
    two = ObservationalMemoryLedger(observations=(obs(3, "c"),), reflections=(ref(9, mid(3)),))
    merged = merge_ledgers([one, two])
    assert [o.id for o in merged.observations] == [mid(1), mid(2), mid(3)]
    assert merged.dropped_observation_ids == (mid(2),)
    assert [r.id for r in merged.reflections] == [mid(9)]
    assert merged.observation_covers_up_to_id is None
    assert merge_ledgers([two, one]) == merged
    assert merge_ledgers([merged, merged]) == merged
    assert merge_ledgers([]) == ObservationalMemoryLedger()


def test_eligibility_is_user_assistant_tool_messages_only() -> None:
    b = Branch()
    b.user("u")
    b.assistant("a")
    b.result("c1", "r")
    b.message("system", "sys")
    b.custom({"type": "x"})
    eligible = eligible_observation_sources(b.entries)
    assert [e.message.role for e in eligible if e.message] == ["user", "assistant", "tool"]
    assert not is_eligible_observation_source(b.entries[3])


def test_unscanned_after_cursor_and_after_a_fork() -> None:
    b = Branch()
    u = b.user("a")
    b.observe(obs(1, u.id), covers=u.id)
    b.user("b")
    ledger = fold_ledger(b.entries)
    assert [e.id for e in unscanned_entries(b.entries, ledger)] == [b.entries[1].id, "e3"]
    # A branch that does not hold the cursor was never scanned.
    assert unscanned_entries(b.entries[2:], ledger) == b.entries[2:]


def test_token_estimates() -> None:
    b = Branch()
    u = b.user("x" * 9)
    assert estimate_text_tokens("") == 0
    assert estimate_text_tokens("abcd") == 1
    assert estimate_text_tokens("abcde") == 2
    assert estimate_entry_tokens(u) == 3
    c = b.call("c1", "search", q="weather")
    assert u.message is not None and c.message is not None
    assert estimate_message_tokens(c.message) == -(-len('search{"q":"weather"}') // 4)
    assert estimate_entry_tokens(b.custom({"type": "t"})) > 0


def test_a_message_is_rendered_and_counted_once_and_a_copy_afresh() -> None:
    message = Message(
        role="assistant",
        content="Looking it up.",
        tool_calls=(ToolCall(id="c1", name="search", arguments={"q": "weather"}),),
    )
    rendered = render_message(message)
    assert rendered == '[assistant] Looking it up.\n  -> tool call search {"q":"weather"} (id c1)'
    assert render_message(message) is rendered  # the same object: kept, not rendered again
    counted = -(-len('Looking it up.search{"q":"weather"}') // 4)
    assert estimate_message_tokens(message) == counted
    # A copy with other content (recall redacts this way) never keeps the original's values.
    copy = message.model_copy(update={"content": "[redacted]", "tool_calls": ()})
    assert render_message(copy) == "[assistant] [redacted]"
    assert estimate_message_tokens(copy) == -(-len("[redacted]") // 4) == 3
    # Kept values are not fields: equality and dumps ignore them.
    assert message == Message.model_validate(message.model_dump())
    assert "rendered" not in message.model_dump()


def test_an_entry_kept_as_an_observation_source_and_a_copy_afresh() -> None:
    user = SessionEntry(
        id="e1", session_id="s", kind="message", message=Message(role="user", content="hi")
    )
    assert (
        is_eligible_observation_source(user) and "is_eligible_observation_source" in user.__dict__
    )
    # A copy with another message (the append plan and recall copy this way) asks afresh.
    system = user.model_copy(update={"message": Message(role="system", content="be brief")})
    assert not is_eligible_observation_source(system)
    assert is_eligible_observation_source(system.model_copy(update={"message": user.message}))
    # The kept answer is not a field: equality and dumps ignore it.
    assert user == SessionEntry.model_validate(user.model_dump())
    assert "is_eligible_observation_source" not in user.model_dump()


def test_a_copy_of_any_core_model_computes_its_kept_values_afresh() -> None:
    # The work-scope map defines no copy of its own: the base model's copy drops every
    # cached property, whichever model keeps it.
    root = WorkScopeMap()
    assert set(root.scopes_by_id) == {"session"}
    child = WorkScope(id="task", parent_id="session", depth=1)
    grown = root.model_copy(update={"scopes": (*root.scopes, child)})
    assert set(grown.scopes_by_id) == {"session", "task"}
    assert set(root.scopes_by_id) == {"session"}


def test_a_redacted_rendering_is_kept_for_the_secrets_asked_last() -> None:
    message = Message(role="user", content="token abc123 and xyz")

    def redacted(keys: tuple[str, ...]) -> str:
        return message.rendered_as(keys, partial(redact, secrets=keys))

    first = redacted(("abc123",))
    assert first == "[user] token [REDACTED] and xyz"
    assert redacted(("abc123",)) is first  # kept, not redacted again
    # Other secrets (one more became known) redact afresh.
    assert redacted(("abc123", "xyz")) == "[user] token [REDACTED] and [REDACTED]"
    assert redacted(()) == "[user] token abc123 and xyz"
    # A copy with other content never keeps the original's answer.
    copy = message.model_copy(update={"content": "abc123 only"})
    assert copy.rendered_as(("xyz",), partial(redact, secrets=("xyz",))) == "[user] abc123 only"
    assert message == Message.model_validate(message.model_dump())
