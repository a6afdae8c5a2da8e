"""Shared work scopes: owner grants, per-branch folds, every denial reason, revocation."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count

import pytest

from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import SessionEntry
from om_core.read.recall import recall_shared_memory
from om_core.scopes.controller import WorkScopeController
from om_core.scopes.index import fold_work_scope_map
from om_core.scopes.shared import (
    SharedScopeAccessEvent,
    SharedScopeConfig,
    SharedScopeMemory,
    merge_shared_memory,
    resolve_shared_scopes,
)
from om_core.scopes.work_memory import project_work_memory

from .builders import Branch, mid, obs

SCOPE = "build-42"
_ids = count(1)


class Store:
    """Branches by session id; ``entries`` is the host callback (unknown ids raise)."""

    def __init__(self, *session_ids: str) -> None:
        self.branches = {sid: Branch(sid) for sid in session_ids}

    def entries(self, session_id: str) -> Sequence[SessionEntry]:
        return self.branches[session_id].entries

    def controller(self, session_id: str) -> WorkScopeController:
        b = self.branches[session_id]
        return WorkScopeController(
            session_id=session_id,
            append_entry=b.entries.append,
            get_entries=lambda: b.entries,
            new_entry_id=lambda: f"{session_id}-scope-{next(_ids)}",
        )

    def record(self, session_id: str, n: int) -> str:
        """Record observation ``n`` on a session, resting on a fresh user message there."""
        b = self.branches[session_id]
        u = b.message("user", f"{session_id} says {n}", id=f"{session_id}-m{n}")
        b.observe(obs(n, u.id, text=f"fact {n} from {session_id}"))
        return f"om:{mid(n)}"

    def config(self, owner: str = "owner") -> dict[str, SharedScopeConfig]:
        return {SCOPE: SharedScopeConfig(owner_session_id=owner, entries=self.entries)}

    def resolve(
        self, reader: str, events: list[SharedScopeAccessEvent] | None = None, **config: object
    ) -> tuple[SharedScopeMemory, ...]:
        return resolve_shared_scopes(
            scopes=config.get("scopes", self.config()),  # type: ignore[arg-type]
            principal_id=reader,
            scope_map=fold_work_scope_map(self.entries(reader)),
            on_access=events.append if events is not None else None,
        )


def shared_ids(shared: Sequence[SharedScopeMemory]) -> set[str]:
    return {o.id for s in shared for o in s.ledger.active_observations}


def setup() -> Store:
    """Owner opens and grants the scope to s2; both contribute one bound observation."""
    store = Store("owner", "s2", "s3")
    owner = store.controller("owner")
    owner.open({"id": SCOPE})
    owner.bind(SCOPE, [store.record("owner", 1)])
    owner.grant(SCOPE, ["s2"])
    s2 = store.controller("s2")
    s2.open({"id": SCOPE})
    s2.bind(SCOPE, [store.record("s2", 2)])
    return store


def test_grant_contribute_recall_revoke_denied_across_two_sessions() -> None:
    store = setup()
    events: list[SharedScopeAccessEvent] = []

    # Contribute and read: each side sees the other's bound memory, never its own again.
    assert shared_ids(store.resolve("s2", events)) == {mid(1)}
    assert shared_ids(store.resolve("owner", events)) == {mid(2)}
    assert [(e.principal_id, e.granted, e.branches, e.observations) for e in events] == [
        ("s2", True, 1, 1),
        ("owner", True, 1, 1),
    ]

    # Context: the scope in s2's current leaf lineage brings the owner's memory in.
    s2 = store.controller("s2")
    s2.enter(SCOPE)
    shared = store.resolve("s2")
    local = store.entries("s2")
    ledger, scope_map = merge_shared_memory(fold_ledger(local), fold_work_scope_map(local), shared)
    view = project_work_memory(ledger, scope_map, from_=scope_map.leaf, include="self+ancestors")
    assert {o.id for o in view.observations} == {mid(1), mid(2)}

    # Recall by exact id resolves sources on the owner's branch alone.
    recalled = recall_shared_memory(shared, f"om:{mid(1)}")
    assert recalled.found and recalled.text == "fact 1 from owner"
    assert [e.id for e in recalled.sources] == ["owner-m1"]
    assert not recall_shared_memory(shared, mid(2)).found  # local memory is not shared memory

    # Revoke: the next read denies, in both directions.
    store.controller("owner").revoke(SCOPE, ["s2"])
    events.clear()
    assert store.resolve("s2", events) == ()
    assert events[0].granted is False and events[0].reason == "revoked"
    assert shared_ids(store.resolve("owner")) == set()
    assert not recall_shared_memory(store.resolve("s2"), mid(1)).found


def test_revocation_holds_across_local_compaction() -> None:
    store = setup()
    s2 = store.controller("s2")
    s2.enter(SCOPE)
    assert shared_ids(store.resolve("s2")) == {mid(1)}
    # s2 compacts while granted: the folded payload and summary are local memory only.
    result = ObservationalMemoryCompactionStrategy(keep_recent_entries=0).compact(
        store.entries("s2")
    )
    assert {o.id for o in result.data.memory.observations} == {mid(2)}
    assert mid(1) not in result.summary and mid(2) in result.summary
    b = store.branches["s2"]
    b.compaction(result.summary, result.data.to_json_dict())
    store.controller("owner").revoke(SCOPE, ["s2"])
    assert store.resolve("s2") == ()
    local = store.entries("s2")
    ledger, scope_map = merge_shared_memory(fold_ledger(local), fold_work_scope_map(local), ())
    view = project_work_memory(ledger, scope_map, from_=scope_map.leaf, include="self+ancestors")
    assert {o.id for o in view.observations} == {mid(2)}


def test_each_denial_reason_is_reported() -> None:
    store = setup()
    events: list[SharedScopeAccessEvent] = []

    def boom(session_id: str) -> Sequence[SessionEntry]:
        raise OSError("store down")

    def foreign(session_id: str) -> Sequence[SessionEntry]:
        return store.entries("s2")  # another session's entries

    def reasons(reader: str, scopes: object) -> list[str | None]:
        events.clear()
        assert store.resolve(reader, events, scopes=scopes) == ()
        return [e.reason for e in events]

    # not_opened: s3 has no local scope yet.
    assert reasons("s3", store.config()) == ["not_opened"]
    store.controller("s3").open({"id": SCOPE})
    # absent: s3 was never granted.
    assert reasons("s3", store.config()) == ["absent"]
    # unknown: the named owner never opened the scope.
    store.branches["s4"] = Branch("s4")
    store.controller("s4").open({"id": "other"})
    not_owner = {SCOPE: SharedScopeConfig(owner_session_id="s4", entries=store.entries)}
    assert reasons("s2", not_owner) == ["unknown"]
    # unreachable: the owner branch cannot be read, or belongs to someone else.
    bad = {SCOPE: SharedScopeConfig(owner_session_id="owner", entries=boom)}
    assert reasons("s2", bad) == ["unreachable"]
    bad = {SCOPE: SharedScopeConfig(owner_session_id="owner", entries=foreign)}
    assert reasons("s2", bad) == ["unreachable"]
    missing = {SCOPE: SharedScopeConfig(owner_session_id="ghost", entries=store.entries)}
    assert reasons("s2", missing) == ["unreachable"]
    # invalid_config: a malformed scope id or owner id.
    assert reasons("s2", {"bad..id": store.config()[SCOPE]}) == ["invalid_config"]
    bad = {SCOPE: SharedScopeConfig(owner_session_id=" owner", entries=store.entries)}
    assert reasons("s2", bad) == ["invalid_config"]
    assert reasons("s2", {SCOPE: object()}) == ["invalid_config"]
    # revoked.
    store.controller("owner").revoke(SCOPE, ["s2"])
    assert reasons("s2", store.config()) == ["revoked"]
    assert all(not e.granted for e in events)


def test_on_access_fires_for_every_decision() -> None:
    store = setup()
    store.controller("owner").open({"id": "private"})
    store.controller("s2").open({"id": "private"})
    events: list[SharedScopeAccessEvent] = []
    scopes = {
        SCOPE: store.config()[SCOPE],
        "private": SharedScopeConfig(owner_session_id="owner", entries=store.entries),
        "elsewhere": SharedScopeConfig(owner_session_id="owner", entries=store.entries),
    }
    shared = store.resolve("s2", events, scopes=scopes)
    assert [s.scope_id for s in shared] == [SCOPE]
    assert [(e.scope_id, e.granted, e.reason) for e in events] == [
        (SCOPE, True, None),
        ("private", False, "absent"),
        ("elsewhere", False, "not_opened"),
    ]
    assert all(e.owner_session_id == "owner" and e.principal_id == "s2" for e in events)


def test_grants_outside_the_owner_branch_are_inert() -> None:
    store = setup()
    # s2 opens the scope and "grants" s3 on its own branch: no authority.
    store.controller("s2").grant(SCOPE, ["s3"])
    store.controller("s3").open({"id": SCOPE})
    events: list[SharedScopeAccessEvent] = []
    assert store.resolve("s3", events) == ()
    assert events[0].reason == "absent"


def test_only_ids_bound_to_that_exact_scope_are_shared() -> None:
    store = setup()
    owner = store.controller("owner")
    owner.open({"id": "parent"})
    owner.open({"id": f"{SCOPE}/child", "parentId": SCOPE})
    owner.bind("parent", [store.record("owner", 3)])
    owner.bind(f"{SCOPE}/child", [store.record("owner", 4)])
    store.record("owner", 5)  # recorded, never bound
    owner.bind("session", [store.record("owner", 6)])
    assert shared_ids(store.resolve("s2")) == {mid(1)}


def test_a_dropped_foreign_observation_stays_dropped() -> None:
    store = setup()
    store.branches["owner"].drop(mid(1))
    shared = store.resolve("s2")
    assert shared_ids(shared) == set()
    assert shared[0].ledger.dropped_observation_ids == (mid(1),)


def test_an_unreadable_granted_branch_contributes_nothing() -> None:
    store = setup()
    store.controller("owner").grant(SCOPE, ["ghost"])
    shared = store.resolve("owner")
    assert [b.session_id for b in shared[0].branches] == ["s2"]


def test_the_local_ledger_never_absorbs_foreign_memory() -> None:
    store = setup()
    before = list(store.entries("s2"))
    shared = store.resolve("s2")
    merge_shared_memory(
        fold_ledger(store.entries("s2")), fold_work_scope_map(store.entries("s2")), shared
    )
    assert store.entries("s2") == before
    assert mid(1) not in fold_ledger(store.entries("s2")).observations_by_id


@pytest.mark.parametrize("scopes", [None, {}])
def test_no_shared_scopes_means_no_decisions(scopes: object) -> None:
    store = setup()
    events: list[SharedScopeAccessEvent] = []
    assert store.resolve("s2", events, scopes=scopes) == ()
    assert events == []


def test_recall_tool_and_view_include_granted_shared_memory_and_status_stays_local() -> None:
    from om_core.read.commands import memory_status, memory_view
    from om_core.read.recall_tool import RecallMemoryTool

    store = setup()
    tool = RecallMemoryTool(get_entries=store.entries, get_shared=lambda sid: store.resolve(sid))
    recalled = tool("s2", {"id": f"om:{mid(1)}"})
    assert recalled["found"] is True and recalled["text"] == "fact 1 from owner"
    local_only = RecallMemoryTool(get_entries=store.entries)
    assert local_only("s2", {"id": f"om:{mid(1)}"})["found"] is False

    store.controller("s2").enter(SCOPE)
    shared = store.resolve("s2")
    view = memory_view(store.entries("s2"), "full", shared=shared)
    assert "fact 1 from owner" in view and "fact 2 from s2" in view
    assert memory_status(store.entries("s2")).recorded_observations == 1

    store.controller("owner").revoke(SCOPE, ["s2"])
    assert tool("s2", {"id": f"om:{mid(1)}"})["found"] is False
    assert "fact 1 from owner" not in memory_view(
        store.entries("s2"), "full", shared=store.resolve("s2")
    )
