"""4. Context read: the snapshot path for 1k, 10k and 100k-entry sessions, against a full
re-fold of the same session and against reading its rows alone."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy import select, text

from om_core import build_context_blocks, resolve_settings
from om_workers.reads import session_context_blocks
from om_workers.store import SqlStore, upgrade
from om_workers.store.schema import entries as entries_table

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
    section = Section("4. Context read (SQLite store, in process)")
    settings = resolve_settings()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        tenant = store.create_tenant("bench").id
        for size in SIZES:
            session_id = f"s{size}"
            _fill(store, tenant, session_id, size)
            snapshot_s = median_of(
                lambda sid=session_id: session_context_blocks(store, tenant, sid, settings=settings)
            )
            repeat = 3 if size >= 100_000 else 9
            refold_s = median_of(
                lambda sid=session_id: build_context_blocks(
                    store.read_branch(tenant, sid), settings
                ),
                repeat,
            )
            rows_s = median_of(lambda sid=session_id: _rows_alone(store, sid), repeat)
            label = f"{size:,} entries"
            section.add(
                f"context, {label}", snapshot_s * 1000, "ms", "full re-fold", refold_s * 1000
            )
            section.add(f"context, {label}", snapshot_s * 1000, "ms", "rows alone", rows_s * 1000)
        store.close()
    section.notes.append(
        "context = `om_workers.reads.session_context_blocks` (stored ledger + branch tail); "
        "full re-fold = read and parse the branch, then `build_context_blocks`; rows alone = "
        "`SELECT payload` of every entry of the session, unparsed. Median of 9 (3 at 100k)."
    )
    return section


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
