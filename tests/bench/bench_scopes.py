"""14. Scope routes against history: one round of work-scope operations (open, enter, bind one
observation, leave) as the scope routes run it, on sessions that already hold 100, 2,000 and
10,000 consolidated entries, on SQLite and (when reachable) PostgreSQL, with the SQL statements
it sends.

The routes' controller reads the branch's scope map and ledger from the stored snapshot plus the
entries after it (``SqlMemoryUnitOfWork.scope_view``) and confirms each append in its own
transaction (``append_visible``). Baselines: the same round on a 100-entry history, and the same
round with the branch folded from its root for every operation (``get_entries``, how the routes
ran before), in the same run.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from om_core import WorkScopeController
from om_workers.store import AccountStore, SqlMemoryUnitOfWork, SqlStore, upgrade

from .bench_history import StatementCounter, _analyze, _load, postgres_url
from .common import Section

SIZES = (100, 2_000, 10_000)
"""History sizes; the smallest is the baseline (a bind needs a recorded observation)."""
REPEAT = 3
_names = itertools.count()


def _round(store: SqlStore, tenant: str, session_id: str, *, folded: bool) -> None:
    """open, enter, bind, leave: one operation each, as the routes run them."""
    handle = SqlMemoryUnitOfWork(store, tenant, session_id)
    controller = (
        WorkScopeController(
            session_id=session_id, append_entry=handle.append_entry, get_entries=handle.entries
        )
        if folded
        else WorkScopeController(
            session_id=session_id, append_entry=handle.append_visible, get_view=handle.scope_view
        )
    )
    observation = handle.scope_view().ledger.observations[0].id
    scope = f"task-{next(_names)}"
    store.get_session(tenant, session_id)  # the route's 404 check, once per operation
    controller.open({"id": scope})
    controller.enter(scope)
    controller.bind(scope, [f"om:{observation}"])
    controller.leave()


def _timed(
    store: SqlStore, counter: StatementCounter, tenant: str, session_id: str, *, folded: bool
) -> tuple[float, int]:
    best: tuple[float, int] | None = None
    for _ in range(REPEAT):
        counter.count = 0
        counter.counting = True
        started = time.perf_counter()
        _round(store, tenant, session_id, folded=folded)
        elapsed = time.perf_counter() - started
        counter.counting = False
        best = min(best, (elapsed, counter.count)) if best else (elapsed, counter.count)
    assert best is not None
    return best


def measure(section: Section, backend: str, url: str) -> None:
    upgrade(url)
    store = SqlStore.from_url(url)
    counter = StatementCounter(store.engine)
    try:
        tenant = AccountStore(store.engine).create_tenant("bench").id
        figures: dict[int, tuple[tuple[float, int], tuple[float, int]]] = {}
        for size in SIZES:
            session_id = f"scopes{size}"
            _load(store, tenant, session_id, size)
            _analyze(store)
            view = _timed(store, counter, tenant, session_id, folded=False)
            fold = _timed(store, counter, tenant, session_id, folded=True)
            figures[size] = (view, fold)
            print(
                f"  {backend}, {size:,} entries: {view[0] * 1000:.1f} ms ({view[1]} statements)"
                f"; folded {fold[0] * 1000:.1f} ms ({fold[1]} statements)",
                flush=True,
            )
    finally:
        counter.close()
        store.close()
    base = figures[SIZES[0]][0]
    for size in SIZES[1:]:
        view, fold = figures[size]
        section.add(
            f"{backend}: scope round, {size:,}-entry history", view[0] * 1000, "ms",
            "same round, smallest history", base[0] * 1000,
        )  # fmt: skip
        section.add(
            f"{backend}: SQL statements, {size:,}-entry history", view[1], "statements",
            "statements, smallest history", base[1],
        )  # fmt: skip
        section.add(
            f"{backend}: branch folded per operation (before), {size:,}-entry history",
            fold[0] * 1000, "ms", "from the snapshot (now)", view[0] * 1000,
        )  # fmt: skip


def run() -> Section:
    section = Section("14. Scope routes against history (open, enter, bind, leave)")
    with tempfile.TemporaryDirectory() as folder:
        measure(section, "SQLite", f"sqlite:///{Path(folder) / 'scopes.db'}")
        with postgres_url() as pg:
            if pg is None:
                section.notes.append("PostgreSQL skipped: nothing answered on 127.0.0.1:5432.")
            else:
                measure(section, "PostgreSQL", pg)
    section.notes.append(
        "One round = the route's existence check and open, enter, bind (one active "
        "observation), leave through `WorkScopeController` on `SqlMemoryUnitOfWork` (as "
        "`om_api/server/routes/scopes.py` builds it); best of 3. History: "
        "`tests/bench/synthetic.consolidated_history` (as section 9); the baseline is the "
        "100-entry history (a bind needs a recorded observation)."
    )
    return section
