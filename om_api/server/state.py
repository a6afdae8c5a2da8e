"""What every request handler needs: the store, Redis, the publisher, settings and metrics.

One :class:`ApiState` lives on ``app.state.om``; routes get it through :func:`get_state`. The
store, Redis, the settings and the memory settings are the process's
:class:`~om_workers.services.Services` (the composition root the worker uses too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

import redis
from fastapi import Depends, Request

from om_api.server.key_cache import KeyCache
from om_api.server.lanes import Lanes
from om_api.server.limits import ApiRateLimits
from om_api.server.logging import SecretRegistry
from om_api.server.metrics import ApiMetrics
from om_core.settings import ObservationalMemorySettings
from om_workers.config import Settings
from om_workers.errors import RedisUnavailableError
from om_workers.jobs.deps import PublishJob
from om_workers.jobs.reconcile import PublishErasure
from om_workers.services import Services
from om_workers.store import AccountStore, SqlStore, tombstone_scope

log = logging.getLogger(__name__)


@dataclass
class ApiState:
    """Dependencies of one app. ``lanes`` bound the hot routes' threads; ``publish`` is
    resolved on first use when not injected (the Celery app needs ``OM_REDIS_URL``, which a
    read-only API does not)."""

    services: Services
    metrics: ApiMetrics
    registry: SecretRegistry
    publish_factory: Callable[[], PublishJob]
    limits: ApiRateLimits
    keys: KeyCache
    lanes: Lanes
    erase_publish_factory: Callable[[], PublishErasure] | None = None
    _publish: PublishJob | None = None
    _publish_erasure: PublishErasure | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def settings(self) -> Settings:
        """The ``OM_*`` settings the services were built from."""
        return self.services.settings

    @property
    def memory_settings(self) -> ObservationalMemorySettings:
        """The resolved observational-memory settings (resolved when the app was built)."""
        return self.services.memory()

    @property
    def store(self) -> SqlStore:
        """The SQL session store."""
        return self.services.store

    @property
    def local_store(self) -> bool:
        """Whether the store is a local SQLite file, whose calls cost less on the event loop
        than a hop into a lane: they take microseconds to a few milliseconds, reads never wait
        for a writer (WAL), and a write that would wait for one can be handed to a lane
        (:func:`~om_workers.store.engine.writers_not_waited`)."""
        return self.store.engine.dialect.name == "sqlite"

    @property
    def accounts(self) -> AccountStore:
        """Tenants, API keys and rate-limit overrides (the store's engine, own transactions)."""
        return self.services.accounts

    @property
    def redis(self) -> redis.Redis:
        """The Redis client (locks, coalescing, readiness)."""
        return self.services.redis

    @property
    def secrets(self) -> frozenset[str]:
        """Every exact value to redact from answers and logs."""
        return self.registry.values()

    def publisher(self) -> PublishJob:
        """The ``om.flush`` publisher (built once, on first use).

        Any failure to publish is the broker (Redis) failing, so it is raised as
        :class:`RedisUnavailableError` (a 503); the flush module has already failed the job row.
        """
        with self._lock:
            if self._publish is None:
                self._publish = self.publish_factory()
            publish = self._publish

        def guarded(tenant_id: str, session_id: str, job_id: str) -> None:
            try:
                publish(tenant_id, session_id, job_id)
            except Exception as exc:
                raise RedisUnavailableError(f"could not publish om.flush: {exc}") from exc

        return guarded

    def publish_erasure(self, job_id: str) -> bool:
        """Send ``om.erase`` for the job; False (logged) when the broker refused: the job row
        is durable, and the reconciler publishes it again (``OM_ERASE_RETRY_AFTER_S``)."""
        try:
            with self._lock:
                if self._publish_erasure is None:
                    if self.erase_publish_factory is None:
                        return False
                    self._publish_erasure = self.erase_publish_factory()
                publish = self._publish_erasure
            publish(job_id)
        except Exception:
            log.warning("could not publish om.erase for %s; the reconciler will", job_id)
            return False
        return True

    def invalidated_ids(self, tenant_id: str, session_id: str) -> frozenset[str]:
        """Entry ids revoked in this session (its tombstone scope)."""
        return self.store.invalidated_ids(tenant_id, tombstone_scope(session_id))


async def get_state(request: Request) -> ApiState:
    """The app's :class:`ApiState` (set by :func:`om_api.server.app.create_app`). A coroutine:
    FastAPI runs a plain function dependency in its thread pool, a hop that cost more than
    this attribute read."""
    state: ApiState = request.app.state.om
    return state


State = Annotated[ApiState, Depends(get_state)]
