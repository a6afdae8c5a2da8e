"""9. Flush cost against history: one worker flush of the same 40 new messages on sessions that
already hold 0, 2,000, 10,000, 40,000 and 100,000 consolidated entries, on SQLite and (when
reachable) PostgreSQL, with the SQL statements each flush issues.

The flush runs as a worker runs it: a job row and pending marker from
``om_workers.jobs.requests.request_flush`` (forced), then ``om_workers.jobs.flush.run_flush_job``
on a private Redis; only ``run_flush_job`` is timed. Baseline: the same flush on an empty history
in the same run. PostgreSQL: ``OM_TEST_DATABASE_URL`` (a fresh schema in it), else a fresh
database on 127.0.0.1:5432 (user ``postgres``), dropped afterwards; skipped when neither answers.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url

from om_core.settings import DEFAULT_DROPPER_TARGET_TOKENS, DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.store import AccountStore, SqlStore, normalize_database_url, upgrade

from .common import Section
from .synthetic import consolidated_history, new_messages

SIZES = (0, 2_000, 10_000, 40_000, 100_000)
NEW_MESSAGES = 40
REPEAT = 3
LOAD_BATCH = 5_000
SLOW_FLUSH_S = 15.0
"""A flush slower than this is measured once, not best of 3 (keeps the section within a few
minutes when the flush costs what the history holds)."""
PG_HOST = ("-h", "127.0.0.1", "-p", "5432", "-U", "postgres")


@dataclass
class Figures:
    """One backend's measurements by history size."""

    backend: str
    seconds: dict[int, float] = field(default_factory=dict)
    statements: dict[int, int] = field(default_factory=dict)
    entries: dict[int, int] = field(default_factory=dict)
    build_s: dict[int, float] = field(default_factory=dict)
    observations: dict[int, int] = field(default_factory=dict)
    repeats: dict[int, int] = field(default_factory=dict)


class StatementCounter:
    """Counts the statements the engine sends to the database while ``counting`` is on."""

    def __init__(self, engine: Any) -> None:
        self.count = 0
        self.counting = False
        self._engine = engine
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: Any) -> None:
        if self.counting:
            self.count += 1

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._seen)


def _load(store: SqlStore, tenant: str, session_id: str, size: int) -> int:
    store.create_session(tenant, session_id)
    if not size:
        return 0
    rows = consolidated_history(
        size,
        session_id,
        pool_max_tokens=DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS,
        pool_target_tokens=DEFAULT_DROPPER_TARGET_TOKENS,
    )
    for start in range(0, len(rows), LOAD_BATCH):
        store.append_entries(tenant, session_id, rows[start : start + LOAD_BATCH])
        if start == 0:
            _analyze(store)
    _analyze(store)
    info = store.get_session(tenant, session_id)
    if info.unobserved_tokens != 0 or info.entry_count != len(rows):
        raise RuntimeError(f"history {session_id} not loaded as built: {info}")
    return len(rows)


def _analyze(store: SqlStore) -> None:
    """On PostgreSQL, refresh the planner's statistics as autovacuum would after a bulk load.

    Without them (autovacuum is off on the machine this was written on) the planner's cached
    plan for the branch's recursive segment query reads the whole session per recursion step:
    one flush of a 10,000-entry history took over a minute. A database autovacuum keeps
    analysed does not do that, so neither does the benchmark.
    """
    if store.engine.dialect.name == "postgresql":
        with store.engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")


def _flush_once(
    store: SqlStore,
    client: redis.Redis,
    deps: FlushDeps,
    counter: StatementCounter,
    tenant: str,
    session_id: str,
    tag: str,
) -> tuple[float, int, int]:
    """Append the 40 new messages, request a forced flush, time the job alone.

    Returns (seconds, statements, observations appended)."""
    store.append_entries(tenant, session_id, new_messages(session_id, tag, NEW_MESSAGES))
    request = request_flush(store, client, tenant, session_id, publish=_no_queue, force=True)
    if request.coalesced:
        raise RuntimeError(f"flush of {session_id} coalesced into {request.job_id}")
    counter.count = 0
    counter.counting = True
    start = time.perf_counter()
    outcome = run_flush_job(deps, tenant, session_id, request.job_id)
    elapsed = time.perf_counter() - start
    counter.counting = False
    counts = dict(outcome.counts)
    if outcome.outcome != "succeeded" or counts.get("observations", 0) <= 0:
        raise RuntimeError(f"flush of {session_id}: {outcome}")
    if counts.get("reflections") or counts.get("dropped"):
        # The same work at every size: the history leaves room, so only the observer runs.
        raise RuntimeError(f"flush of {session_id} reflected or dropped: {counts}")
    return elapsed, counter.count, counts["observations"]


def _no_queue(tenant_id: str, session_id: str, job_id: str) -> None:
    """``publish``: no Celery here, the benchmark runs the job itself."""


