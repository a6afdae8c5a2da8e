"""The memory unit of work's contract, run on every implementation (see ``conftest``).

What a flush appends, how coverage advances, fencing, tombstones and resuming from a snapshot
must read the same in memory and on SQL: these tests compare behaviour, never internals.
"""

from __future__ import annotations

from typing import Any

from om_core import ExtractiveProvider, ObservationalMemoryRuntime, WorkerConfig, fold_ledger
from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.flush.unit_of_work import MemoryUnitOfWork, MemoryView
from om_core.ledger.fold import unscanned_entries
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import Message, SessionEntry
from tests.contract.conftest import SESSION, Harness

LOW: dict[str, Any] = {"observation": {"messageTokens": 1}}


def _message(entry_id: str, text: str, role: str = "user") -> SessionEntry:
    return SessionEntry(
        id=entry_id, session_id=SESSION, kind="message", message=Message(role=role, content=text)
    )


def _exchange(harness: Harness, n: int, prefix: str = "m") -> list[str]:
    ids = []
    for i in range(n):
        ids += [f"{prefix}{i}u", f"{prefix}{i}a"]
        harness.add(
            _message(ids[-2], f"Please deploy build {prefix}{i} of the billing service today."),
            _message(ids[-1], f"Build {prefix}{i} of the billing service is live.", "assistant"),
        )
    return ids


def _runtime(memory: MemoryUnitOfWork, **settings: Any) -> ObservationalMemoryRuntime:
    return ObservationalMemoryRuntime(
        memory,
        settings={**LOW, **settings},
        observation=WorkerConfig(provider=ExtractiveProvider()),
        session_model="extractive",
    )


def _cited(view_or_branch: list[SessionEntry]) -> set[str]:
    ledger = fold_ledger(view_or_branch)
    return {s for o in ledger.observations for s in o.source_entry_ids}


def _same_view(a: MemoryView, b: MemoryView) -> None:
    assert [o.id for o in a.ledger.active_observations] == [
        o.id for o in b.ledger.active_observations
    ]
    assert (
        a.ledger.pending_reflection_observation_ids == b.ledger.pending_reflection_observation_ids
    )
    assert a.ledger.observation_covers_up_to_id == b.ledger.observation_covers_up_to_id
    assert a.ledger.reflection_covers_up_to_id == b.ledger.reflection_covers_up_to_id
    assert [e.id for e in a.unobserved] == [e.id for e in b.unobserved]
    assert a.scope_map == b.scope_map
    assert a.leaf_id == b.leaf_id


def test_a_flush_observes_the_backlog_and_advances_coverage(harness: Harness) -> None:
    ids = _exchange(harness, 3)
    result = _runtime(harness.unit_of_work()).flush()
    assert result.error is None and result.observation_ids
    branch = harness.branch()
    assert fold_ledger(branch).observation_covers_up_to_id == ids[-1]
    assert _cited(branch) <= set(ids)
    assert len(branch) == len(ids) + len(result.appended_entry_ids)
    assert all(e.kind == "custom" for e in branch[len(ids) :])
    again = _runtime(harness.unit_of_work()).flush()
    assert again.appended_entry_ids == () and again.error is None


def test_the_view_a_flush_keeps_is_the_view_a_new_read_gives(harness: Harness) -> None:
    _exchange(harness, 6)
    memory = harness.unit_of_work()
    view = memory.read()
    runtime = _runtime(memory, reflection={"observationTokens": 1})
    result = runtime.flush()
    assert result.observation_ids and result.reflection_ids
    # Fold what the flush appended onto the view it started from, as the runtime does.
    appended = harness.branch()[-len(result.appended_entry_ids) :]
    kept = view.after_append(appended, appended[-1].id)
    _same_view(kept, harness.unit_of_work().read())
    assert unscanned_entries(harness.branch(), fold_ledger(harness.branch())) == list(
        kept.unobserved
    )


def test_messages_appended_during_a_flush_are_the_next_backlog(harness: Harness) -> None:
    _exchange(harness, 2)
    memory = harness.unit_of_work()

    class AgentAppendsMeanwhile:
        session_id = memory.session_id

        def read(self) -> MemoryView:
            return memory.read()

        def append(self, records: Any) -> str:
            harness.add(_message("late", "Also rotate the staging database credentials."))
            return memory.append(records)

    result = _runtime(AgentAppendsMeanwhile()).flush()
    assert result.error is None and result.observation_ids
    branch = harness.branch()
    assert "late" in [e.id for e in branch]  # on the branch, not forked off
    view = harness.unit_of_work().read()
    assert "late" in [e.id for e in view.unobserved]
    assert "late" not in _cited(branch)


def test_a_superseded_flush_writes_nothing(harness: Harness) -> None:
    _exchange(harness, 2)
    stale = harness.unit_of_work()
    harness.supersede()
    before = harness.branch()
    result = _runtime(stale).flush()
    assert result.error is not None and result.appended_entry_ids == ()
    assert harness.branch() == before
    record = SessionEntry(
        id=create_memory_id(), session_id=SESSION, kind="custom", data={"type": "x.note"}
    )
    try:
        stale.append([record])
    except Exception as exc:  # each implementation raises its own fencing error
        assert "epoch" in str(exc)
    else:
        raise AssertionError("a fenced-out unit of work appended")
    assert harness.branch() == before


def test_revoked_messages_never_reach_the_observer(harness: Harness) -> None:
    ids = _exchange(harness, 3)
    harness.revoke(ids[0], ids[1])
    memory = harness.unit_of_work()
    assert {ids[0], ids[1]} <= memory.read().invalidated_ids
    result = _runtime(memory).flush()
    assert result.observation_ids
    branch = harness.branch()
    assert _cited(branch).isdisjoint({ids[0], ids[1]})
    assert fold_ledger(branch).observation_covers_up_to_id == ids[-1]


def test_a_flush_resumes_from_a_compaction_snapshot(harness: Harness) -> None:
    first = _exchange(harness, 3, "a")
    assert _runtime(harness.unit_of_work()).flush().observation_ids
    compacted = ObservationalMemoryCompactionStrategy(2).compact(harness.branch())
    harness.add(compacted.to_entry(entry_id=create_memory_id(), session_id=SESSION, parent_id=None))
    later = _exchange(harness, 2, "b")
    view = harness.unit_of_work().read()
    assert [e.id for e in view.unobserved if e.kind == "message"] == later
    whole = fold_ledger(harness.branch())
    assert [o.id for o in view.ledger.active_observations] == [
        o.id for o in whole.active_observations
    ]
    result = _runtime(harness.unit_of_work()).flush()
    assert result.observation_ids
    assert _cited(harness.branch()) <= set(first) | set(later)
    assert fold_ledger(harness.branch()).observation_covers_up_to_id == later[-1]


def test_drops_keep_the_active_pool_and_the_view_agrees(harness: Harness) -> None:
    _exchange(harness, 8)
    settings = {
        "reflection": {"observationTokens": 10},  # reflected first: drops stay recallable
        "context": {"observationsPoolMaxTokens": 40},
        "dropper": {"targetTokens": 20, "policy": "lowest-relevance"},
    }
    result = _runtime(harness.unit_of_work(), **settings).flush()
    assert result.reflection_ids and result.dropped_observation_ids
    whole = fold_ledger(harness.branch())
    view = harness.unit_of_work().read()
    assert set(result.dropped_observation_ids) <= set(whole.dropped_observation_ids)
    assert [o.id for o in view.ledger.active_observations] == [
        o.id for o in whole.active_observations
    ]
