"""Migrations from an empty database create the schema the store's tables describe."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select
from store_factories import message

from om_core.read.search_narrowing import narrowable_pairs
from om_workers.store import AccountStore, SqlStore, current_revision, head_revision, upgrade
from om_workers.store.engine import create_store_engine
from om_workers.store.migrate import VERSION_TABLE, alembic_config
from om_workers.store.schema import metadata, session_metadata_pairs, sessions
from om_workers.store.search_index import is_search_index_object

TABLES = {"tenants", "api_keys", "sessions", "entries", "snapshots", "flush_jobs", "tombstones"}


def test_upgrade_from_empty_database_creates_every_table(database_url: str) -> None:
    assert current_revision(database_url) is None
    upgrade(database_url)
    engine = create_store_engine(database_url)
    try:
        assert set(inspect(engine).get_table_names()) >= TABLES
        with engine.connect() as connection:
            # No difference between what the migrations built and what the code expects.
            diff = compare_metadata(
                MigrationContext.configure(
                    connection,
                    opts={
                        "version_table": VERSION_TABLE,
                        # The full-text index is the database's own (FTS5 tables, GIN indexes).
                        "include_name": lambda name, *_: not is_search_index_object(name),
                    },
                ),
                metadata,
            )
        assert diff == []
    finally:
        engine.dispose()
    assert current_revision(database_url) == head_revision()


def test_upgrade_is_idempotent_and_store_works_after(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    try:
        AccountStore(store.engine).create_tenant("t")
        assert store.create_session("t", "s").entry_count == 0
    finally:
        store.close()


def test_upgrade_keeps_entries_written_under_global_ids(database_url: str) -> None:
    from sqlalchemy import text

    upgrade(database_url, revision="0002")
    engine = create_store_engine(database_url)
    now = "2026-01-01 00:00:00+00:00"
    try:
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"),
                {"now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO sessions (tenant_id, id, leaf_id, epoch, entry_count, "
                    "unobserved_tokens, meta, created_at, updated_at) VALUES "
                    "('t', 's', 'a', 0, 1, 0, '{}', :now, :now)"
                ),
                {"now": now},
            )
            pk = connection.execute(text("SELECT pk FROM sessions")).scalar_one()
            payload = '{"id": "a", "sessionId": "s", "kind": "message", "message": {"role": "user", "content": "hi"}}'  # noqa: E501
            connection.execute(
                text(
                    "INSERT INTO entries (id, session_pk, parent_id, seq, run_start, kind, "
                    "eligible_tokens, payload, created_at) VALUES "
                    "('a', :pk, NULL, 1, 1, 'message', 1, :payload, :now)"
                ),
                {"pk": pk, "payload": payload, "now": now},
            )
    finally:
        engine.dispose()
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    try:
        assert [e.id for e in store.read_branch("t", "s")] == ["a"]
        AccountStore(store.engine).create_tenant("u")
        store.create_session("u", "s")
        assert store.append_entries(
            "u", "s", store.read_branch("t", "s")[0].model_copy(update={"session_id": "s"})
        ).appended_ids == ("a",)
    finally:
        store.close()


def test_upgrade_renames_flush_runs_to_jobs_and_keeps_their_rows(database_url: str) -> None:
    from sqlalchemy import text

    upgrade(database_url, revision="0004")
    store = SqlStore.from_url(database_url)
    try:
        AccountStore(store.engine).create_tenant("t")
        with store.engine.begin() as connection:
            # Raw SQL: today's store writes columns a 0004 schema does not have yet.
            connection.execute(
                text(
                    "INSERT INTO sessions (tenant_id, id, leaf_id, epoch, entry_count, "
                    "unobserved_tokens, meta, created_at, updated_at) VALUES "
                    "('t', 's', NULL, 0, 0, 0, '{}', :now, :now)"
                ),
                {"now": "2026-01-01 00:00:00+00:00"},
            )
            pk = connection.execute(text("SELECT pk FROM sessions")).scalar_one()
            connection.execute(
                text(
                    "INSERT INTO flush_runs (id, tenant_id, session_pk, state, force, "
                    "full_reflection_rebuild, attempts, queued_at, counts) VALUES "
                    "('j1', 't', :pk, 'queued', false, false, 0, :now, '{}')"
                ),
                {"pk": pk, "now": "2026-01-01 00:00:00+00:00"},
            )
            payload = '{"id": "a", "sessionId": "s", "kind": "message", "message": {"role": "user", "content": "hi"}}'  # noqa: E501
            connection.execute(
                text(
                    "INSERT INTO entries (tenant_id, id, session_pk, parent_id, seq, run_start, "
                    "kind, eligible_tokens, payload, created_at) VALUES "
                    "('t', 'a', :pk, NULL, 1, 1, 'message', 1, :payload, :now)"
                ),
                {"pk": pk, "payload": payload, "now": "2026-01-01 00:00:00+00:00"},
            )
            connection.execute(text("UPDATE sessions SET leaf_id = 'a', entry_count = 1"))
    finally:
        store.close()
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    try:
        assert store.get_job("t", "j1").state == "queued"
        assert [e.id for e in store.read_branch("t", "s")] == ["a"]
        indexes = {ix["name"] for ix in inspect(store.engine).get_indexes("flush_jobs")}
        assert indexes == {
            "ix_flush_jobs_session_pk_queued_at",
            "ix_flush_jobs_state_started_at",
        }
    finally:
        store.close()


def test_upgrade_to_0008_leaves_existing_sessions_unlinked(database_url: str) -> None:
    from sqlalchemy import text

    upgrade(database_url, revision="0007")
    engine = create_store_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES ('t', 't', :now)"),
                {"now": "2026-01-01 00:00:00+00:00"},
            )
            connection.execute(
                text(
                    "INSERT INTO sessions (tenant_id, id, leaf_id, epoch, entry_count, "
                    "unobserved_tokens, meta, created_at, updated_at) VALUES "
                    "('t', 's', NULL, 0, 0, 0, '{}', :now, :now)"
                ),
                {"now": "2026-01-01 00:00:00+00:00"},
            )
    finally:
        engine.dispose()
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    try:
        assert store.get_session("t", "s").workspace_id is None
        store.create_session("t", "w")
        assert store.link_session("t", "s", "w").workspace_id == "w"
    finally:
        store.close()


def test_search_terms_cover_what_was_stored_before_their_revision(database_url: str) -> None:
    upgrade(database_url)
    with _opened(database_url) as store:
        tenant = AccountStore(store.engine).create_tenant("t").id
        store.create_session(tenant, "s")
        store.append_entries(tenant, "s", [message("m1", "s", "the heron waits by the lease")])
    # Back to the expression indexes, then up again: PostgreSQL computes the stored lexemes
    # of the rows already there (SQLite's FTS5 tables are untouched by the revision).
    _down_and_up(database_url, "0015")
    with _opened(database_url) as store:
        assert [hit.id for hit in store.search(tenant, "lease", session_id="s").hits] == ["m1"]
        assert [hit.id for hit in store.search(tenant, "herons").hits] == ["m1"]


def test_sqlite_index_drops_its_column_sizes_and_keeps_what_was_stored(database_url: str) -> None:
    """Revision 0020 recreates SQLite's FTS5 tables without their column sizes and indexes the
    stored rows again: what was found before it is found after, down and up."""
    upgrade(database_url)
    with _opened(database_url) as store:
        tenant = AccountStore(store.engine).create_tenant("t").id
        store.create_session(tenant, "s")
        store.append_entries(tenant, "s", [message("m1", "s", "the heron waits by the lease")])
    both = {"entries_fts_docsize", "memory_fts_docsize"}
    for revision, sizes in (("0019", both), (None, set())):
        if revision is None:
            upgrade(database_url)
        else:
            command.downgrade(alembic_config(database_url), revision)
        with _opened(database_url) as store:
            assert [hit.id for hit in store.search(tenant, "herons", session_id="s").hits] == ["m1"]
            assert [hit.id for hit in store.search(tenant, "lease").hits] == ["m1"]
            if store.engine.dialect.name == "sqlite":
                assert both & set(inspect(store.engine).get_table_names()) == sizes


def test_metadata_pairs_of_stored_sessions_are_those_a_new_session_gets(
    database_url: str,
) -> None:
    """The revision's SQL chooses the pairs as the store does when it creates a session."""
    upgrade(database_url)
    shapes: list[dict[str, object]] = [
        {},
        {"customer": "acme", "tier": 3, "tags": ["a"], "nested": {"k": "v"}, "on": True},
        {"a.b_c-D9": "", "emoji": "café ☕", "quote": 'say "hi"\\ \n\t', "none": None},
        {"k" * 128: "x", "k" * 129: "x", "a key": "x", "ключ": "x", "k:v": "x", "": "x"},
        {"v": "é" * 256, "w": "é" * 257, "subject": "alice"},
    ]
    with _opened(database_url) as store:
        tenant = AccountStore(store.engine).create_tenant("t").id
        for n, metadata in enumerate(shapes):
            store.create_session(tenant, f"s{n}", metadata=metadata)
        store.create_session(tenant, "gone", metadata={"customer": "acme"})
        store.erasure.erase_session(tenant, "gone", None)
        written = _metadata_pairs(store)
    _down_and_up(database_url, "0018")
    with _opened(database_url) as store:
        assert _metadata_pairs(store) == written
    expected = [
        (f"s{n}", *pair) for n, metadata in enumerate(shapes) for pair in narrowable_pairs(metadata)
    ]
    assert written == sorted(expected)


def _metadata_pairs(store: SqlStore) -> list[tuple[str, str, str]]:
    """Every row of the metadata pairs' index: the session's id, the key and the value."""
    pairs = session_metadata_pairs
    statement = select(sessions.c.id, pairs.c.key, pairs.c.value).join(
        sessions, sessions.c.pk == pairs.c.session_pk
    )
    with store.engine.connect() as connection:
        return sorted((row.id, row.key, row.value) for row in connection.execute(statement))


@contextmanager
def _opened(database_url: str) -> Iterator[SqlStore]:
    store = SqlStore.from_url(database_url)
    try:
        yield store
    finally:
        store.close()


def _down_and_up(database_url: str, revision: str) -> None:
    """Down to ``revision``, then up to the latest again."""
    command.downgrade(alembic_config(database_url), revision)
    upgrade(database_url)
