"""Child-process body for the concurrency test (a module, so ``spawn`` can import it)."""

from __future__ import annotations

from multiprocessing.synchronize import Event
from typing import Any

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


def append_and_die_writing_the_copy(url: str, tenant: str, session_id: str, entry_id: str) -> None:
    """Append one message to a linked session and SIGKILL this process inside the copy step:
    the original's rows are written, the transaction is open, the copy is next."""
    import os
    import signal

    from om_workers.store import funnel

    real = funnel.append_locked
    calls = 0

    def die_on_the_copy(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first call wrote the original
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    funnel.append_locked = die_on_the_copy  # type: ignore[assignment]
    store = SqlStore.from_url(url)
    store.append_entries(tenant, session_id, message(entry_id, session_id))
