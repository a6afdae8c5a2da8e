"""15. Full-text search (SQLite store): retrieval quality on LoCoMo against BM25, latency by
session size, and what the index costs an append.

- **Retrieval**: every LoCoMo turn is appended as a message of its conversation's session;
  for each question with evidence, is an evidence turn among the top 5 / top 10 hits of the
  session search for the question's text? Baseline: ``bm25s`` (English stopwords, no stemmer)
  over the same turns, top 5 / top 10. Skipped when there is no LoCoMo data.
- **Latency**: p99 of a session search (limit 10, three words drawn from a synthetic
  vocabulary with a Zipf-like frequency) on a 100k-entry session against a 1k-entry session
  of the same store (goal: the ratio at most 3), wall-clock and in the searching thread's CPU
  time (what other processes on a shared machine move least).
- **Tenant**: p99 of a tenant-wide search on a tenant of 1M entries (1,000 sessions of 1,000,
  bulk-inserted through the same triggers) against a tenant of 1k entries in the same store;
  narrowed by metadata to one group's sessions against the whole tenant; and the same
  narrowed search in a tenant of 100,000 sessions against one of 1,000.
- **Append**: entries per second appended in batches of 100 with the index's triggers against
  the same database without them (the figure is the slowdown; goal at most 1.3), wall-clock
  and in the process's CPU time; and the same in batches of 4, an agent turn's messages.
- **PostgreSQL**: the session latency on a PostgreSQL store (``OM_TEST_DATABASE_URL``, else
  the local server), wall-clock only (the server does the work); skipped when unreachable.
"""

from __future__ import annotations

import gc
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, update

from om_core.ledger.append_plan import wire
from om_core.ledger.models import Message, SessionEntry
from om_core.read.search_narrowing import MetadataNarrowing
from om_workers import heap
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store.repositories.search_sqlite import SET_ROWS_PER_SESSION
from om_workers.store.schema import entries, sessions

from .bench_history import _analyze, postgres_url
from .bench_locomo import DATA
from .bench_narrowing import MATCHING, SESSION_COUNTS, narrowed_tenant
from .common import Section

VOCABULARY = 5_000
WORDS_PER_MESSAGE = 24
QUERIES = 300
SIZES = (1_000, 100_000)
BATCH = 1_000
TENANT_SESSIONS = 1_000
SESSION_ENTRIES = 1_000
GROUPS = 100
"""The tenant's sessions carry ``metadata.group``, one of this many (10 sessions each of the
1,000): a search narrowed to a group searches 10 sessions."""
APPEND_ENTRIES = 20_000
APPEND_BATCH = 100
TURN_BATCH = 4
"""Messages an agent turn appends at once (the agent-turns load's shape): FTS5 writes a
segment per statement, so its cost per message is larger in small appends."""
SPREAD_SESSIONS = 500
"""Sessions an agent server's appends go to in turn, in the append figure that spreads them."""


@dataclass(frozen=True)
class _P99:
    """A p99 in milliseconds: wall-clock and the searching thread's CPU time."""

    wall: float
    cpu: float


def _word(rng: random.Random) -> str:
    # Zipf-like: low ranks are common, high ranks rare.
    return f"w{int(VOCABULARY ** rng.random())}"


def _messages(
    session_id: str, count: int, rng: random.Random, start: int = 0
) -> list[SessionEntry]:
    rows: list[SessionEntry] = []
    for i in range(start, start + count):
        text = " ".join(_word(rng) for _ in range(WORDS_PER_MESSAGE))
        rows.append(
            SessionEntry(
                id=f"{session_id}-{i}",
                session_id=session_id,
                parent_id=f"{session_id}-{i - 1}" if i else None,
                kind="message",
                message=Message(role="user" if i % 2 else "assistant", content=text),
            )
        )
    return rows


def _store(folder: str, name: str) -> tuple[SqlStore, str]:
    return _store_at(f"sqlite:///{Path(folder) / name}")


