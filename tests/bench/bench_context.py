"""4. Context read: the context endpoint over HTTP and the snapshot path in process, for 1k,
10k and 100k-entry sessions, against a full re-fold of the same session and against reading
its rows alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
from sqlalchemy import select, text

from om_core import ObservationalMemorySettings, resolve_settings
from om_core.read.context import build_context
from om_workers.config import DEFAULT_CONTEXT_MAX_TOKENS, Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.reads import session_context
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store.schema import entries as entries_table
from tests.api.server import Published, serve

from .common import Section, median_of
from .synthetic import branch

SIZES = (1_000, 10_000, 100_000)
BATCH = 1_000


def _fill(store: SqlStore, tenant: str, session_id: str, size: int) -> None:
    store.create_session(tenant, session_id)
    rows = branch(size, session_id)
    for start in range(0, size, BATCH):
        store.append_entries(tenant, session_id, rows[start : start + BATCH])


def run() -> Section:
    section = Section("4. Context read (SQLite store)")
    settings = resolve_settings()
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        accounts = AccountStore(store.engine)
        tenant = accounts.create_tenant("bench").id
        key = accounts.create_api_key(tenant).plaintext
        client = connect(redis_server.url)
        api_settings = Settings(database_url=url, redis_url=redis_server.url, log_level="WARNING")
        with (
            serve(api_settings, store, client, Published()) as api,
            httpx.Client(
                base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=120
            ) as http,
        ):
            for size in SIZES:
                _measure(section, store, http, tenant, size, settings)
        client.close()
        store.close()
    section.notes.append(
        "endpoint = `GET /v1/sessions/{id}/context` over HTTP (uvicorn in this process); "
        "in process = `om_workers.reads.session_context` (stored ledger + branch tail back to "
        "the observation cursor, default 32,000-token budget); full re-fold = read and parse "
        "the branch, then `om_core.read.context.build_context` with the same budget; rows alone = "
        "`SELECT payload` of every entry of the session, unparsed. Median of 9 (3 at 100k). "
        "At 100k entries the rest is rendering a 10,000-observation pool down to 256 KiB."
    )
    return section


def _measure(
    section: Section,
    store: SqlStore,
    http: httpx.Client,
    tenant: str,
    size: int,
    settings: ObservationalMemorySettings,
) -> None:
    session_id = f"s{size}"
    _fill(store, tenant, session_id, size)
    endpoint_s = median_of(
        lambda: http.get(f"/v1/sessions/{session_id}/context").raise_for_status()
    )
    snapshot_s = median_of(
        lambda: session_context(
            store, tenant, session_id, settings=settings, max_tokens=DEFAULT_CONTEXT_MAX_TOKENS
        )
    )
    repeat = 3 if size >= 100_000 else 9
    refold_s = median_of(
        lambda: build_context(
            store.read_branch(tenant, session_id), settings, max_tokens=DEFAULT_CONTEXT_MAX_TOKENS
        ),
        repeat,
    )
    rows_s = median_of(lambda: _rows_alone(store, session_id), repeat)
    label = f"{size:,} entries"
    section.add(f"endpoint, {label}", endpoint_s * 1000, "ms", "full re-fold", refold_s * 1000)
    section.add(f"in process, {label}", snapshot_s * 1000, "ms", "full re-fold", refold_s * 1000)
    section.add(f"in process, {label}", snapshot_s * 1000, "ms", "rows alone", rows_s * 1000)


def _rows_alone(store: SqlStore, session_id: str) -> int:
    with store.engine.connect() as connection:
        pk = connection.execute(
            text("SELECT pk FROM sessions WHERE id = :id"), {"id": session_id}
        ).scalar_one()
        return len(
            connection.execute(
                select(entries_table.c.payload).where(entries_table.c.session_pk == pk)
            ).all()
        )
