"""12. Export and import: a 100,000-entry session against a 1,000-entry one, on SQLite.

Each session is a consolidated history (chat messages with the observation, reflection and
drop records a service that kept up would have written). Export: the store's paged export
through the API's line writer (redaction included) into a file. Import: that file read line by
line into another tenant, with the API's entry checks, in one transaction. Time is wall clock
(best of one: these are long); peak memory is ``tracemalloc``'s, in a second run of the same
work (tracing slows it), so it counts Python allocations, not the process's resident size.
Baseline: the same work on the 1,000-entry session in the same run.
"""

from __future__ import annotations

import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from om_api.server.portability import check_entry, export_lines, numbered_lines
from om_workers.store import AccountStore, SqlStore, upgrade

from .common import Section
from .synthetic import consolidated_history

SIZES = (1_000, 100_000)
LOAD_BATCH = 5_000


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _load(store: SqlStore, tenant: str, session_id: str, size: int) -> int:
    store.create_session(tenant, session_id)
    history = consolidated_history(size, session_id)
    for start in range(0, len(history), LOAD_BATCH):
        store.append_entries(tenant, session_id, history[start : start + LOAD_BATCH])
    return len(history)


def _export(store: SqlStore, tenant: str, session_id: str, path: Path) -> None:
    with path.open("wb") as out:
        for line in export_lines(store.export_session(tenant, session_id), ()):
            out.write(line)


def _import(store: SqlStore, tenant: str, session_id: str, path: Path) -> None:
    with path.open("rb") as body:
        result = store.import_session(
            tenant, session_id, numbered_lines(body), check_entry=check_entry
        )
    assert result.created and result.imported > 0


def _measure(
    store: SqlStore, tenants: tuple[str, str, str], session_id: str, root: Path
) -> dict[str, float]:
    """Export from the first tenant (timed, then traced) and import into the other two (one
    timed, one traced)."""
    source, timed_copy, traced_copy = tenants
    path = root / f"{session_id}.jsonl"
    return {
        "export_s": _timed(lambda: _export(store, source, session_id, path)),
        "export_peak": _peak(lambda: _export(store, source, session_id, path)),
        "import_s": _timed(lambda: _import(store, timed_copy, session_id, path)),
        "import_peak": _peak(lambda: _import(store, traced_copy, session_id, path)),
        "bytes": path.stat().st_size,
    }


def run() -> Section:
    section = Section("12. Export and import (SQLite store, 100,000 against 1,000 entries)")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        url = f"sqlite:///{root / 'om.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        accounts = AccountStore(store.engine)
        source, timed_copy, traced_copy = (accounts.create_tenant(n).id for n in "abc")
        figures: dict[int, dict[str, float]] = {}
        for size in SIZES:
            session_id = f"port-{size}"
            entries = _load(store, source, session_id, size)
            got = _measure(store, (source, timed_copy, traced_copy), session_id, root)
            figures[size] = {**got, "entries": entries}
            print(f"  {size}: {figures[size]}", flush=True)
        store.close()
    load = os.getloadavg()[0]
    small, large = figures[SIZES[0]], figures[SIZES[1]]
    mib = 1024 * 1024
    section.add("export 100k: time", large["export_s"], "s", "export 1k", small["export_s"])
    section.add(
        "export 100k: peak memory",
        large["export_peak"] / mib,
        "MiB",
        "export 1k",
        small["export_peak"] / mib,
    )
    section.add("import 100k: time", large["import_s"], "s", "import 1k", small["import_s"])
    section.add(
        "import 100k: peak memory",
        large["import_peak"] / mib,
        "MiB",
        "import 1k",
        small["import_peak"] / mib,
    )
    section.notes += [
        f"Sessions of {small['entries']:,.0f} and {large['entries']:,.0f} entries; files of "
        f"{small['bytes'] / mib:,.1f} and {large['bytes'] / mib:,.1f} MiB. An export's peak is "
        "one page (1,000 entries) whatever the length; an import's grows with the ids it must "
        "check for duplicates and parents (one small string each), never with the file: the "
        "API spools the body to disk and the store appends 1,000 entries at a time.",
        f"Machine: 2 cores shared with other work; load average {load:.1f} at the end.",
    ]
    return section