def _store_at(url: str) -> tuple[SqlStore, str]:
    upgrade(url)
    store = SqlStore.from_url(url)
    return store, AccountStore(store.engine).create_tenant("bench").id


@contextmanager
def _settled() -> Iterator[None]:
    """The heap settled as a server process's (:func:`om_workers.heap.settle`) inside the
    block, and the collector as it was after it (the later sections run in this process)."""
    threshold = gc.get_threshold()
    heap.settle()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _timed_p99(search: Callable[[str], object], rng: random.Random, count: int) -> _P99:
    """p99 of ``count`` searches of three vocabulary words: wall-clock, and the CPU time of
    the searching thread (SQLite runs on it), which other processes on the machine move less.

    The process's heap is settled first, as ``om api`` settles its own: a full collection over
    the objects the loads left (25-95 ms here) would otherwise land in the p99, and it is this
    process's cost, not the search's."""
    walls: list[float] = []
    cpus: list[float] = []
    with _settled():
        for _ in range(count):
            q = " ".join(_word(rng) for _ in range(3))
            start, cpu = time.perf_counter(), time.thread_time()
            search(q)
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - start)
    at = int(count * 0.99) - 1
    return _P99(sorted(walls)[at] * 1000, sorted(cpus)[at] * 1000)


def _p99(store: SqlStore, tenant: str, session_id: str, rng: random.Random) -> _P99:
    return _timed_p99(
        lambda q: store.search(tenant, q, session_id=session_id, limit=10), rng, QUERIES
    )


def _session_p99s(store: SqlStore, tenant: str) -> tuple[_P99, _P99]:
    """The search p99 of a 1k-entry and of a 100k-entry session of ``store``."""
    rng = random.Random(7)
    for size in SIZES:
        session_id = f"s{size}"
        store.create_session(tenant, session_id)
        for start in range(0, size, BATCH):
            store.append_entries(tenant, session_id, _messages(session_id, BATCH, rng, start))
    _analyze(store)
    small, large = (_p99(store, tenant, f"s{size}", random.Random(11)) for size in SIZES)
    return small, large


def _latency(section: Section, folder: str) -> None:
    store, tenant = _store(folder, "latency.db")
    small, large = _session_p99s(store, tenant)
    section.add("search p99, 100k-entry session", large.wall, "ms", "1k-entry session", small.wall)
    section.add(
        "search p99 (thread CPU), 100k-entry session",
        large.cpu,
        "ms",
        "1k-entry session",
        small.cpu,
    )
    store.close()


def _latency_postgresql(section: Section) -> None:
    with postgres_url() as url:
        if url is None:
            print("  postgresql: not reachable, skipped", flush=True)
            return
        store, tenant = _store_at(url)
        try:
            small, large = _session_p99s(store, tenant)
            tenants = _load_tenants(store)
            unvacuumed, _ = _tenant_p99s(store, tenants)
            _vacuum(store)
            big, small_tenant = _tenant_p99s(store, tenants, seed=17)
            again, _ = _tenant_p99s(store, tenants, seed=17)
            narrowed = _narrowed_p99(store, tenants[0], seed=19)
            few_sessions, many_sessions = _narrowing_p99s(store)
            cache = _server_cache(store)
        finally:
            store.close()
    section.add(
        "PostgreSQL: search p99, 100k-entry session",
        large.wall,
        "ms",
        "1k-entry session",
        small.wall,
    )
    section.add(
        f"PostgreSQL: tenant search p99, {_TENANT_ENTRIES}",
        big.wall,
        "ms",
        _TENANT_BASELINE,
        small_tenant.wall,
    )
    section.add(
        f"PostgreSQL: tenant search p99, {_TENANT_ENTRIES}, right after the load",
        unvacuumed.wall,
        "ms",
        "after VACUUM",
        big.wall,
    )
    section.add(
        f"PostgreSQL: tenant search p99, {_TENANT_ENTRIES}, the same searches again",
        again.wall,
        "ms",
        "after VACUUM",
        big.wall,
    )
    section.add(
        f"PostgreSQL: tenant search p99, {_TENANT_ENTRIES}, narrowed to {_GROUP} by metadata",
        narrowed.wall,
        "ms",
        "the whole tenant, after VACUUM",
        big.wall,
    )
    section.add(
        f"PostgreSQL: tenant search p99, {_NARROWED}, {_MANY_SESSIONS}",
        many_sessions.wall,
        "ms",
        _FEW_SESSIONS,
        few_sessions.wall,
    )
    section.notes.append(f"PostgreSQL server: {cache}.")


