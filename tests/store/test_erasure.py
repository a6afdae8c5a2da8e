"""Erasure in the store: hidden at once, deleted by the job's steps, workspaces blanked from the
first erased copy on, idempotent. SQLite and, with ``OM_TEST_DATABASE_URL``, PostgreSQL."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text
from store_factories import assistant, message, observations

from om_core.errors import EntryConflictError
from om_core.ledger.erasure import ERASED_TYPE
from om_core.ledger.funnel import funnel_copy_id
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import Observation, ObservationsRecorded, SessionEntry
from om_core.portability import dump_line
from om_workers.errors import (
    ErasureJobNotFoundError,
    FlushJobNotFoundError,
    InvalidSubjectError,
    SessionExistsError,
    SessionNotFoundError,
    StaleEpochError,
)
from om_workers.store import AccountStore, SqlStore, tombstone_scope
from om_workers.store.schema import metadata

CANARY = "canary-7f3a91-zebra-quartz"
WS = "ws"


def _all_rows_text(store: SqlStore) -> str:
    """Every row of every table, as text."""
    parts: list[str] = []
    with store.engine.connect() as connection:
        for table in metadata.sorted_tables:
            for row in connection.execute(select(table)):
                parts.append(json.dumps([str(value) for value in row]))
    return "\n".join(parts)


def _observe_copy(store: SqlStore, tenant: str, copy_id: str, fact: str) -> None:
    recorded = ObservationsRecorded(
        observations=(Observation(id=create_memory_id(), text=fact, source_entry_ids=(copy_id,)),),
        covers_up_to_id=copy_id,
    )
    entry = SessionEntry.model_validate(
        {
            "id": f"obs-{copy_id[:12]}",
            "sessionId": WS,
            "kind": "custom",
            "data": recorded.to_json_dict(),
        }
    )
    epoch = store.raise_epoch(tenant, WS)
    store.append_memory(tenant, WS, entry, epoch)


def _erase(store: SqlStore, tenant: str, session_id: str) -> None:
    job = store.erasure.erase_session(tenant, session_id, None)
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target, chunk=3)
    store.erasure.finish_job(job.id, "succeeded", {"sessions": len(started[1])})


@pytest.fixture
def funnelled(store: SqlStore, tenant: str) -> None:
    """A workspace with its own message and memory, a child whose metadata and tool output hold
    the canary, funnelled onto it and observed there, and an unrelated session."""
    store.create_session(tenant, WS)
    store.append_entries(tenant, WS, message("w0", WS, "parent asks for a survey"))
    entry, _ = observations("w-obs", ["w0"], "w0", WS)
    store.append_memory(tenant, WS, entry, store.raise_epoch(tenant, WS))
    store.create_session(tenant, "child", workspace=WS, metadata={"ticket": CANARY})
    store.append_entries(
        tenant,
        "child",
        [message("c1", "child", "look it up"), assistant("c2", "child", f"tool said {CANARY}")],
    )
    copy_id = funnel_copy_id(WS, "child", "c2")
    _observe_copy(store, tenant, copy_id, f"the tool reported {CANARY}")
    store.append_entries(tenant, WS, message("w1", WS, "after the child"))
    store.create_session(tenant, "other")
    store.append_entries(tenant, "other", message("o1", "other", "unrelated words"))


def test_a_session_is_hidden_at_once_and_gone_after_its_job(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    assert CANARY in _all_rows_text(store)
    flush = store.create_job(tenant, "child")
    job = store.erasure.erase_session(tenant, "child", "key1")
    assert job.state == "queued" and job.kind == "session" and job.target == "child"
    with pytest.raises(SessionNotFoundError):
        store.get_session(tenant, "child")
    with pytest.raises(SessionNotFoundError):
        store.append_entries(tenant, "child", message("c3", "child", "more"))
    with pytest.raises(FlushJobNotFoundError):
        store.get_job(tenant, flush.id)
    assert "child" not in [s.id for s in store.list_sessions(tenant).sessions]
    assert store.get_session(tenant, WS).workspace_id is None
    other_before = store.read_branch(tenant, "other")

    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        counts = store.erasure.erase_target(target, chunk=1)
        assert counts["entries"] == 2 and counts["workspace_entries"] == 3
    store.erasure.finish_job(job.id, "succeeded", {"sessions": 1})

    assert CANARY not in _all_rows_text(store)
    assert store.read_branch(tenant, "other") == other_before
    branch = store.read_branch(tenant, WS)
    # The workspace keeps its shape: same ids, the copy and the later memory blanked.
    assert branch[0].id == "w0"
    blanked = [e for e in branch if (e.data or {}).get("type") == ERASED_TYPE]
    assert len(blanked) == 3  # both copies and the observation citing one
    # Memory before the first erased copy stays; the cursor falls back to it.
    state = store.read_context_state(tenant, WS)
    assert [o.text for o in state.ledger.observations] == ["fact from w0"]
    assert state.ledger.observation_covers_up_to_id == "w0"
    # The message after the copy is unobserved again: the next flush re-observes it.
    assert store.get_session(tenant, WS).unobserved_tokens > 0


def test_erasure_is_idempotent_and_frees_the_id(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    _erase(store, tenant, "child")
    again = store.erasure.erase_session(tenant, "child", None)
    assert again.state == "succeeded"
    assert store.erasure.start_job(again.id) is None
    store.create_session(tenant, "child")
    with pytest.raises(SessionNotFoundError):
        store.erasure.erase_session(tenant, "never", None)


def test_another_tenant_cannot_erase_or_read_the_job(
    store: SqlStore, tenant: str, accounts: object, funnelled: None
) -> None:
    from om_workers.store import AccountStore

    assert isinstance(accounts, AccountStore)
    accounts.create_tenant("rival")
    with pytest.raises(SessionNotFoundError):
        store.erasure.erase_session("rival", "child", None)
    job = store.erasure.erase_session(tenant, "child", None)
    with pytest.raises(ErasureJobNotFoundError):
        store.erasure.get_job("rival", job.id)


def _live(store: SqlStore, tenant: str, session_ids: list[str]) -> list[str]:
    live = []
    for session_id in session_ids:
        try:
            store.get_session(tenant, session_id)
        except SessionNotFoundError:
            continue
        live.append(session_id)
    return live


def test_erasing_a_subject_hides_every_live_session_naming_it_and_no_other(
    store: SqlStore, tenant: str, accounts: AccountStore
) -> None:
    rival = accounts.create_tenant("rival").id
    named = {
        "a1": {"subject": "u@example.com"},
        "a2": {"subject": "u@example.com", "plan": "pro"},
        "a3": {"subject": "v"},
        "a4": {"subject": 5},
        "a5": {"owner": "u@example.com"},
        "a6": {"subject": "w" * 256},
    }
    for session_id, meta in named.items():
        store.create_session(tenant, session_id, metadata=meta)
    store.create_session(rival, "r1", metadata={"subject": "u@example.com"})
    _erase(store, tenant, "a1")

    job = store.erasure.erase_subject(tenant, "u@example.com", None)
    assert (job.kind, job.target) == ("subject", "u@example.com")
    assert _live(store, tenant, list(named)) == ["a3", "a4", "a5", "a6"]
    assert _live(store, rival, ["r1"]) == ["r1"]
    # Only a string names a subject, on both stores.
    store.erasure.erase_subject(tenant, "5", None)
    store.erasure.erase_subject(tenant, "nobody", None)
    assert _live(store, tenant, list(named)) == ["a3", "a4", "a5", "a6"]
    store.erasure.erase_subject(tenant, "w" * 256, None)
    assert _live(store, tenant, list(named)) == ["a3", "a4", "a5"]


@pytest.mark.parametrize(
    ("subject", "reason"),
    [
        ("w" * 257, "at most 256 characters"),
        ("nul\x00", "NUL or a lone surrogate"),
        ("lone\ud800", "NUL or a lone surrogate"),
    ],
)
def test_a_subject_no_session_can_be_erased_by_is_refused_before_anything_is_written(
    store: SqlStore, tenant: str, subject: str, reason: str
) -> None:
    store.create_session(tenant, "s", metadata={"subject": "w" * 257})
    with pytest.raises(InvalidSubjectError, match=reason):
        store.erasure.erase_subject(tenant, subject, None)
    assert _live(store, tenant, ["s"]) == ["s"]
    assert store.erasure.audit_events(tenant, 10) == []


def test_erasing_a_workspace_unlinks_its_children(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    _erase(store, tenant, WS)
    assert store.get_session(tenant, "child").workspace_id is None
    store.append_entries(tenant, "child", message("c9", "child", "still works"))
    with store.engine.connect() as connection:
        left = connection.execute(
            text("SELECT count(*) FROM entries WHERE id LIKE 'fn-%'")
        ).scalar()
    assert left == 0


def test_entry_ids_of_an_erased_session_can_be_used_again(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    store.erasure.erase_session(tenant, "other", None)
    # Hidden but not yet deleted: its ids are still taken.
    with pytest.raises(EntryConflictError):
        store.append_entries(tenant, "child", message("o1", "child", "other words"))


def test_a_child_with_more_copies_than_one_statement_binds_is_erased(
    store: SqlStore, tenant: str
) -> None:
    store.create_session(tenant, WS)
    store.create_session(tenant, "busy", workspace=WS)
    batch = [message(f"b{i}", "busy", f"{CANARY} {i}") for i in range(1200)]
    store.append_entries(tenant, "busy", batch)
    assert store.get_session(tenant, WS).entry_count == 1200
    _erase(store, tenant, "busy")
    assert CANARY not in _all_rows_text(store)
    assert store.get_session(tenant, WS).unobserved_tokens == 0


def test_the_job_pauses_between_chunks_when_asked(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "long")
    store.append_entries(tenant, "long", [message(f"l{i}", "long", "x") for i in range(10)])
    job = store.erasure.erase_session(tenant, "long", None)
    started = store.erasure.start_job(job.id)
    assert started is not None
    pauses: list[float] = []
    counts = store.erasure.erase_target(started[1][0], chunk=4, pause_s=0.25, pause=pauses.append)
    assert counts["entries"] == 10
    assert pauses == [0.25, 0.25, 0.25]  # between the four chunks (the last finds none)


def test_a_workspace_flush_that_read_the_copies_cannot_write_after_the_erasure(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    epoch = store.raise_epoch(tenant, WS)  # a flush of the workspace starts, reads the copies
    _erase(store, tenant, "child")
    late, _ = observations("w-late", ["w1"], "w1", WS)
    with pytest.raises(StaleEpochError):
        store.append_memory(tenant, WS, late, epoch)
    assert CANARY not in _all_rows_text(store)


def test_an_erased_id_is_taken_until_its_job_has_deleted_it(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    scope = tombstone_scope("other")
    store.add_tombstones(tenant, scope, ["o1"])
    job = store.erasure.erase_session(tenant, "other", None)
    assert store.list_tombstones(tenant, scope) == ()  # revocations go with the hiding
    with pytest.raises(SessionExistsError, match="being erased"):
        store.create_session(tenant, "other")
    started = store.erasure.start_job(job.id)
    assert started is not None
    store.erasure.erase_target(started[1][0])
    store.create_session(tenant, "other")
    store.append_entries(tenant, "other", message("o1", "other", "a new life"))
    assert [e.id for e in store.read_branch(tenant, "other")] == ["o1"]


def test_a_workspace_with_erased_placeholders_exports_and_imports_whole(
    store: SqlStore, tenant: str, accounts: AccountStore, funnelled: None
) -> None:
    _erase(store, tenant, "child")
    lines = [
        dump_line(item.to_json_dict() if isinstance(item, SessionEntry) else item)
        for item in store.export_session(tenant, WS)
    ]
    assert any(ERASED_TYPE.encode() in line for line in lines)
    assert not any(CANARY.encode() in line for line in lines)
    other = accounts.create_tenant("copy").id
    result = store.import_session(other, WS, enumerate(lines, start=1))
    assert result.created and result.imported == store.get_session(tenant, WS).entry_count
    assert store.read_branch(other, WS) == store.read_branch(tenant, WS)


def test_reads_cached_before_the_erasure_do_not_outlive_it(
    store: SqlStore, tenant: str, funnelled: None
) -> None:
    # The API's reads keep parsed tails and ledgers between requests; the workspace's entries
    # are rewritten in place by the erasure, so what was cached before must not answer after.
    def seen() -> str:
        tail = store.read_tail(tenant, WS, 50)
        state = store.read_context_state(tenant, WS)
        return json.dumps([e.to_json_dict() for e in tail]) + state.ledger.model_dump_json()

    assert CANARY in seen() and CANARY in seen()  # the second read is answered from the caches
    _erase(store, tenant, "child")
    assert CANARY not in seen()
    assert store.get_session(tenant, WS).entry_count == len(store.read_tail(tenant, WS, 50))
