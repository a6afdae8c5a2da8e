"""A small in-process cache of the context blocks the session page shows.

A context is a function of the session's stored branch (its leaf, entry count and last
change), its tombstones, the secrets redacted and this process's settings; the key holds all
of them, so an append, a flush's records, a fork, a rewrite, a new tombstone or a newly known
secret each make a new key, and a stale context is never shown. Entries are kept per
(tenant, session) only for the latest key, for at most :data:`MAX_AGE_S` (so the text of a
session erased elsewhere leaves this process's memory soon after; the page itself is a 404 at
once, as the session is read first); at most :data:`MAX_SESSIONS` sessions, least recently
shown dropped first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

from om_api.schemas import ContextOut

MAX_SESSIONS: Final = 64
"""Sessions whose latest context is kept (a console is looked at by few people at once)."""
MAX_AGE_S: Final = 60.0
"""How long a kept context is used, seconds."""


class ContextCache:
    """The latest context of up to :data:`MAX_SESSIONS` sessions, shared by a process's
    request threads."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, max_age_s: float = MAX_AGE_S) -> None:
        if max_sessions < 1 or max_age_s <= 0:
            raise ValueError(
                f"need max_sessions >= 1 and max_age_s > 0, got {max_sessions}, {max_age_s}"
            )
        self._max = max_sessions
        self._max_age_s = max_age_s
        self._items: OrderedDict[tuple[str, str], tuple[Hashable, float, ContextOut]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def get(
        self, tenant_id: str, session_id: str, version: Hashable, build: Callable[[], ContextOut]
    ) -> ContextOut:
        """The context of the session at ``version``: the kept one when its version is
        ``version``, else ``build()``'s (kept from now on). ``build``'s errors pass through."""
        slot = (tenant_id, session_id)
        now = time.monotonic()
        with self._lock:
            kept = self._items.get(slot)
            if kept is not None and kept[0] == version and now - kept[1] < self._max_age_s:
                self._items.move_to_end(slot)
                return kept[2]
        built = build()
        with self._lock:
            self._items[slot] = (version, now, built)
            self._items.move_to_end(slot)
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        return built

    def forget(self, tenant_id: str, session_id: str) -> None:
        """Drop the session's kept context (it was erased)."""
        with self._lock:
            self._items.pop((tenant_id, session_id), None)
