"""Export and import in the store: the shared LoCoMo conversations, flushed into real memory,
exported and imported into another tenant (on the same backend, and from SQLite to
PostgreSQL and back) read the same context and recall; an export holds one page at a time."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from om_api.evaluation.locomo import load_conversations
from om_api.evaluation.runner import run_messages, session_id_for
from om_core.ledger.models import SessionEntry
from om_core.portability import dump_line
from om_core.settings import resolve_settings
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.reads import session_context, session_recall
from om_workers.store import AccountStore, SqlStore, tombstone_scope, upgrade
from om_workers.store.repositories.entries import EntryRepository
from tests.conftest import PG_URL, fresh_database
from tests.eval import synthetic

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo"
SESSIONS_PER_CONVERSATION = 3
MEMORY = {**synthetic.SETTINGS, "reflection": {"observationTokens": 50}}
SETTINGS = resolve_settings(MEMORY)


def export_bytes(store: SqlStore, tenant: str, session_id: str) -> list[bytes]:
    return [
        dump_line(item.to_json_dict() if isinstance(item, SessionEntry) else item)
        for item in store.export_session(tenant, session_id)
    ]


def locomo_sessions(store: SqlStore, tenant: str, client: redis.Redis) -> list[str]:
    """The shared conversations' first sessions, each appended as one agent run and flushed
    with the offline provider, so every session has observations and a reflection to read."""
    if not DATA.is_dir():
        pytest.skip(f"no LoCoMo data at {DATA}")
    deps = FlushDeps(store=store, redis=client, publish=lambda *_: None, memory_settings=MEMORY)
    made = []
    for conversation in (
        c for path in sorted(DATA.glob("*.json")) for c in load_conversations(path)
    ):
        session_id = session_id_for(conversation)
        store.create_session(tenant, session_id, metadata={"conversation": conversation.name})
        for session in conversation.sessions[:SESSIONS_PER_CONVERSATION]:
            entries = [
                SessionEntry(
                    id=m.entry_id,
                    session_id=session_id,
                    kind="message",
                    created_at=m.created_at,
                    message={"role": m.role, "content": m.text},
                )
                for m in run_messages(session_id, session)
            ]
            store.append_entries(tenant, session_id, entries)
            job = store.create_job(tenant, session_id, force=True)
            run_flush_job(deps, tenant, session_id, job.id, force=True)
            assert store.get_job(tenant, job.id).state == "succeeded"
        first = store.read_page(tenant, session_id, limit=3).entries[2].id
        store.add_tombstones(tenant, tombstone_scope(session_id), [first])
        made.append(session_id)
    return made


def reads(store: SqlStore, tenant: str, session_id: str) -> tuple[object, ...]:
    """What an agent reads: the context, and the recall of every memory id in the ledger."""
    withheld = store.invalidated_ids(tenant, tombstone_scope(session_id))
    context = session_context(
        store, tenant, session_id, settings=SETTINGS, invalidated_ids=withheld
    )
    ledger = store.read_context_state(tenant, session_id).ledger
    ids = [o.id for o in ledger.observations] + [r.id for r in ledger.reflections]
    assert ledger.observations and ledger.reflections
    recalls = [session_recall(store, tenant, session_id, i, invalidated_ids=withheld) for i in ids]
    return context, recalls, withheld


def round_trip(source: SqlStore, target: SqlStore, client: redis.Redis) -> None:
    tenant = AccountStore(source.engine).create_tenant("source").id
    other = AccountStore(target.engine).create_tenant("copy").id
    for session_id in locomo_sessions(source, tenant, client):
        lines = export_bytes(source, tenant, session_id)
        result = target.import_session(other, session_id, enumerate(lines, start=1))
        assert (
            result.created and result.imported == source.get_session(tenant, session_id).entry_count
        )
        assert reads(target, other, session_id) == reads(source, tenant, session_id)
        # The copy exports as the original did (but for the moment of export in the header;
        # PostgreSQL's JSONB orders an object's keys its own way, so compare values).
        again = export_bytes(target, other, session_id)
        assert [json.loads(x) for x in again[1:]] == [json.loads(x) for x in lines[1:]]
        info = target.get_session(other, session_id)
        assert info.metadata == source.get_session(tenant, session_id).metadata


def test_locomo_round_trip_into_another_tenant(store: SqlStore, client: redis.Redis) -> None:
    round_trip(store, store, client)


@pytest.fixture
def two_backends(tmp_path: Path) -> Iterator[tuple[SqlStore, SqlStore]]:
    if PG_URL is None:
        pytest.skip("OM_TEST_DATABASE_URL is not set")
    with (
        fresh_database("sqlite", tmp_path) as sqlite_url,
        fresh_database("postgresql", tmp_path) as pg_url,
    ):
        upgrade(sqlite_url)
        upgrade(pg_url)
        sqlite, pg = SqlStore.from_url(sqlite_url), SqlStore.from_url(pg_url)
        yield sqlite, pg
        sqlite.close()
        pg.close()


def test_locomo_from_sqlite_to_postgresql(
    two_backends: tuple[SqlStore, SqlStore], client: redis.Redis
) -> None:
    sqlite, pg = two_backends
    round_trip(sqlite, pg, client)


def test_locomo_from_postgresql_to_sqlite(
    two_backends: tuple[SqlStore, SqlStore], client: redis.Redis
) -> None:
    sqlite, pg = two_backends
    round_trip(pg, sqlite, client)


def _grow(store: SqlStore, tenant: str, session_id: str, count: int) -> None:
    store.create_session(tenant, session_id)
    for start in range(0, count, 1000):
        store.append_entries(
            tenant,
            session_id,
            [
                SessionEntry(
                    id=f"{session_id}-{i}",
                    session_id=session_id,
                    kind="message",
                    message={"role": "user", "content": f"message {i} " + "x" * 200},
                )
                for i in range(start, min(count, start + 1000))
            ],
        )


def _peak(work: Callable[[], object]) -> int:
    """The peak of memory allocated while ``work`` runs, bytes."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_export_reads_pages_and_holds_one_at_a_time(
    store: SqlStore, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _grow(store, tenant, "long", 20_000)
    pages: list[tuple[int, int]] = []
    real_page = EntryRepository.page

    def counted(self: EntryRepository, *args: Any) -> tuple[int, tuple[SessionEntry, ...]]:
        found = real_page(self, *args)
        pages.append((args[-1], len(found[1])))
        return found

    monkeypatch.setattr(EntryRepository, "page", counted)
    lines = sum(1 for _ in store.export_session(tenant, "long", page_size=500))
    assert lines == 20_002
    # Forty pages of 500 and the empty read that ends the stream; never a larger read.
    assert pages == [(500, 500)] * 40 + [(500, 0)]
    exporting = _peak(lambda: sum(1 for _ in store.export_session(tenant, "long", page_size=500)))
    whole = _peak(lambda: store.read_branch(tenant, "long"))
    assert exporting * 10 < whole, (exporting, whole)