def _server_cache(store: SqlStore) -> str:
    """The server's ``shared_buffers`` beside the size of what the searches read, in words."""
    with store.engine.connect() as connection:
        buffers, table, index = connection.exec_driver_sql(
            "SELECT current_setting('shared_buffers'), "
            "pg_size_pretty(pg_table_size('entries')), "
            "pg_size_pretty(pg_relation_size('ix_entries_search_levels'))"
        ).one()
    return f"shared_buffers {buffers}; the entries table {table}, its search index {index}"


def _vacuum(store: SqlStore) -> None:
    """``VACUUM (ANALYZE)`` the whole PostgreSQL database, as autovacuum does after a bulk
    insert on a default server (it is off on the machine this was written on).

    Right after a load, a search's reads are the first of their rows: each sets the rows' hint
    bits (dirtying the page) and, with the load's dirty pages filling the shared buffers,
    writes pages out to make room. Measured here: 200 MB written by the searching backend over
    100 searches. That is the load's write-back, not the search's cost; the figure right after
    the load is reported beside it."""
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM (ANALYZE)")


def _bulk_tenant(store: SqlStore, tenant: str, count: int, rng: random.Random) -> None:
    """``count`` sessions of :data:`SESSION_ENTRIES` messages each, inserted as rows (the
    append path's planning is not what this measures; the index triggers still run), each
    session's leaf and entry count set as the appends would have left them (PostgreSQL's
    search plans by the count: a session counted empty has every match ranked at once)."""
    now = datetime.now(UTC)
    for n in range(count):
        session_id = f"{tenant}-{n}"
        store.create_session(tenant, session_id, metadata={"group": f"g{n % GROUPS}"})
        rows = []
        with store.engine.begin() as connection:
            pk = connection.execute(
                sessions.select()
                .with_only_columns(sessions.c.pk)
                .where(sessions.c.tenant_id == tenant, sessions.c.id == session_id)
            ).scalar_one()
            for seq, entry in enumerate(_messages(session_id, SESSION_ENTRIES, rng), start=1):
                rows.append(
                    {
                        "tenant_id": tenant,
                        "id": entry.id,
                        "session_pk": pk,
                        "parent_id": entry.parent_id,
                        "seq": seq,
                        "segment_start": 1,
                        "kind": "message",
                        "eligible_tokens": 0,
                        "payload": wire(entry),
                        "created_at": now,
                    }
                )
            # Multi-row statements, as the store's appends insert (FTS5 writes a segment per
            # statement, so this gives the index the shape appends give it).
            connection.execute(insert(entries).returning(entries.c.seq), rows).close()
            connection.execute(
                update(sessions)
                .where(sessions.c.pk == pk)
                .values(leaf_id=rows[-1]["id"], entry_count=len(rows))
            )


