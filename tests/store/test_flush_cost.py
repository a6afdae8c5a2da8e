"""A flush costs what is new, not what came before: the guard ``make test`` keeps (the timings
are ``make bench``'s section 9, "flush cost against history").

One worker flush (``om_workers.jobs.flush.run_flush_job`` on the private Redis, the extractive
provider, default settings) of the same 40 new messages, on sessions whose observed history
holds 41 and 2,013 entries. Counted with SQLAlchemy's ``before_cursor_execute`` while the job
runs: how many statements the engine sends, and what each one's bound parameters select.
SQLite always, PostgreSQL too when ``OM_TEST_DATABASE_URL`` is set. Counts, never timings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy import event, select

from om_core.settings import DEFAULT_DROPPER_TARGET_TOKENS, DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.store import SqlStore
from om_workers.store.schema import entries
from tests.bench.synthetic import consolidated_history, new_messages

NEW_MESSAGES = 40
SMALL, LARGE = 40, 2_000
"""Observed history before the new messages, in entries (whole batches: 41 and 2,013)."""
RANGE_LO = re.compile(r"lo\d+")
WHOLE_SESSION_TABLES = ("entries", "memory_items")
"""Tables that grow with the history: a read of them bounded by the session alone is a read
of everything the session ever held."""


@dataclass(frozen=True)
class Statement:
    """One statement the engine sent: its SQL (whitespace collapsed) and its bound parameters
    by name (one mapping per row of an executemany; none for driver-level SQL such as BEGIN)."""

    sql: str
    params: tuple[dict[str, Any], ...]

    def ranges(self) -> list[tuple[int, int]]:
        """The ``(lo, hi)`` seq ranges of a branch range read (``om_workers.store.branch``
        binds them as ``lo0``/``hi0``, ``lo1``/``hi1`` ...); empty for any other statement."""
        found = []
        for params in self.params:
            found += [(params[k], params[f"hi{k[2:]}"]) for k in params if RANGE_LO.fullmatch(k)]
        return found

    def bounded_by_session_alone(self) -> bool:
        """True for a SELECT from a table that grows with the history whose only bound
        parameter is the session's key: it reads every row the session has there."""
        if not self.sql.startswith(("SELECT", "WITH")):
            return False
        tables = [t for t in WHOLE_SESSION_TABLES if f"FROM {t}" in self.sql]
        names = {name for params in self.params for name in params}
        return bool(tables) and names <= {"session_pk", "session"}


@contextmanager
def recorded(store: SqlStore) -> Iterator[list[Statement]]:
    """Every statement the store's engine sends inside the block, in order."""
    seen: list[Statement] = []

    def record(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        compiled = getattr(context, "compiled_parameters", None) or ()
        seen.append(Statement(" ".join(statement.split()), tuple(dict(p) for p in compiled)))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", record)


def _no_queue(tenant_id: str, session_id: str, job_id: str) -> None:
    """``publish``: no Celery here, the test runs the job itself."""


def observed_history(store: SqlStore, tenant: str, session_id: str, size: int) -> int:
    """Create the session with about ``size`` entries the service has kept up with (every
    message observed, reflections and drops as the dropper keeps the pool); returns the seq of
    its last observed message, where the observer's cursor stands."""
    store.create_session(tenant, session_id)
    rows = consolidated_history(
        size,
        session_id,
        pool_max_tokens=DEFAULT_OBSERVATIONS_POOL_MAX_TOKENS,
        pool_target_tokens=DEFAULT_DROPPER_TARGET_TOKENS,
    )
    store.append_entries(tenant, session_id, rows)
    assert store.get_session(tenant, session_id).unobserved_tokens == 0
    last = next(e.id for e in reversed(rows) if e.kind == "message")
    query = select(entries.c.seq).where(entries.c.tenant_id == tenant, entries.c.id == last)
    with store.engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def flush(
    store: SqlStore, client: redis.Redis, tenant: str, session_id: str
) -> tuple[list[Statement], dict[str, int]]:
    """Append the 40 new messages, request a forced flush and run its job; returns the
    statements the job sent and its counts."""
    store.append_entries(tenant, session_id, new_messages(session_id, "new", NEW_MESSAGES))
    ticket = request_flush(store, client, tenant, session_id, publish=_no_queue, force=True)
    deps = FlushDeps(store=store, redis=client, publish=_no_queue)
    with recorded(store) as seen:
        outcome = run_flush_job(deps, tenant, session_id, ticket.job_id)
    assert outcome.outcome == "succeeded", outcome
    return seen, dict(outcome.counts)


def root_reads(statements: list[Statement], cursor_seq: int) -> list[Statement]:
    """The statements that read the branch further back than the observer's cursor, or every
    entry or memory item of the session."""
    return [
        s
        for s in statements
        if s.bounded_by_session_alone() or any(lo <= cursor_seq for lo, _ in s.ranges())
    ]


def test_a_flush_sends_as_many_statements_after_2000_observed_entries_as_after_40(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    observed_history(store, tenant, "small", SMALL)
    observed_history(store, tenant, "large", LARGE)
    small, small_counts = flush(store, client, tenant, "small")
    large, large_counts = flush(store, client, tenant, "large")
    # The same work at both sizes: the 40 messages observed, nothing reflected or dropped.
    assert small_counts == large_counts
    assert small_counts["observations"] > 0 and small_counts["appended"] == 1
    assert len(large) == len(small), "\n".join(s.sql[:160] for s in large)

    # A session never observed has no snapshot, so no active pool to read: never more.
    store.create_session(tenant, "fresh")
    fresh, fresh_counts = flush(store, client, tenant, "fresh")
    assert fresh_counts == small_counts
    assert len(fresh) <= len(small)


def test_no_statement_of_a_flush_reads_the_branch_from_its_root(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    cursor = observed_history(store, tenant, "large", LARGE)
    statements, _ = flush(store, client, tenant, "large")
    # The flush did read entries by range (so the check below has something to look at) ...
    reads = [s for s in statements if s.ranges()]
    assert reads, "\n".join(s.sql[:160] for s in statements)
    # ... and only what follows the cursor: the new messages and the records after them.
    assert root_reads(statements, cursor) == []
    assert sum(hi - lo + 1 for s in reads for lo, hi in s.ranges()) < 2 * NEW_MESSAGES

    # The check catches a read of the whole branch, as the store's full read is.
    with recorded(store) as whole:
        store.read_branch(tenant, "large")
    assert root_reads(whole, cursor)