def _observed(session_id: str, entry_id: str, obs_id: str, source: str) -> SessionEntry:
    data = {
        "type": "om.observations.recorded",
        "observations": [{"id": obs_id, "text": "A fact.", "sourceEntryIds": [source]}],
        "coversUpToId": source,
    }
    return SessionEntry(id=entry_id, session_id=session_id, kind="custom", data=data)


def test_an_export_is_the_branch_of_its_start_and_imports_whole(
    store: SqlStore, tenant: str
) -> None:
    _grow(store, tenant, "busy", 10)
    store.append_entries(tenant, "busy", _observed("busy", "busy-obs", "0000000000c1", "busy-9"))
    items = store.export_session(tenant, "busy", page_size=4)
    started = [next(items), next(items)]
    # A flush commits memory while the export streams: it belongs to the next export.
    store.append_entries(tenant, "busy", _observed("busy", "busy-obs2", "0000000000c2", "busy-9"))
    lines = [
        dump_line(i.to_json_dict() if isinstance(i, SessionEntry) else i)
        for i in [*started, *items]
    ]
    assert b"0000000000c2" not in b"".join(lines) and b"0000000000c1" in b"".join(lines)
    other = AccountStore(store.engine).create_tenant("later").id
    assert store.import_session(other, "busy", enumerate(lines, start=1)).imported == 11
