from __future__ import annotations

import pytest

from om_core.errors import CapExceededError
from om_core.flush.compaction import (
    ObservationalMemoryCompactionStrategy,
    create_folded_memory_details,
    folded_payload_bytes,
)
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.policy.limits import MAX_FOLDED_PAYLOAD_BYTES
from om_core.read.commands import VIEW_USAGE, memory_status, memory_view
from om_core.read.recall import recall_memory
from om_core.settings import resolve_settings

from .builders import Branch, mid, obs, ref


def _branch() -> Branch:
    b = Branch()
    old = b.user("old fact")  # e1
    b.observe(obs(1, old.id, text="old fact"), obs(2, old.id, text="dropped fact"), covers="e1")
    b.drop(mid(2))
    b.reflect(ref(10, mid(1)))
    for i in range(8):
        b.user(f"recent {i}")
    b.observe(obs(3, b.entries[-1].id, text="in window"))
    return b


def test_status_counts() -> None:
    status = memory_status(_branch().entries, last_error="boom")
    assert status.recorded_observations == 3
    assert status.dropped_observations == 1
    assert status.active_observations == 2
    assert status.visible_observations == 1
    assert status.recorded_reflections == 1 and status.visible_reflections == 1
    assert status.pool_max_tokens == 20_000
    assert "3 recorded" in status.render() and "last error: boom" in status.render()


def test_view_modes() -> None:
    b = _branch()
    visible = memory_view(b.entries)
    full = memory_view(b.entries, "full")
    assert "old fact" in visible and "in window" not in visible
    assert "in window" in full and "dropped fact" not in full
    assert memory_view(b.entries, "everything") == VIEW_USAGE
    assert memory_view([]) == "(no observational memory yet)"


def test_compaction_keeps_recent_messages_and_snapshots_the_ledger() -> None:
    b = _branch()
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=8).compact(
        b.entries, trigger="threshold"
    )
    data = result.data
    assert data.keep_entry_ids == tuple(f"e{i}" for i in range(5, 13))
    assert data.through_entry_id == "e4"
    assert data.strategy == "observational-memory" and data.trigger == "threshold"
    assert data.memory.type == "om.folded" and data.memory.version == 1
    assert not data.memory.full_fold
    assert "old fact" in result.summary and "dropped fact" not in result.summary
    wire = data.to_json_dict()
    assert set(wire) == {"throughEntryId", "keepEntryIds", "strategy", "trigger", "memory"}
    assert {"fullFold", "observations", "reflections", "droppedObservationIds"} <= set(
        wire["memory"]
    )
    entry = result.to_entry(entry_id="c1", session_id="s1", parent_id=b.entries[-1].id)
    b.entries.append(entry)
    assert fold_ledger(b.entries) == fold_ledger(b.entries, from_snapshot=False)


def test_compaction_with_nothing_to_keep() -> None:
    b = Branch()
    b.user("a")
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=0).compact(b.entries)
    assert result.data.keep_entry_ids == () and result.data.through_entry_id == "e1"
    with pytest.raises(ValueError):
        ObservationalMemoryCompactionStrategy(keep_recent_entries=-1)


def test_pool_over_max_is_a_full_fold_that_trims_lowest_relevance() -> None:
    observations = tuple(
        obs(i, "e1", text="x" * 400, relevance=i / 100) for i in range(1, 11)
    )  # 100 tokens each
    ledger = ObservationalMemoryLedger(
        observations=observations, pending_reflection_observation_ids=(mid(1), mid(10))
    )
    at_cap = resolve_settings({"context": {"observationsPoolMaxTokens": 1000}})
    assert not create_folded_memory_details(ledger, at_cap).full_fold
    over = resolve_settings({"context": {"observationsPoolMaxTokens": 999}})
    memory = create_folded_memory_details(ledger, over)
    assert memory.full_fold
    assert [o.id for o in memory.observations] == [mid(i) for i in range(2, 11)]
    assert memory.dropped_observation_ids == (mid(1),)
    assert memory.pending_reflection_observation_ids == (mid(10),)


def test_folded_payload_byte_cap_boundary() -> None:
    observations = tuple(obs(i, "e1", text="y" * 2000) for i in range(1, 6))
    ledger = ObservationalMemoryLedger(observations=observations)
    size = folded_payload_bytes(create_folded_memory_details(ledger))
    assert not create_folded_memory_details(ledger, max_bytes=size).full_fold
    trimmed = create_folded_memory_details(ledger, max_bytes=size - 1)
    assert trimmed.full_fold and folded_payload_bytes(trimmed) <= size - 1
    assert len(trimmed.observations) == 4


def test_folded_payload_never_exceeds_hard_cap_and_fails_typed_when_it_cannot() -> None:
    huge = tuple(obs(i, "e1", text="z" * 10_000) for i in range(1, 80))
    memory = create_folded_memory_details(ObservationalMemoryLedger(observations=huge))
    assert folded_payload_bytes(memory) <= MAX_FOLDED_PAYLOAD_BYTES
    reflections = tuple(ref(1000 + i, mid(1), text="r" * 10_000) for i in range(60))
    with pytest.raises(CapExceededError):
        create_folded_memory_details(ObservationalMemoryLedger(reflections=reflections))


def test_trimmed_observations_stay_recallable_as_dropped() -> None:
    b = Branch()
    u = b.user("the launch code is 42")
    b.observe(obs(1, u.id, text="x" * 4000, relevance=0.1), obs(2, u.id, text="keep"))
    settings = resolve_settings({"context": {"observationsPoolMaxTokens": 100}})
    result = ObservationalMemoryCompactionStrategy(settings=settings).compact(b.entries)
    assert result.data.memory.full_fold
    b.entries.append(result.to_entry(entry_id="c1", session_id="s1", parent_id="e2"))
    recalled = recall_memory(b.entries, mid(1))
    assert recalled.found and recalled.dropped and [e.id for e in recalled.sources] == ["e1"]
    assert mid(1) in fold_ledger(b.entries).dropped


def test_compaction_entry_round_trips_through_the_wire_format() -> None:
    b = _branch()
    result = ObservationalMemoryCompactionStrategy().compact(b.entries)
    entry = result.to_entry(entry_id="c1", session_id="s1", parent_id=None)
    again = SessionEntry.model_validate(entry.to_json_dict())
    assert again == entry
