"""What a flush job needs from its process: built once by the composition root
(:meth:`om_workers.services.Services.flush_deps`), passed to every job."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.prompts import DEFAULT_PROMPTS, PromptSet
from om_core.flush.provider import Provider
from om_workers.coordination import keys
from om_workers.embeddings.port import Embedder
from om_workers.store import SqlStore

PublishJob = Callable[[str, str, str], None]
"""Publishes ``om.flush`` for ``(tenant_id, session_id, job_id)``."""


@dataclass(frozen=True)
class FlushDeps:
    """What a flush job needs; built once per worker process.

    ``publish`` sends ``om.flush`` again (release re-publish); ``provider`` builds the
    provider for one job; ``memory_settings`` are the observational-memory settings;
    ``lock_ttl_s`` is the session lock TTL in seconds; ``max_deliveries`` the poison limit;
    ``secrets`` are redacted from every stored error and prompt (the provider API key among
    them); ``worker_models`` maps ``observer``/``reflector``/``dropper`` to a model that
    overrides the memory settings' and ``model`` for that worker; ``prompts`` the
    observer/reflector instructions (their version is recorded on each job row);
    ``embedder`` the semantic search's (``None``: off), ``embed_batch`` texts per call.

    ``compute_lock``, when set, is held around each flush's run (the provider's turns and the
    memory writes between them): the provider computes in this process (the offline
    extractive one), so flushes side by side in its threads gain nothing under one GIL. They
    cost the service: a flush holding SQLite's writer waited for the GIL behind the others'
    work, up to four times its own CPU time, and every append of the API waited behind it.
    """

    store: SqlStore
    redis: redis.Redis
    publish: PublishJob
    provider: Callable[[], Provider] = ExtractiveProvider
    model: str = "extractive"
    memory_settings: Mapping[str, Any] = field(default_factory=dict)
    lock_ttl_s: float = keys.DEFAULT_LOCK_TTL_S
    max_deliveries: int = 5
    secrets: tuple[str, ...] = ()
    worker_models: Mapping[str, str] = field(default_factory=dict)
    prompts: PromptSet = DEFAULT_PROMPTS
    embedder: Embedder | None = None
    embed_batch: int = 32
    compute_lock: threading.Lock | None = None


__all__ = ["FlushDeps", "PublishJob"]
