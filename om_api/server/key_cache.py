"""API keys resolved once a second, not once a request.

Resolving a key is one indexed read, but on the hot routes it was a transaction of its own on
every request. :class:`KeyCache` keeps ``(tenant id, key id)`` of keys that resolved, by the
key's hash, for ``OM_API_KEY_CACHE_S`` (1 s by default; 0: every request reads the store).

Revocation stays prompt: a key revoked through this process's admin route is dropped from its
cache at once (:meth:`KeyCache.forget_key`), and every other replica (or ``om keys revoke``,
which writes the store directly) refuses it once its entry expires, within
``OM_API_KEY_CACHE_S``. Unknown and revoked keys are never cached, so a new key works at once
and a guessed key always costs a read (and never fills the cache).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from om_workers.store import AccountStore
from om_workers.store.accounts import hash_api_key

MAX_KEYS = 10_000
"""Keys kept at most (least recently used go first): one entry is about 200 bytes."""


class KeyCache:
    """Keys that resolved recently, thread-safe. ``ttl_s`` 0 turns caching off."""

    def __init__(
        self,
        accounts: AccountStore,
        ttl_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        size: int = MAX_KEYS,
    ) -> None:
        self._accounts = accounts
        self._ttl_s = ttl_s
        self._clock = clock
        self._size = size
        self._items: OrderedDict[str, tuple[float, str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, plaintext: str) -> tuple[str, str]:
        """``(tenant id, key id)`` of the key, from the cache while fresh, else the store.

        Raises :class:`~om_workers.errors.InvalidApiKeyError` for an unknown or revoked key
        (read from the store every time) and the store's errors.
        """
        if self._ttl_s <= 0:
            return self._accounts.resolve_api_key_id(plaintext)
        hit = self.cached(plaintext)
        if hit is not None:
            return hit
        digest = hash_api_key(plaintext)
        now = self._clock()
        tenant_id, key_id = self._accounts.resolve_api_key_id(plaintext)
        with self._lock:
            self._items[digest] = (now + self._ttl_s, tenant_id, key_id)
            self._items.move_to_end(digest)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return tenant_id, key_id

    def cached(self, plaintext: str) -> tuple[str, str] | None:
        """``(tenant id, key id)`` of the key while its cache entry is fresh, else ``None``;
        never reads the store (so it may run on the event loop)."""
        if self._ttl_s <= 0:
            return None
        digest = hash_api_key(plaintext)
        with self._lock:
            hit = self._items.get(digest)
            if hit is None or hit[0] <= self._clock():
                return None
            self._items.move_to_end(digest)
            return hit[1], hit[2]

    def forget_key(self, key_id: str) -> None:
        """Drop the key ``key_id`` (this process revoked it): its next request reads the store."""
        self._forget(lambda item: item[2] == key_id)

    def forget_tenant(self, tenant_id: str) -> None:
        """Drop every key of ``tenant_id`` (this process revoked them all, erasing the tenant)."""
        self._forget(lambda item: item[1] == tenant_id)

    def _forget(self, stale: Callable[[tuple[float, str, str]], bool]) -> None:
        with self._lock:
            for digest in [digest for digest, item in self._items.items() if stale(item)]:
                del self._items[digest]