def _tenant_p99(store: SqlStore, tenant: str, rng: random.Random) -> _P99:
    return _timed_p99(lambda q: store.search(tenant, q, limit=10), rng, QUERIES // 3)


def _narrowed_p99(store: SqlStore, tenant: str, seed: int) -> _P99:
    """The p99 of the tenant's searches narrowed to one group's sessions by metadata."""
    group = MetadataNarrowing((("group", "g7"),))

    def search(q: str) -> object:
        return store.search(tenant, q, limit=10, narrowing=group)

    return _timed_p99(search, random.Random(seed), QUERIES // 3)


def _narrowing_p99s(store: SqlStore) -> tuple[_P99, _P99]:
    """The p99 of a search narrowed to the same number of sessions (each of 20 messages) in
    a tenant of 1,000 sessions and in one of 100,000 (:mod:`.bench_narrowing`)."""
    rng = random.Random(29)
    narrowed: list[tuple[str, MetadataNarrowing]] = []
    for count in SESSION_COUNTS:
        tenant, narrowing, matching = narrowed_tenant(store, count)
        for session_id in matching:
            store.append_entries(tenant, session_id, _messages(session_id, 20, rng))
        narrowed.append((tenant, narrowing))
    _analyze(store)

    def p99(tenant: str, narrowing: MetadataNarrowing) -> _P99:
        def search(q: str) -> object:
            return store.search(tenant, q, limit=10, narrowing=narrowing)

        return _timed_p99(search, random.Random(31), QUERIES // 3)

    small, big = (p99(tenant, narrowing) for tenant, narrowing in narrowed)
    return small, big


_NARROWED = f"narrowed to {MATCHING} sessions by metadata"
_MANY_SESSIONS = f"tenant of {SESSION_COUNTS[1]:,} sessions"
_FEW_SESSIONS = f"tenant of {SESSION_COUNTS[0]:,} sessions"


def _narrowing(section: Section, folder: str) -> None:
    store, _ = _store(folder, "narrowing.db")
    small, big = _narrowing_p99s(store)
    section.add(
        f"tenant search p99, {_NARROWED}, {_MANY_SESSIONS}",
        big.wall,
        "ms",
        _FEW_SESSIONS,
        small.wall,
    )
    store.close()


def _load_tenants(store: SqlStore) -> tuple[str, str]:
    """A 1M-entry tenant and a 1k-entry one in ``store``, analysed: their ids."""
    accounts = AccountStore(store.engine)
    big, small_tenant = accounts.create_tenant("big").id, accounts.create_tenant("small").id
    rng = random.Random(5)
    _bulk_tenant(store, small_tenant, 1, rng)
    _bulk_tenant(store, big, TENANT_SESSIONS, rng)
    _analyze(store)
    return big, small_tenant


def _tenant_p99s(store: SqlStore, tenants: tuple[str, str], seed: int = 13) -> tuple[_P99, _P99]:
    """The tenant-wide search p99 of the large and of the small tenant."""
    big, small_tenant = tenants
    return (
        _tenant_p99(store, big, random.Random(seed)),
        _tenant_p99(store, small_tenant, random.Random(seed)),
    )


_TENANT_ENTRIES = f"{TENANT_SESSIONS * SESSION_ENTRIES:,} entries"
_TENANT_BASELINE = f"{SESSION_ENTRIES:,}-entry tenant"
_GROUP = f"{TENANT_SESSIONS // GROUPS} sessions"


def _tenant(section: Section, folder: str) -> None:
    store, _ = _store(folder, "tenant.db")
    tenants = _load_tenants(store)
    large, small = _tenant_p99s(store, tenants)
    narrowed = _narrowed_p99(store, tenants[0], seed=13)
    section.add(
        f"tenant search p99, {_TENANT_ENTRIES}", large.wall, "ms", _TENANT_BASELINE, small.wall
    )
    section.add(
        f"tenant search p99, {_TENANT_ENTRIES}, narrowed to {_GROUP} by metadata",
        narrowed.wall,
        "ms",
        "the whole tenant",
        large.wall,
    )
    section.add(
        f"tenant search p99 (thread CPU), {_TENANT_ENTRIES}",
        large.cpu,
        "ms",
        _TENANT_BASELINE,
        small.cpu,
    )
    store.close()


def _append_rate(
    store: SqlStore, tenant: str, batch: int, sessions: int = 1
) -> tuple[float, float]:
    """Seconds to append the messages ``batch`` at a time to ``sessions`` sessions in turn:
    wall-clock, and the process's CPU time (every thread: the store's writers' queue hands
    work between them)."""
    rng = random.Random(3)
    names = [f"a{n}" for n in range(sessions)]
    rows = {}
    for name in names:
        store.create_session(tenant, name)
        rows[name] = _messages(name, APPEND_ENTRIES // sessions, rng)
    start, cpu = time.perf_counter(), time.process_time()
    for at in range(0, APPEND_ENTRIES // sessions, batch):
        for name in names:
            store.append_entries(tenant, name, rows[name][at : at + batch])
    return time.perf_counter() - start, time.process_time() - cpu


def _append(section: Section, folder: str, batch: int = APPEND_BATCH, sessions: int = 1) -> None:
    # Best of 3 of each, alternating, each on a fresh database: the first appends of a process
    # pay its warm-up, which would otherwise fall on whichever side went first.
    timings: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for run in range(3):
        for indexed in (False, True):
            store, tenant = _store(folder, f"append-{batch}-{sessions}-{run}-{int(indexed)}.db")
            if not indexed:
                with store.engine.begin() as connection:
                    for trigger in ("insert", "delete", "update"):
                        connection.exec_driver_sql(f"DROP TRIGGER entries_fts_{trigger}")
            timings[indexed].append(_append_rate(store, tenant, batch, sessions))
            store.close()
    name = f"append {APPEND_ENTRIES:,} messages"
    if batch != APPEND_BATCH:
        name += f" {batch} at a time"
    if sessions > 1:
        name += f" to {sessions} sessions in turn"
    name += ", with the index"
    section.add(
        name,
        min(wall for wall, _ in timings[True]),
        "s",
        "without the index",
        min(wall for wall, _ in timings[False]),
    )
    section.add(
        f"{name} (process CPU)",
        min(cpu for _, cpu in timings[True]),
        "s",
        "without the index",
        min(cpu for _, cpu in timings[False]),
    )


def locomo_sessions(store: SqlStore, tenant: str) -> list[tuple[str, list[Any], Any]]:
    """Every LoCoMo conversation appended as a session of its turns: ``(session id, turns,
    conversation)`` each (an empty list when there is no data)."""
    from om_api.evaluation import load_conversations

    loaded: list[tuple[str, list[Any], Any]] = []
    for path in sorted(DATA.glob("*.json")):
        for conversation in load_conversations(path):
            session_id = f"locomo-{path.stem}"
            store.create_session(tenant, session_id)
            turns = [t for s in conversation.sessions for t in s.turns]
            entries: list[SessionEntry] = []
            for n, turn in enumerate(turns):
                entries.append(
                    SessionEntry(
                        id=f"{session_id}-{turn.dia_id}",
                        session_id=session_id,
                        parent_id=entries[-1].id if entries else None,
                        kind="message",
                        message=Message(role=turn.role, content=turn.text or "(empty)"),
                    )
                )
                if n % BATCH == BATCH - 1:
                    store.append_entries(tenant, session_id, entries[-BATCH:])
            if len(entries) % BATCH:
                store.append_entries(tenant, session_id, entries[-(len(entries) % BATCH) :])
            loaded.append((session_id, turns, conversation))
    return loaded


def bm25_ranker(turns: list[Any], session_id: str) -> Callable[[str], list[str]]:
    """The ``bm25s`` baseline over the session's turns: a question's top 10 entry ids."""
    import bm25s

    corpus = [t.text or "(empty)" for t in turns]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False))

    def rank(question: str) -> list[str]:
        tokens = bm25s.tokenize([question], stopwords="en", show_progress=False)
        found, _ = retriever.retrieve(tokens, k=min(10, len(corpus)), show_progress=False)
        return [f"{session_id}-{turns[int(i)].dia_id}" for i in found[0]]

    return rank


def _retrieval(section: Section, folder: str) -> None:
    store, tenant = _store(folder, "locomo.db")
    loaded = locomo_sessions(store, tenant)
    if not loaded:
        section.notes.append(f"retrieval skipped: no LoCoMo data in {DATA}")
        store.close()
        return
    ours = {5: 0, 10: 0}
    theirs = {5: 0, 10: 0}
    asked = 0
    for session_id, turns, conversation in loaded:
        baseline_of = bm25_ranker(turns, session_id)
        known = conversation.dia_ids
        for question in conversation.questions:
            evidence = {f"{session_id}-{d}" for d in question.evidence if d in known}
            if not evidence:
                continue
            asked += 1
            hits = store.search(tenant, question.question, session_id=session_id, limit=10)
            ranked = [h.id for h in hits.hits]
            baseline = baseline_of(question.question)
            for k in ours:
                ours[k] += bool(evidence & set(ranked[:k]))
                theirs[k] += bool(evidence & set(baseline[:k]))
    for k in (5, 10):
        section.add(
            f"LoCoMo evidence in top {k} ({asked} questions)",
            100 * ours[k] / asked,
            "%",
            "bm25s",
            100 * theirs[k] / asked,
        )
    store.close()


def run() -> Section:
    section = Section("15. Full-text search (SQLite store)")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        _retrieval(section, folder)
        _latency(section, folder)
        _append(section, folder)
        _append(section, folder, TURN_BATCH)
        _append(section, folder, TURN_BATCH, SPREAD_SESSIONS)
        _tenant(section, folder)
        _narrowing(section, folder)
    _latency_postgresql(section)
    section.notes += [
        "Retrieval: session search for the question's text (BM25 over the levelled terms of "
        "the question's four rarest Porter stems, docs/search.md) against bm25s (English "
        "stopwords, no stemmer) over the same turns; a question counts when an evidence turn "
        "is in the top k.",
        f"Latency: {QUERIES} searches of three vocabulary words (Zipf-like, {VOCABULARY:,} "
        f"words, {WORDS_PER_MESSAGE} words a message), limit 10; goal 100k/1k at most 3. "
        "Thread CPU: the same searches' CPU time on the searching thread, where SQLite runs.",
        f"Append: {APPEND_ENTRIES:,} messages in batches of {APPEND_BATCH} (and of "
        f"{TURN_BATCH}, an agent turn's, to one session, and to {SPREAD_SESSIONS} sessions "
        "in turn, as an agent server's appends come), with the FTS5 triggers (each computing "
        "the row's levelled terms in Python) against the same schema without them, best of 3 "
        "each, alternating; goal at most 1.3. Process CPU: the same runs' CPU time, every "
        "thread.",
        f"Tenant: {TENANT_SESSIONS:,} sessions of {SESSION_ENTRIES:,} synthetic messages "
        "inserted as rows (triggers included), tenant-wide searches of three words, limit 10, "
        "against a 1-session tenant in the same file; and narrowed by metadata to the 10 "
        "sessions of one group (one scope on PostgreSQL; on SQLite each session in turn, keys "
        f"merged, as its index holds far more than {SET_ROWS_PER_SESSION:,} messages for each "
        "of them) against the whole tenant. "
        "Narrowed by sessions: the same narrowed search (10 sessions of 20 messages match) "
        "in a tenant of 100,000 sessions against one of 1,000, the sessions inserted as rows "
        "with the metadata pairs a created session gets.",
        "PostgreSQL: the latency figures' sessions and the tenants on a fresh PostgreSQL "
        "schema (levelled terms in a GIN-indexed column, weighed by the table's statistics), "
        "ANALYZEd after each load, searched at once; wall-clock. The tenant figure is then "
        "measured again with other queries after VACUUM (ANALYZE), as autovacuum would run "
        "after such a load (the row 'right after the load' is the first pass: its reads set "
        "hint bits and write the load's dirty pages out), and a third time with the same "
        "queries as the second: their pages then come from PostgreSQL's shared buffers as far "
        "as these hold them, else from the kernel's cache.",
        "Each timed loop settles the process's heap first (gc.collect and gc.freeze, as "
        "om api does at start), so that a full collection of this process is not timed.",
        f"Load average (1 min) {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the "
        "end (2 cores).",
    ]
    return section
