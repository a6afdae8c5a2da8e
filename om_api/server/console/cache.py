"""A small in-process cache of the context blocks the session page shows.

A context is a function of the session's stored branch (its leaf, entry count and last
change), its tombstones, the secrets redacted and this process's settings; the key holds all
of them, so an append, a flush's records, a fork, a rewrite, a new tombstone or a newly known
secret each make a new key, and a stale context is never shown. Entries are kept per
(tenant, session) only for the latest key; at most :data:`MAX_SESSIONS` sessions, least
recently shown dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

from om_api.schemas import ContextOut

MAX_SESSIONS: Final = 64
"""Sessions whose latest context is kept (a console is looked at by few people at once)."""


class ContextCache:
    """The latest context of up to :data:`MAX_SESSIONS` sessions, shared by a process's
    request threads."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self._max = max_sessions
        self._items: OrderedDict[tuple[str, str], tuple[Hashable, ContextOut]] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, tenant_id: str, session_id: str, version: Hashable, build: Callable[[], ContextOut]
    ) -> ContextOut:
        """The context of the session at ``version``: the kept one when its version is
        ``version``, else ``build()``'s (kept from now on). ``build``'s errors pass through."""
        slot = (tenant_id, session_id)
        with self._lock:
            kept = self._items.get(slot)
            if kept is not None and kept[0] == version:
                self._items.move_to_end(slot)
                return kept[1]
        built = build()
        with self._lock:
            self._items[slot] = (version, built)
            self._items.move_to_end(slot)
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        return built
