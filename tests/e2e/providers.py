"""Test providers for worker processes, named by ``OM_PROVIDER=tests.e2e.providers:<factory>``.

``OM_TEST_PROVIDER_DELAY_S`` (read only here) slows every provider call, so a test can kill a
worker mid-run or keep a run in progress while it sends a burst.
"""

from __future__ import annotations

import os
import time

import redis

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ProviderResponse
from om_workers.coordination import keys
from om_workers.store import SqlStore

DELAY_ENV = "OM_TEST_PROVIDER_DELAY_S"


class SlowExtractiveProvider(ExtractiveProvider):
    """The extractive provider, each call delayed by ``OM_TEST_PROVIDER_DELAY_S`` seconds."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        if self.delay_s > 0:  # sleep(0) still yields the GIL: zero latency means no call
            time.sleep(self.delay_s)
        return super().generate(request)


def slow() -> SlowExtractiveProvider:
    """Factory for ``OM_PROVIDER``."""
    return SlowExtractiveProvider(float(os.environ.get(DELAY_ENV, "0")))


THIEF_TENANT_ENV = "OM_TEST_THIEF_TENANT"
_stolen: set[str] = set()


class LockThief(ExtractiveProvider):
    """On its first call for a session, plays the worker that took the session over after this
    worker's lock expired: the lock key gets a foreign token and the store epoch is raised (what
    ``SessionLock.acquire`` and ``raise_epoch`` of the new holder do), then it answers normally,
    so the run reaches its first memory write still believing it holds the lock."""

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        session = request.correlation_id.removeprefix("om:")
        if session not in _stolen:
            _stolen.add(session)
            tenant = os.environ[THIEF_TENANT_ENV]
            client = redis.Redis.from_url(os.environ["OM_REDIS_URL"])
            client.set(keys.lock_key(tenant, session), "another-worker", px=60_000)
            client.close()
            store = SqlStore.from_url(os.environ["OM_DATABASE_URL"])
            store.raise_epoch(tenant, session)
            store.close()
        return super().generate(request)


def thief() -> LockThief:
    """Factory for ``OM_PROVIDER``."""
    return LockThief()
