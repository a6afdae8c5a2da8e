"""Listing a tenant's sessions: newest first, keyset pages that stay put while sessions are
created and appended to, an ``updated_since`` filter, and one index range per page, on every
backend."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text
from store_factories import message

from om_core.errors import InvalidEntryError
from om_workers.errors import InvalidCursorError
from om_workers.store import AccountStore, SqlStore
from om_workers.store.engine import create_store_engine
from om_workers.store.listing import decode_cursor, encode_cursor, listing_query

START = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


class Clock:
    """A store clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed_store(migrated_url: str, clock: Clock) -> Iterator[SqlStore]:
    store = SqlStore(create_store_engine(migrated_url), clock=clock)
    accounts = AccountStore(store.engine)
    accounts.create_tenant("acme")
    accounts.create_tenant("other")
    yield store
    store.close()


def _all_ids(store: SqlStore, tenant: str, limit: int, **filters: datetime) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list_sessions(tenant, limit=limit, cursor=cursor, **filters)
        ids += [s.id for s in page.sessions]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def test_pages_are_newest_first_and_cover_every_session_once(
    timed_store: SqlStore, clock: Clock
) -> None:
    for i in range(7):
        timed_store.create_session("acme", f"s{i}")
        clock.tick()
    timed_store.create_session("other", "theirs")
    first = timed_store.list_sessions("acme", limit=3)
    assert [s.id for s in first.sessions] == ["s6", "s5", "s4"]
    assert first.next_cursor is not None
    assert _all_ids(timed_store, "acme", 3) == [f"s{i}" for i in reversed(range(7))]
    # Exactly a page left: the last page says so, with no empty page after it.
    assert timed_store.list_sessions("acme", limit=7).next_cursor is None
    assert timed_store.list_sessions("nobody").sessions == ()


def test_sessions_created_or_updated_while_paging_shift_nothing(
    timed_store: SqlStore, clock: Clock
) -> None:
    for i in range(6):
        timed_store.create_session("acme", f"s{i}")
        clock.tick()
    first = timed_store.list_sessions("acme", limit=2)
    # Meanwhile: new sessions, and an append to one not listed yet (moves its updated_at).
    for i in range(6, 9):
        clock.tick()
        timed_store.create_session("acme", f"s{i}")
    timed_store.append_entries("acme", "s1", message("m1", "s1"))
    rest = _all_ids_from(timed_store, first.next_cursor)
    assert [s.id for s in first.sessions] + rest == ["s5", "s4", "s3", "s2", "s1", "s0"]


def _all_ids_from(store: SqlStore, cursor: str | None) -> list[str]:
    ids: list[str] = []
    while cursor is not None:
        page = store.list_sessions("acme", limit=2, cursor=cursor)
        ids += [s.id for s in page.sessions]
        cursor = page.next_cursor
    return ids


def test_sessions_created_at_the_same_instant_are_ordered_by_id(
    timed_store: SqlStore,
) -> None:
    # Same clock value for all: the id breaks the tie, and a cursor between them holds.
    for name in ("b", "d", "a", "c", "e"):
        timed_store.create_session("acme", name)
    assert _all_ids(timed_store, "acme", 2) == ["e", "d", "c", "b", "a"]


def test_updated_since_keeps_sessions_updated_at_or_after_it(
    timed_store: SqlStore, clock: Clock
) -> None:
    for i in range(4):
        timed_store.create_session("acme", f"s{i}")
        clock.tick(60)
    cutoff = clock.now
    clock.tick(60)
    timed_store.append_entries("acme", "s0", message("m1", "s0"))
    timed_store.create_session("acme", "late")
    assert _all_ids(timed_store, "acme", 1, updated_since=cutoff) == ["late", "s0"]
    # A naive time is UTC; another offset names the same instant.
    naive = cutoff.replace(tzinfo=None)
    assert _all_ids(timed_store, "acme", 5, updated_since=naive) == ["late", "s0"]
    shifted = cutoff.astimezone(timezone(timedelta(hours=2)))
    assert _all_ids(timed_store, "acme", 5, updated_since=shifted) == ["late", "s0"]
    exact = timed_store.get_session("acme", "late").updated_at
    assert "late" in _all_ids(timed_store, "acme", 5, updated_since=exact)


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_bad_cursors_and_limits_are_refused(timed_store: SqlStore) -> None:
    timed_store.create_session("acme", "s")
    malformed = ["", "nope", "!!!", encode_cursor(START, "s")[:-3]]
    wrong_shape = [_b64(v) for v in ([], ["x", 1], ["not a time", "s"], {"a": 1}, "s")]
    for bad in malformed + wrong_shape:
        with pytest.raises(InvalidCursorError):
            timed_store.list_sessions("acme", cursor=bad)
    for limit in (0, 1001):
        with pytest.raises(InvalidEntryError):
            timed_store.list_sessions("acme", limit=limit)
    assert decode_cursor(encode_cursor(START, "a:b")) == (START, "a:b")


def test_a_page_is_one_index_range_inside_the_tenant(timed_store: SqlStore) -> None:
    after = (START, "s")
    statement = listing_query("acme", 51, after, START)
    with timed_store.engine.connect() as connection:
        compiled = str(statement.compile(connection, compile_kwargs={"literal_binds": True}))
        if connection.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")
            plan = " ".join(str(row[-1]) for row in rows)
            assert "USING INDEX ix_sessions_tenant_id_created_at_id (tenant_id=? AND" in plan, plan
        else:
            # With sequential scans priced out the planner shows whether the index can serve
            # the range by itself: its condition must hold the tenant and the cursor.
            connection.execute(text("SET enable_seqscan = off"))
            plan = " ".join(r[0] for r in connection.exec_driver_sql(f"EXPLAIN {compiled}"))
            assert "Index Scan Backward using ix_sessions_tenant_id_created_at_id" in plan, plan
            assert "Index Cond: (((tenant_id)::text = 'acme'::text) AND (ROW(" in plan, plan
    assert "ORDER BY" in compiled and "LIMIT" in compiled