def measure(backend: str, url: str, redis_url: str) -> Figures:
    """Migrate the empty database at ``url``, then load and flush each history size in turn."""
    figures = Figures(backend)
    upgrade(url)
    store = SqlStore.from_url(url)
    client = connect(redis_url)
    client.flushdb()
    counter = StatementCounter(store.engine)
    try:
        tenant = AccountStore(store.engine).create_tenant("bench").id
        deps = FlushDeps(store=store, redis=client, publish=_no_queue)
        for size in SIZES:
            session_id = f"h{size}"
            began = time.perf_counter()
            figures.entries[size] = _load(store, tenant, session_id, size)
            figures.build_s[size] = time.perf_counter() - began
            print(
                f"  {backend}: {figures.entries[size]:,} entries loaded in "
                f"{figures.build_s[size]:.1f} s",
                flush=True,
            )
            runs: list[tuple[float, int, int]] = []
            for rep in range(REPEAT):
                runs.append(
                    _flush_once(store, client, deps, counter, tenant, session_id, f"r{rep}")
                )
                print(
                    f"    flush {rep + 1}: {runs[-1][0] * 1000:,.1f} ms, "
                    f"{runs[-1][1]} statements, {runs[-1][2]} observations",
                    flush=True,
                )
                if runs[-1][0] > SLOW_FLUSH_S:
                    break
            best = min(runs)
            figures.seconds[size] = best[0]
            figures.statements[size] = best[1]
            figures.observations[size] = best[2]
            figures.repeats[size] = len(runs)
    finally:
        counter.close()
        client.close()
        store.close()
    return figures


@contextmanager
def postgres_url() -> Iterator[str | None]:
    """A fresh, empty PostgreSQL database URL (dropped afterwards), or ``None``."""
    base = os.environ.get("OM_TEST_DATABASE_URL")
    if base:
        schema = f"om_bench_{secrets.token_hex(6)}"
        admin = create_engine(normalize_database_url(base))
        try:
            with admin.begin() as connection:
                connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
            url = make_url(normalize_database_url(base)).update_query_dict(
                {"options": f"-csearch_path={schema}"}
            )
            try:
                yield url.render_as_string(hide_password=False)
            finally:
                with admin.begin() as connection:
                    connection.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        finally:
            admin.dispose()
        return
    try:
        ready = subprocess.run(["pg_isready", *PG_HOST], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        ready = None
    if ready is None or ready.returncode != 0:
        yield None
        return
    database = f"om_bench_{secrets.token_hex(6)}"
    made = subprocess.run(["createdb", *PG_HOST, database], capture_output=True, text=True)
    if made.returncode != 0:
        print(f"  postgresql skipped: createdb failed: {made.stderr.strip()}", flush=True)
        yield None
        return
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    finally:
        subprocess.run(
            ["dropdb", *PG_HOST, "--if-exists", "--force", database],
            capture_output=True,
            check=False,
        )


def run() -> Section:
    load_before = os.getloadavg()[0]
    section = Section("9. Flush cost against history (one worker flush of 40 new messages)")
    results: list[Figures] = []
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        results.append(
            measure("SQLite", f"sqlite:///{Path(folder) / 'bench.db'}", redis_server.url)
        )
        with postgres_url() as pg:
            if pg is None:
                print("  postgresql: not reachable, skipped", flush=True)
                section.notes.append(
                    "PostgreSQL skipped: no `OM_TEST_DATABASE_URL` and nothing answered on "
                    "127.0.0.1:5432."
                )
            else:
                results.append(measure("PostgreSQL", pg, redis_server.url))
    for figures in results:
        _report(section, figures)
    section.notes.append(
        "Each row: one `om_workers.jobs.flush.run_flush_job` (forced job row from "
        "`request_flush`, private Redis, extractive provider, default settings) observing "
        f"the same {NEW_MESSAGES} new chat messages, on a session whose history already holds "
        "about that many consolidated entries; best of 3 (see below), each after appending "
        "fresh copies of the 40 messages. Baseline: the same flush on an empty session in the "
        "same run. "
        "Statements: SQL statements the store's engine sent during that flush "
        "(`before_cursor_execute`; an executemany or a multi-row INSERT counts once; SQLite's "
        "`BEGIN`, sent by the dialect's hook, is not counted)."
    )
    section.notes.append(
        "History: chat messages (user, tool call, tool result, answer; ~500 bytes an entry), an "
        "`om.observations.recorded` record every 40 messages (5 observations citing them, "
        "`coversUpToId` the last), an `om.reflections.recorded` record every 10 of those, and "
        "`om.observations.dropped` records keeping the active pool under "
        f"{DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS:,} tokens (lowest relevance first, down to "
        f"{DEFAULT_DROPPER_TARGET_TOKENS:,}); all of it observed. Every measured flush only "
        "observes: it neither reflects nor drops (checked). "
        "PostgreSQL tables are `ANALYZE`d after each load, as autovacuum would."
    )
    for figures in results:
        loads = ", ".join(
            f"{figures.entries[s]:,} in {figures.build_s[s]:.1f} s" for s in SIZES if s
        )
        slow = [s for s in SIZES if figures.repeats[s] < REPEAT]
        note = (
            f"{figures.backend}: {figures.observations[0]} observations a flush; "
            f"history loaded (entries in time) {loads}."
        )
        if slow:
            note += (
                f" Over {SLOW_FLUSH_S:.0f} s a flush, so measured once: "
                + ", ".join(f"{s:,} entries ({figures.seconds[s]:.0f} s)" for s in slow)
                + "."
            )
        section.notes.append(note)
    section.notes.append(
        f"Load average (1 min) {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the "
        "end (2 cores, shared with other work)."
    )
    return section


def _report(section: Section, figures: Figures) -> None:
    name = figures.backend
    base_s = figures.seconds[0] * 1000
    base_n = figures.statements[0]
    for size in SIZES[1:]:
        section.add(
            f"{name}: flush, {size:,}-entry history",
            figures.seconds[size] * 1000,
            "ms",
            "same flush, empty history",
            base_s,
        )
        section.add(
            f"{name}: SQL statements, {size:,}-entry history",
            figures.statements[size],
            "statements",
            "statements, empty history",
            base_n,
        )
