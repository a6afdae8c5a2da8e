"""What SQLite's full-text index knows of a query's stems: how many rows hold each at each
level (``*_vocab``, FTS5's own counts), and how many rows the index holds.

Counting a stem's rows is a pass over them (26 ns a row here: 23 ms for a stem in 870,000 of
a million messages), so a stem in :data:`KEPT_ROWS` rows or more keeps its counts for
:data:`STATS_TTL_S` in this process. Its IDF moves slowly; a level it reached meanwhile is
not missed, because a kept stem is searched at every level. A tenant of that many rows keeps
its row estimate the same while (one index probe per session, 3 ms for a thousand).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, text

from om_core.read.search_terms import term_range
from om_workers.store.repositories.search_levelled import Counted

KEPT_ROWS = 5_000
"""A stem (or a tenant) in at least this many rows keeps its counts for :data:`STATS_TTL_S`."""
STATS_TTL_S = 60.0
"""How long a common stem's counts are kept, in seconds."""
SESSION_ROWS = "SELECT entry_count FROM sessions WHERE pk = :session_pk"
"""About the rows a session's search may name (its entries), for the choice of a plan only."""
_TENANT_ROWS = text(
    "SELECT coalesce(sum(entry_count), 0) FROM sessions "
    "WHERE tenant_id = :tenant_id AND erased_at IS NULL"
)


class KeptCounts:
    """Common stems' counts and large tenants' row estimates per store engine, each kept
    :data:`STATS_TTL_S` (they only weigh and plan a search: a stale one changes no hit)."""

    MAX_KEPT = 4_096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_engine: weakref.WeakKeyDictionary[Engine, dict[tuple[str, ...], Any]] = (
            weakref.WeakKeyDictionary()
        )

    def _get(self, engine: Engine, key: tuple[str, ...]) -> Any:
        with self._lock:
            found = self._by_engine.get(engine, {}).get(key)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def _put(self, engine: Engine, key: tuple[str, ...], value: Any) -> None:
        # At most MAX_KEPT per engine: all go when full.
        with self._lock:
            kept = self._by_engine.setdefault(engine, {})
            if len(kept) >= self.MAX_KEPT:
                kept.clear()
            kept[key] = (time.monotonic() + STATS_TTL_S, value)

    def get(self, engine: Engine, table: str, stem: str) -> Counted | None:
        """The kept counts of ``stem`` in ``table``, unless none are or they expired."""
        levels = self._get(engine, ("stem", table, stem))
        return None if levels is None else Counted(levels, every_level=True)

    def put(self, engine: Engine, table: str, stem: str, levels: dict[int, int]) -> None:
        """Keep ``stem``'s counts in ``table``."""
        self._put(engine, ("stem", table, stem), dict(levels))

    def tenant_rows(self, engine: Engine, tenant_id: str) -> int | None:
        """The kept row estimate of ``tenant_id``, unless none is or it expired."""
        rows = self._get(engine, ("tenant", tenant_id))
        return None if rows is None else int(rows)

    def keep_tenant_rows(self, engine: Engine, tenant_id: str, rows: int) -> None:
        """Keep ``tenant_id``'s row estimate."""
        self._put(engine, ("tenant", tenant_id), rows)

    def statistics(self, engine: Engine, table: str) -> Any:
        """The kept statistics of ``table``'s index, unless none are or they expired."""
        return self._get(engine, ("statistics", table))

    def keep_statistics(self, engine: Engine, table: str, found: Any) -> None:
        """Keep ``table``'s index statistics (what a store reads of them)."""
        self._put(engine, ("statistics", table), found)

    def clear(self) -> None:
        """Forget everything kept (the next search counts again)."""
        with self._lock:
            self._by_engine.clear()


KEPT_COUNTS = KeptCounts()


def _varint(block: bytes) -> int:
    """SQLite's varint at the start of ``block`` (big-endian 7-bit groups; a 9th byte is whole)."""
    value = 0
    for byte in block[:8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value
    return (value << 8) | block[8]


def index_rows(connection: Connection, table: str) -> int:
    """The rows an FTS5 table indexes (the first number of its averages record)."""
    block = connection.execute(text(f"SELECT block FROM {table}_data WHERE id = 1")).scalar()
    return _varint(bytes(block)) if block else 0


def count_levels(connection: Connection, table: str, stems: Sequence[str]) -> dict[str, Counted]:
    """Each of ``stems``' rows per level in ``table`` (kept ones from memory, the rest in one
    statement)."""
    engine = connection.engine
    counted: dict[str, Counted] = {}
    for stem in stems:
        kept = KEPT_COUNTS.get(engine, table, stem)
        if kept is not None:
            counted[stem] = kept
    fresh = [stem for stem in stems if stem not in counted]
    if not fresh:
        return counted
    selects = " UNION ALL ".join(
        f"SELECT {n} AS n, term, doc FROM {table}_vocab WHERE term >= :lo{n} AND term < :hi{n}"
        for n in range(len(fresh))
    )
    params: dict[str, Any] = {}
    for n, stem in enumerate(fresh):
        params[f"lo{n}"], params[f"hi{n}"] = term_range(stem)
    levels: dict[str, dict[int, int]] = {stem: {} for stem in fresh}
    for row in connection.execute(text(selects), params):
        levels[fresh[row.n]][int(str(row.term).rpartition("_")[2])] = int(row.doc)
    for stem in fresh:
        counted[stem] = Counted(levels[stem], every_level=False)
        if counted[stem].documents >= KEPT_ROWS:
            KEPT_COUNTS.put(engine, table, stem, levels[stem])
    return counted


def tenant_rows(connection: Connection, tenant_id: str) -> int:
    """About the rows a tenant-wide search of ``tenant_id`` may name, for the choice of a plan
    only (a tenant of :data:`KEPT_ROWS` or more keeps its estimate :data:`STATS_TTL_S`)."""
    engine = connection.engine
    kept = KEPT_COUNTS.tenant_rows(engine, tenant_id)
    if kept is not None:
        return kept
    rows = int(connection.execute(_TENANT_ROWS, {"tenant_id": tenant_id}).scalar_one())
    if rows >= KEPT_ROWS:
        KEPT_COUNTS.keep_tenant_rows(engine, tenant_id, rows)
    return rows
