"""Child-process body for the concurrency test (a module, so ``spawn`` can import it)."""

from __future__ import annotations

from multiprocessing.synchronize import Event

from store_factories import message

from om_workers.store import SqlStore


def append_many(
    url: str, tenant: str, session_id: str, prefix: str, count: int, start: Event
) -> None:
    """Append ``count`` single entries, each after whatever the leaf is at that moment."""
    store = SqlStore.from_url(url)
    try:
        start.wait(30)
        for index in range(count):
            store.append_entries(tenant, session_id, message(f"{prefix}{index}", session_id))
    finally:
        store.close()
