"""The erasure job body (what ``om.erase`` runs), pure of Celery.

A job hides nothing itself (the request did, at once); it deletes. For each session it still
has to delete (its targets): the session's Redis keys, then its rows and its funnel copies'
traces on workspaces (:meth:`~om_workers.store.erasure.ErasureService.erase_target`). Then, on
SQLite, the write-ahead log is checkpointed and truncated, so the old page images that held
the erased text leave the disk with it (``secure_delete`` already zeroes freed pages of the
database file). Last, the job and its audit record are finished in one transaction.

A dependency that is down (database, Redis) leaves the job unfinished: the reconciler publishes
it again once it made no progress for ``OM_ERASE_RETRY_AFTER_S``, and every step done is not
done twice. Any other error fails the job with a redacted message; its sessions stay hidden,
and a second DELETE queues it again.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import redis

from om_core.errors import ObservationalMemoryError, UnavailableError
from om_core.policy.redaction import redact
from om_workers.coordination.erasure import forget_session
from om_workers.store import SqlStore
from om_workers.store.engine import checkpoint_wal
from om_workers.store.search_index import purge_deleted_terms
from om_workers.store.unit_of_work import translate_errors

log = logging.getLogger(__name__)

ErasureOutcome = Literal["succeeded", "failed", "skipped", "unavailable"]
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class ErasureRun:
    """What one run of an erasure job did: its outcome and counts (``sessions``, ``entries``,
    ``workspace_entries``), and whether the WAL checkpoint completed (SQLite)."""

    job_id: str
    outcome: ErasureOutcome
    counts: dict[str, int]
    checkpointed: bool = True


def run_erasure_job(
    store: SqlStore,
    client: redis.Redis,
    job_id: str,
    *,
    chunk: int,
    pause_s: float = 0.0,
    secrets: tuple[str, ...] = (),
) -> ErasureRun:
    """Run the erasure job ``job_id`` to its end (see the module docstring); ``chunk``: entries
    deleted per transaction, ``pause_s``: seconds between two chunks. Never raises for the
    job's own failures: they are its outcome."""
    try:
        started = store.erasure.start_job(job_id)
    except UnavailableError:
        return ErasureRun(job_id, "unavailable", {})
    if started is None:
        return ErasureRun(job_id, "skipped", {})
    job, targets = started
    counts: Counter[str] = Counter(job.counts)
    try:
        for target in targets:
            forget_session(client, target.tenant_id, target.session_id)
            counts.update(store.erasure.erase_target(target, chunk=chunk, pause_s=pause_s))
            store.erasure.set_counts(job_id, counts)
        checkpointed = _checkpoint(store)
    except UnavailableError:
        log.warning("erasure %s: a dependency is down; the reconciler resumes it", job_id)
        return ErasureRun(job_id, "unavailable", dict(counts))
    except Exception as exc:
        error = _describe(exc, secrets)
        log.error("erasure %s failed: %s", job_id, error)
        store.erasure.finish_job(job_id, "failed", counts, error)
        return ErasureRun(job_id, "failed", dict(counts))
    store.erasure.finish_job(job_id, "succeeded", counts)
    return ErasureRun(job_id, "succeeded", dict(counts), checkpointed)


def _describe(exc: Exception, secrets: tuple[str, ...]) -> str:
    """The error as stored and logged: the service's own errors with their message (the
    store's name the failing statement, never its parameters), any other only by its type,
    since a foreign message (a validation error's input, say) may quote the erased content."""
    if isinstance(exc, ObservationalMemoryError):
        return redact(f"{type(exc).__name__}: {exc}", secrets)[:MAX_ERROR_CHARS]
    return type(exc).__name__


def _checkpoint(store: SqlStore) -> bool:
    with translate_errors():
        purge_deleted_terms(store.engine)
        done = checkpoint_wal(store.engine)
    if not done:
        # A reader held a snapshot through every attempt; the next erasure's checkpoint, or
        # SQLite's own automatic one, moves the pages out later.
        log.warning("the WAL checkpoint after an erasure stayed busy")
    return done


__all__ = ["ErasureRun", "run_erasure_job"]
