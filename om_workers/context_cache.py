"""Rendered contexts kept in this process, shared by every edge that reads one (the context
route, the OpenAI-compatible proxy, MCP, the console).

Two levels, each keyed by everything its value is a function of, so a stale value is never
served (another API process's writes included: every read checks the session row first):

* whole contexts (:class:`ContextKey`): the session row's version (leaf, entry count, last
  write, creation, rewrite), the ids its tombstones withhold, the secrets redacted, the
  memory settings, scope, include and token budget. Any append, memory record, fork,
  rewrite, tombstone, new secret or other setting makes a new key.
* the memory part (:class:`MemoryKey`): the branch's memory records (the snapshot's entry
  and the memory entries after it), the rewrite, withheld ids, secrets, scope and include,
  but not the messages. After an append only the recent tail is rendered again; the kept
  :class:`~om_core.read.context_memory.ContextMemory` fits the memory block from its plan.

Both are bounded (least recently used out first) and aged (:data:`MAX_AGE_S`), so the text
of a session erased through another process leaves this one's memory soon after; one erased
through this process is forgotten at once (:meth:`ContextCache.forget`), and a read of an
erased session fails on its row before any kept text is looked at.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Generic, TypeVar

from om_core.ledger.models import SessionEntry
from om_core.read.context import Context
from om_core.read.context_memory import ContextMemory
from om_core.read.tail_messages import TailMessages
from om_core.settings import ObservationalMemorySettings
from om_workers.store import SqlStore

MAX_CONTEXTS: Final = 256
"""Whole contexts kept (one per session, scope and budget read lately)."""
MAX_MEMORIES: Final = 1024
"""Memory parts kept at most (one per session, scope and view read lately)."""
MAX_MEMORY_CHARS: Final = 16_000_000
"""Characters of rendered memory lines kept over every memory part (:attr:`ContextMemory.size`;
the objects behind them hold a few times that): a part is a few KB for most sessions and
up to a few MB for one of 10,000 observations, so parts are bounded by their size, not only
by their number (a count of 32 had an agent server of a few hundred sessions rebuild
every session's memory on every read)."""
MAX_TAIL_ENTRIES: Final = 50_000
"""Entries of the tails walked last (:class:`TailMessages`) kept over every session: the
objects are mostly the tail cache's own, so this bounds what outlives it there."""
MAX_AGE_S: Final = 300.0
"""How long a kept value is used, seconds."""


def secrets_digest(secrets: Iterable[str]) -> str:
    """A digest naming a set of secrets in a key, so no key holds a secret itself."""
    digest = hashlib.sha256()
    for secret in sorted(set(secrets)):
        digest.update(secret.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class MemoryKey:
    """What a context's memory part is a function of (see the module's doc)."""

    tenant_id: str
    session_id: str
    created_at: datetime
    rewritten_at: datetime | None
    snapshot_entry_id: str | None
    memory_entry_ids: tuple[str, ...]
    withheld: frozenset[str]
    secrets: str
    scope: str | None
    include: str


@dataclass(frozen=True, slots=True)
class ContextKey:
    """What a whole context is a function of (see the module's doc)."""

    tenant_id: str
    session_id: str
    created_at: datetime
    updated_at: datetime
    rewritten_at: datetime | None
    leaf_id: str | None
    entry_count: int
    withheld: frozenset[str]
    secrets: str
    settings: ObservationalMemorySettings
    scope: str | None
    include: str
    max_tokens: int | None


K = TypeVar("K", MemoryKey, ContextKey)
V = TypeVar("V")


class _Kept(Generic[K, V]):
    """A bounded, aged map of values, least recently used out first: at most ``size`` of
    them and, with ``weight``, at most ``budget`` of their weights together (the newest one
    stays whatever its weight). Thread-safe."""

    def __init__(
        self,
        size: int,
        max_age_s: float,
        weight: Callable[[V], int] = lambda _: 0,
        budget: int = 0,
    ) -> None:
        self._items: OrderedDict[K, tuple[float, V, int]] = OrderedDict()
        self._size = size
        self._max_age_s = max_age_s
        self._weight = weight
        self._budget = budget
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        now = time.monotonic()
        with self._lock:
            kept = self._items.get(key)
            if kept is None:
                return None
            if now - kept[0] >= self._max_age_s:
                self._drop(key)
                return None
            self._items.move_to_end(key)
            return kept[1]

    def put(self, key: K, value: V) -> None:
        weight = self._weight(value)
        with self._lock:
            if key in self._items:
                self._drop(key)
            self._items[key] = (time.monotonic(), value, weight)
            self._held += weight
            while len(self._items) > self._size or (
                self._held > self._budget > 0 and len(self._items) > 1
            ):
                self._drop(next(iter(self._items)))

    def _drop(self, key: K) -> None:
        self._held -= self._items.pop(key)[2]

    def forget(self, tenant_id: str, session_id: str) -> None:
        with self._lock:
            gone = [
                k for k in self._items if (k.tenant_id, k.session_id) == (tenant_id, session_id)
            ]
            for key in gone:
                self._drop(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


@dataclass
class CacheCounts:
    """Lookups answered from the cache and built afresh, per level, since the cache began."""

    context_hits: int = 0
    context_misses: int = 0
    memory_hits: int = 0
    memory_misses: int = 0


class ContextCache:
    """Whole contexts and memory parts of one store's sessions, kept in this process."""

    def __init__(
        self,
        max_contexts: int = MAX_CONTEXTS,
        max_memories: int = MAX_MEMORIES,
        max_age_s: float = MAX_AGE_S,
        max_memory_chars: int = MAX_MEMORY_CHARS,
    ) -> None:
        if min(max_contexts, max_memories, max_memory_chars) < 1 or max_age_s <= 0:
            raise ValueError(
                "need max_contexts, max_memories and max_memory_chars >= 1 and max_age_s > 0, "
                f"got {max_contexts}, {max_memories}, {max_memory_chars}, {max_age_s}"
            )
        self._contexts: _Kept[ContextKey, Context] = _Kept(max_contexts, max_age_s)
        self._memories: _Kept[MemoryKey, ContextMemory] = _Kept(
            max_memories, max_age_s, weight=lambda memory: memory.size, budget=max_memory_chars
        )
        # The key of each session's memory part kept last (at most ``max_memories``): where
        # a new version of that memory finds the lines it shares with the previous one.
        self._latest: OrderedDict[tuple[str, str], MemoryKey] = OrderedDict()
        self._max_latest = max_memories
        self._latest_lock = threading.Lock()
        self._tails: _Kept[MemoryKey, TailMessages] = _Kept(
            max_memories, max_age_s, weight=lambda tail: tail.walked, budget=MAX_TAIL_ENTRIES
        )
        self.counts = CacheCounts()

    def kept_context(self, key: ContextKey) -> Context | None:
        """The context kept under ``key``, else ``None`` (counted as a miss)."""
        kept = self._contexts.get(key)
        if kept is None:
            self.counts.context_misses += 1
        else:
            self.counts.context_hits += 1
        return kept

    def keep_context(self, key: ContextKey, context: Context) -> None:
        """Keep ``context`` under ``key`` (the version it was built for)."""
        self._contexts.put(key, context)

    def context(self, key: ContextKey, build: Callable[[], Context]) -> Context:
        """The context kept under ``key``, else ``build()``'s, kept from now on; ``build``'s
        errors pass through."""
        kept = self.kept_context(key)
        if kept is None:
            kept = build()
            self.keep_context(key, kept)
        return kept

    def memory(self, key: MemoryKey, build: Callable[[], ContextMemory]) -> ContextMemory:
        """The memory part kept under ``key``, else ``build()``'s, kept from now on."""
        kept = self._memories.get(key)
        if kept is not None:
            self.counts.memory_hits += 1
            return kept
        self.counts.memory_misses += 1
        built = build()
        self._memories.put(key, built)
        with self._latest_lock:
            self._latest[(key.tenant_id, key.session_id)] = key
            self._latest.move_to_end((key.tenant_id, key.session_id))
            while len(self._latest) > self._max_latest:
                self._latest.popitem(last=False)
        return built

    def earlier_memory(self, key: MemoryKey) -> ContextMemory | None:
        """The memory part kept last for ``key``'s session (the same session row, secrets,
        scope and include, another version of its memory), while it is still kept; else
        ``None``. What a build of ``key`` may lend lines from."""
        with self._latest_lock:
            latest = self._latest.get((key.tenant_id, key.session_id))
        if latest is None or latest == key:
            return None
        same = (latest.created_at, latest.secrets, latest.scope, latest.include)
        if same != (key.created_at, key.secrets, key.scope, key.include):
            return None
        return self._memories.get(latest)

    def tail_messages(
        self, key: MemoryKey, entries: Sequence[SessionEntry], memory: ContextMemory
    ) -> TailMessages:
        """``entries`` (a tail of the branch whose memory part ``key`` names: ``memory``)
        walked for a context build: the walk kept under ``key`` is continued when they go on
        from it, so only what was appended since is walked; kept from now on."""
        cursor = memory.ledger.observation_covers_up_to_id
        walked = TailMessages.of(entries, cursor, self._tails.get(key), memory.secrets)
        self._tails.put(key, walked)
        return walked

    def holds_memory(self, key: MemoryKey) -> bool:
        """Whether a memory part is kept under ``key``, so that a build would reuse it."""
        return self._memories.get(key) is not None

    def forget(self, tenant_id: str, session_id: str) -> None:
        """Drop everything kept of the session (it was erased)."""
        self._contexts.forget(tenant_id, session_id)
        self._memories.forget(tenant_id, session_id)
        self._tails.forget(tenant_id, session_id)
        with self._latest_lock:
            self._latest.pop((tenant_id, session_id), None)

    def sizes(self) -> tuple[int, int]:
        """How many whole contexts and memory parts are kept."""
        return len(self._contexts), len(self._memories)


_CACHES: weakref.WeakKeyDictionary[SqlStore, ContextCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def context_cache(store: SqlStore) -> ContextCache:
    """This process's :class:`ContextCache` of ``store``'s sessions (one per store object,
    so two stores over different databases never share a kept context; gone with the
    store)."""
    with _CACHES_LOCK:
        cache = _CACHES.get(store)
        if cache is None:
            cache = _CACHES[store] = ContextCache()
        return cache
