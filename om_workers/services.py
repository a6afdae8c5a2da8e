"""The composition root: the store, the Redis client, the provider and the settings, built once.

Every process builds its long-lived dependencies here and nowhere else: the Celery worker
(:func:`om_workers.celery.app.worker_deps`), the HTTP API (``om_api.server.app.create_app``) and the
embedded stack (``om_api.cli.stack``). :func:`build_services` turns one :class:`Settings` into one
:class:`Services`; its helpers derive what each side needs (:meth:`Services.flush_deps` for the
worker, :meth:`Services.memory` for the API's reads).

Two things are built on first use rather than at once, so a process that never needs them never
fails on them: the provider factory (an API process with an ``OM_PROVIDER`` it cannot import
still serves reads; a worker fails at its first task, loudly) and the resolved memory settings
(the API resolves them at startup; a worker passes the raw ``OM_SETTINGS_JSON`` to every job).
Both are then cached for the life of the :class:`Services`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import redis

from om_core.flush.prompts import PromptSet
from om_core.flush.provider import Provider
from om_core.settings import ObservationalMemorySettings, resolve_settings
from om_workers.config import REDIS_REQUIRED, Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.fairness import FairPublisher, FairQueue
from om_workers.embeddings.port import Embedder
from om_workers.embeddings.setup import build_embedder, embedding_secrets
from om_workers.errors import ConfigError
from om_workers.jobs.deps import FlushDeps, PublishJob
from om_workers.prompts import load_prompts
from om_workers.providers.setup import (
    computes_in_process,
    provider_factory,
    provider_secrets,
    worker_models,
)
from om_workers.store import AccountStore, SqlStore

_T = TypeVar("_T")


class _Once(Generic[_T]):
    """A value built by ``build`` on the first :meth:`get` and cached; thread-safe (worker
    threads share one :class:`Services`). A build that raises is not cached: the next
    :meth:`get` tries again and raises again."""

    def __init__(self, build: Callable[[], _T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._value: tuple[_T] | None = None  # boxed: the built value may itself be None

    def get(self) -> _T:
        value = self._value
        if value is None:
            with self._lock:
                value = self._value
                if value is None:
                    value = self._value = (self._build(),)
        return value[0]


@dataclass(frozen=True)
class Services:
    """One process's long-lived dependencies; build it with :func:`build_services`.

    ``settings`` are the ``OM_*`` settings everything else was built from; ``store`` the SQL
    session store on ``OM_DATABASE_URL``; ``accounts`` the tenants, API keys and rate-limit
    overrides on the same engine; ``redis`` the client on ``OM_REDIS_URL`` (locks,
    coalescing); ``memory_settings`` the raw ``OM_SETTINGS_JSON`` object (read-only);
    ``secrets`` the values every job redacts (the provider API key, if set); ``worker_models``
    the per-worker model overrides (``OM_OBSERVER_MODEL`` ..., only those set); ``prompts`` the
    observer/reflector instructions (``OM_PROMPTS_FILE``, else the built-in set).

    The store and the client connect lazily (first query, first command); :meth:`close`
    releases their pooled connections.
    """

    settings: Settings
    store: SqlStore
    accounts: AccountStore
    redis: redis.Redis
    memory_settings: Mapping[str, Any]
    secrets: tuple[str, ...]
    worker_models: Mapping[str, str]
    prompts: PromptSet
    _provider: _Once[Callable[[], Provider]] = field(repr=False, compare=False)
    _memory: _Once[ObservationalMemorySettings] = field(repr=False, compare=False)
    _embedder: _Once[Embedder | None] = field(repr=False, compare=False)

    def embedder(self) -> Embedder | None:
        """The semantic search's embedder per ``OM_EMBEDDINGS_PROVIDER`` (``None``: off),
        built on the first call and shared (see
        :func:`om_workers.embeddings.setup.build_embedder`, and its errors)."""
        return self._embedder.get()

    def provider_factory(self) -> Callable[[], Provider]:
        """The callable returning the provider for one job, per ``OM_PROVIDER`` (see
        :func:`om_workers.providers.setup.provider_factory`), built on the first call and then
        shared: HTTP adapters keep one connection pool per process.

        Raises :class:`ConfigError` for an unknown provider name or a ``module:factory`` that
        cannot be loaded (on every call until the settings are fixed).
        """
        return self._provider.get()

    def memory(self) -> ObservationalMemorySettings:
        """The observational-memory settings resolved from ``memory_settings`` (the defaults
        of :class:`~om_core.settings.ObservationalMemorySettings` when empty), resolved on the
        first call and cached.

        Raises ``pydantic.ValidationError`` for invalid values and ``TypeError`` for a removed
        flat key (see :func:`om_core.settings.resolve_settings`).
        """
        return self._memory.get()

    def flush_deps(self, publish: PublishJob) -> FlushDeps:
        """The worker's :class:`~om_workers.jobs.deps.FlushDeps`: this store and Redis client,
        ``publish`` (sends ``om.flush`` again), the provider factory, ``OM_MODEL``, a copy of
        the raw memory settings, ``OM_LOCK_TTL_S`` (seconds), ``OM_MAX_DELIVERIES``, the
        redaction secrets, the per-worker models, the prompt set, and a lock that runs one
        flush at a time when the provider computes in this process (``extractive``).

        Raises :class:`ConfigError` like :meth:`provider_factory` (the worker's first task
        fails loudly on a misnamed provider).
        """
        return FlushDeps(
            store=self.store,
            redis=self.redis,
            publish=publish,
            provider=self.provider_factory(),
            model=self.settings.llm.model,
            memory_settings=dict(self.memory_settings),
            lock_ttl_s=self.settings.locks.ttl_s,
            max_deliveries=self.settings.delivery.max_deliveries,
            secrets=self.secrets,
            worker_models=dict(self.worker_models),
            prompts=self.prompts,
            embedder=self.embedder(),
            embed_batch=self.settings.embeddings.batch_size,
            compute_lock=threading.Lock() if computes_in_process(self.settings) else None,
        )

    def publisher(self, send: PublishJob) -> PublishJob:
        """The process's flush publisher: ``send`` (the broker publish of ``om.flush``) behind
        the fair queue across tenants (:class:`~om_workers.coordination.fairness.FairPublisher`,
        capacity ``OM_FAIR_QUEUE_CAPACITY``, half-life ``OM_FAIR_QUEUE_HALF_LIFE_S``), or
        ``send`` itself when ``OM_FAIR_QUEUEING`` is off (first in, first out)."""
        if not self.settings.fair_queue.enabled:
            return send
        queue = FairQueue(
            self.redis,
            capacity=self.settings.fair_queue.capacity,
            half_life_s=self.settings.fair_queue.half_life_s,
        )
        return FairPublisher(queue, send)

    def close(self) -> None:
        """Close the store's (and so the account store's: one engine) and the Redis client's
        pooled connections (both reconnect if used again). Closes injected ones too: whoever
        built the :class:`Services` owns them."""
        self.store.close()
        self.redis.close()


def build_services(
    settings: Settings,
    *,
    store: SqlStore | None = None,
    redis: redis.Redis | None = None,
) -> Services:
    """Build the :class:`Services` of one process from ``settings``.

    ``store`` and ``redis`` replace the ones built from ``OM_DATABASE_URL`` and
    ``OM_REDIS_URL`` (tests, or a caller that already holds them); the account store shares
    the store's engine. Nothing connects here: the store and the client connect on first use,
    and the provider and the resolved memory settings are built on first use (see the module
    docstring).

    Raises :class:`ConfigError` when no ``redis`` is given and ``OM_REDIS_URL`` is unset (only
    the embedded stack, ``om up``, starts a private Redis, and it passes its URL on), when
    ``OM_REDIS_URL`` cannot be parsed, when ``OM_DATABASE_URL`` is unusable, or when
    ``OM_PROMPTS_FILE`` cannot be read or is invalid (read here, so a bad file stops start-up).
    """
    prompts = load_prompts(settings.llm.prompts_file)
    if redis is None:
        if not settings.redis.url:
            raise ConfigError(f"{REDIS_REQUIRED} (from Python: pass redis=)")
        redis = connect(settings.redis.url)
    raw_memory = dict(settings.memory_settings)
    if store is None:
        store = SqlStore.from_settings(settings)
    return Services(
        settings=settings,
        store=store,
        accounts=AccountStore(store.engine),
        redis=redis,
        memory_settings=MappingProxyType(raw_memory),
        secrets=provider_secrets(settings) + embedding_secrets(settings),
        worker_models=MappingProxyType(dict(worker_models(settings))),
        prompts=prompts,
        _provider=_Once(lambda: provider_factory(settings)),
        _memory=_Once(lambda: resolve_settings(dict(raw_memory) or None)),
        _embedder=_Once(lambda: build_embedder(settings)),
    )


__all__ = ["Services", "build_services"]
