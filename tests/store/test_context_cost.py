"""A context read costs the tail, not the history: the same statements for a 2,000-message
session as for a 40-message one, and no statement parses the branch from its root (a session
with no memory yet has no snapshot, so only memory entries are read past it). Counted with
SQLAlchemy's ``before_cursor_execute``; counts, never timings. On both stores."""

from __future__ import annotations

from store_factories import message, observations

from om_core import resolve_settings
from om_core.read.context import build_context
from om_workers.reads import session_context
from om_workers.store import SqlStore
from tests.store.test_flush_cost import Statement, recorded

SMALL, LARGE = 40, 2_000
SETTINGS = resolve_settings({})


def _messages(store: SqlStore, tenant: str, session_id: str, count: int) -> None:
    store.create_session(tenant, session_id)
    for start in range(0, count, 500):
        ids = range(start, min(start + 500, count))
        store.append_entries(
            tenant,
            session_id,
            [message(f"{session_id}-{i}", text=f"turn {i}", session_id=session_id) for i in ids],
        )


def _read(store: SqlStore, tenant: str, session_id: str) -> list[Statement]:
    # The first read fills the process's caches; the second is what every later read costs.
    session_context(store, tenant, session_id, settings=SETTINGS)
    store.append_entries(
        tenant, session_id, [message(f"{session_id}-late", text="one more", session_id=session_id)]
    )
    with recorded(store) as seen:
        got = session_context(store, tenant, session_id, settings=SETTINGS)
    assert got == build_context(store.read_branch(tenant, session_id), SETTINGS)
    return seen


def _whole_payload_reads(statements: list[Statement]) -> list[Statement]:
    """Reads of entries' payloads from the branch's root, of every kind, unbounded."""
    return [
        s
        for s in statements
        if "payload" in s.sql
        and any(lo <= 1 for lo, _ in s.ranges())
        and not any(k.startswith("kinds") or k == "limit" for p in s.params for k in p)
    ]


def test_a_context_read_sends_as_many_statements_after_2000_messages_as_after_40(
    store: SqlStore, tenant: str
) -> None:
    _messages(store, tenant, "small", SMALL)
    _messages(store, tenant, "large", LARGE)
    small, large = _read(store, tenant, "small"), _read(store, tenant, "large")
    assert len(large) == len(small), "\n".join(s.sql[:160] for s in large)
    assert _whole_payload_reads(large) == []


def test_a_context_read_after_memory_parses_no_message_before_the_tail(
    store: SqlStore, tenant: str
) -> None:
    _messages(store, tenant, "s", LARGE)
    record, _ = observations("o1", ["s-0"], f"s-{LARGE - 1}", session_id="s")
    store.append_entries(tenant, "s", [record])
    after = [message(f"s-after-{i}", text="x " * 30, session_id="s") for i in range(300)]
    store.append_entries(tenant, "s", after)
    statements = _read(store, tenant, "s")
    assert _whole_payload_reads(statements) == []
    # The check catches a read of the whole branch, as the store's full read is.
    with recorded(store) as whole:
        store.read_branch(tenant, "s")
    assert _whole_payload_reads(whole)


def test_a_context_read_is_one_transaction_and_a_kept_one_sends_only_the_head(
    store: SqlStore, tenant: str
) -> None:
    _messages(store, tenant, "s", SMALL)
    built = _read(store, tenant, "s")  # after an append: built in one read transaction
    assert sum(s.sql.startswith("BEGIN") for s in built) <= 1  # SQLite's; psycopg's is implicit
    with recorded(store) as kept:
        session_context(store, tenant, "s", settings=SETTINGS)
    # One statement: the session row with its snapshot, its tombstones and its branch's
    # segments (the segment walk reads entries' keys, never their payloads).
    sent = [s.sql for s in kept if " FROM " in s.sql]
    assert len(sent) == 1 and "session_head" in sent[0], [sql[:120] for sql in sent]
    assert "payload" not in sent[0]
    assert sum(s.sql.startswith("BEGIN") for s in kept) <= 1
