"""One distributed flush job, pure of Celery: :func:`run_flush_job` is what ``om.flush`` runs.

The order of a job (``docs/architecture.md``, "A flush request, end to end"):

1. take the session lock and claim ``pending`` in one Redis step, before reading the session;
   busy: drop the message (the holder's release re-publishes);
2. start the job, in one transaction: its one read of its row, which tells a duplicate of a
   finished job (skipped) or an unknown one, counts the attempt, raises the session's epoch
   and reads the session's view (snapshot, active pool, the entries after them);
3. past ``max_deliveries`` attempts the job fails as a poison message; else start the
   heartbeat;
4. run ``ObservationalMemoryRuntime.flush()`` over the session's SQL unit of work, starting
   from that view, with appends that check the lock and commit fenced (only while the epoch
   is still ours);
5. record the outcome with counts and a redacted error, release the lock and publish the job
   that was requested meanwhile.

Duplicates are told apart by the durable job row, not by the ``pending`` marker: a message
redelivered after its worker crashed finds its marker already claimed, yet its job never
finished and must run again (coverage cursors read under the new lock make the second attempt
duplicate nothing). A marker is therefore only needed to serve *other* requests.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.prompts import DEFAULT_PROMPTS, PromptSet
from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse
from om_core.flush.runtime import FlushResult, ObservationalMemoryRuntime, WorkerConfig
from om_workers.coordination import coalesce, keys, timing
from om_workers.coordination.coalesce import FlushTicket, drop_marker, release_and_republish
from om_workers.coordination.connection import translate_errors
from om_workers.coordination.locks import SessionLock
from om_workers.errors import (
    FlushJobNotFoundError,
    InvalidJobStateError,
    LockLostError,
    OMWorkersError,
    StaleEpochError,
)
from om_workers.metrics import METRICS
from om_workers.store import SqlMemoryUnitOfWork, SqlStore
from om_workers.store.records import FlushJob, JobFinish, StartedJob

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "failed", "skipped", "busy", "poison", "unknown", "unavailable"]
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
    observer/reflector instructions (their version is recorded on each job row).
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


@dataclass(frozen=True)
class FlushOutcome:
    """What :func:`run_flush_job` did with one message.

    ``job_id`` is the message's job; ``ran_job_id`` the job whose row it ran or finished (another
    job's when it served that job's request, ``None`` when it touched no row); ``error`` the
    redacted reason of a failed job (also stored on its row); ``reason`` why a job that
    recorded nothing did nothing.
    """

    outcome: Outcome
    job_id: str
    ran_job_id: str | None = None
    error: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None


def request_flush(
    store: SqlStore,
    client: redis.Redis,
    tenant_id: str,
    session_id: str,
    *,
    publish: PublishJob,
    force: bool = False,
    full_reflection_rebuild: bool = False,
) -> FlushTicket:
    """Accept a flush request: the job id that will serve it, publishing a new job if needed.

    While a job is pending its id is returned at once and nothing is written (a coalesced
    request has no job of its own, so a row for it would only be noise). Otherwise a job row
    is recorded first (a marker never names a job the store does not know), then the
    marker is set and the job published; a request that loses that race to a concurrent one
    coalesces after all, and its fresh row is finished ``skipped`` ("coalesced into ...") so no
    ``queued`` row is left that no message will ever run. When ``publish`` raises, the row is
    finished ``failed`` and the exception propagates. Raises what
    :meth:`SqlStore.create_job` and :func:`om_workers.coordination.coalesce.enqueue` raise.
    """
    with translate_errors("reading the pending flush"):
        pending = client.get(keys.pending_key(tenant_id, session_id))
    if pending is not None and _still_queued(store, client, tenant_id, session_id, str(pending)):
        METRICS.coalesced.inc()
        _widen(store, tenant_id, str(pending), force, full_reflection_rebuild)
        return FlushTicket(str(pending), coalesced=True)
    job = store.create_job(
        tenant_id, session_id, force=force, full_reflection_rebuild=full_reflection_rebuild
    )

    def send(job_id: str) -> None:
        publish(tenant_id, session_id, job_id)

    try:
        request = coalesce.enqueue(client, tenant_id, session_id, job.id, send)
        if request.coalesced and not _still_queued(
            store, client, tenant_id, session_id, request.job_id
        ):
            # A stale marker won the race and is gone now: ours takes its place.
            request = coalesce.enqueue(client, tenant_id, session_id, job.id, send)
    except Exception as exc:
        store.finish_job(tenant_id, job.id, "failed", error=f"not published: {exc}")
        raise
    if request.coalesced:
        METRICS.coalesced.inc()
        # Nobody else knows this row's id, so nothing can have finished it meanwhile.
        store.finish_job(tenant_id, job.id, "skipped", error=f"coalesced into {request.job_id}")
        _widen(store, tenant_id, request.job_id, force, full_reflection_rebuild)
    return request


def _still_queued(
    store: SqlStore, client: redis.Redis, tenant_id: str, session_id: str, job_id: str
) -> bool:
    """True when the pending job has not read the session yet, so it serves a new request.

    A marker can outlive its job's read (the reconciler re-marks a queued job whose marker it
    found gone while the job was just starting, say): such a marker would swallow every later
    request, so it is dropped here and False returned.
    """
    try:
        queued = store.get_job(tenant_id, job_id).state == "queued"
    except FlushJobNotFoundError:
        queued = False
    if not queued:
        drop_marker(client, tenant_id, session_id, job_id)
    return queued


def _widen(
    store: SqlStore, tenant_id: str, job_id: str, force: bool, full_reflection_rebuild: bool
) -> None:
    """Give the pending job this request's options (its row is read when the job starts).

    A job that already started has claimed its marker, so a request only coalesces into one
    that is still queued; should it have started in between, it read the session after this
    request was made, and the options miss one flush at most.
    """
    if not store.widen_job_options(
        tenant_id, job_id, force=force, full_reflection_rebuild=full_reflection_rebuild
    ):
        log.info("flush %s started before a coalesced request widened its options", job_id)


def run_flush_job(
    deps: FlushDeps, tenant_id: str, session_id: str, job_id: str, force: bool = False
) -> FlushOutcome:
    """Run the flush job ``job_id`` of one session (see the module docstring).

    ``force`` runs the job even when its job row is missing its ``pending`` marker and was
    never started; without it such a job runs too (a lost marker must not lose work), so
    ``force`` only matters for the log. Never raises for store, Redis, provider or fencing
    failures: each is recorded on the job row where possible and returned as the outcome
    (``unavailable`` when Redis or the database could not be reached before the job started,
    so the caller may retry the message). Raises only ``BaseException`` subclasses that are not
    ``Exception`` (interpreter shutdown, Celery's hard time limit). Every outcome is counted in
    :data:`om_workers.metrics.METRICS`, with the wall time of jobs that ran the pipeline.
    """
    started = time.monotonic()
    outcome = _guarded(deps, tenant_id, session_id, job_id, force)
    ran = outcome.outcome in ("succeeded", "failed")
    METRICS.observe_job(outcome.outcome, time.monotonic() - started if ran else None)
    return outcome


def _guarded(
    deps: FlushDeps, tenant_id: str, session_id: str, job_id: str, force: bool
) -> FlushOutcome:
    try:
        return _run(deps, tenant_id, session_id, job_id, force)
    except OMWorkersError as exc:
        log.warning("flush job %s of %s/%s could not start: %s", job_id, tenant_id, session_id, exc)
        return FlushOutcome("unavailable", job_id, error=str(exc))
    except Exception as exc:  # never let one job take the worker down
        log.exception("flush job %s of %s/%s crashed", job_id, tenant_id, session_id)
        return FlushOutcome("unavailable", job_id, error=f"{type(exc).__name__}: {exc}")


def _run(
    deps: FlushDeps, tenant_id: str, session_id: str, job_id: str, force: bool
) -> FlushOutcome:
    lock = SessionLock(
        deps.redis, tenant_id, session_id, ttl_s=deps.lock_ttl_s, on_lost=METRICS.lock_lost.inc
    )
    if not lock.acquire(claim_pending=True):
        # Drop the message and leave ``pending`` alone: the holder's release publishes it.
        # Never re-set a claimed marker here: later requests would coalesce onto a job that
        # already read the session. On Redis a message redelivered after its worker crashed
        # cannot meet that crashed worker's lock: the visibility timeout (counted from
        # delivery) exceeds the lock TTL, so the lock expired first (RabbitMQ redelivers at
        # once: the task retries a busy job still running until the lock expires); if another
        # job holds the lock, that job reads the whole session after this job's request and
        # serves it.
        return FlushOutcome("busy", job_id, job_id)
    try:
        return _run_locked(deps, lock, tenant_id, session_id, job_id, force)
    finally:
        publish = _bound_publish(deps, tenant_id, session_id)
        try:
            release_and_republish(lock, publish)
        except Exception:  # the lock expires by itself; the reconciler re-publishes pending
            log.exception("releasing the lock of %s/%s failed", tenant_id, session_id)


def _run_locked(
    deps: FlushDeps, lock: SessionLock, tenant_id: str, session_id: str, job_id: str, force: bool
) -> FlushOutcome:
    claimed = lock.claimed_job_id
    # Starting the job is its one read of its row: a copy of this message that finished
    # it already (or a message naming no row) cannot start it.
    started = _start(deps, tenant_id, job_id)
    if isinstance(started, FlushOutcome):
        if claimed is not None and claimed != job_id:
            # We consumed another job's marker: serve it now instead of dropping its request.
            return _run_other(deps, lock, tenant_id, session_id, claimed)
        if started.outcome == "skipped":
            # A marker still naming this finished job would swallow later requests.
            drop_marker(deps.redis, tenant_id, session_id, job_id)
        return started
    if claimed is None and started.job.attempts == 1:
        log.info("flush %s runs without a pending marker (force=%s)", job_id, force)
    if claimed is not None and claimed != job_id:
        # That request was made before this job reads the session: this job serves it,
        # options included.
        METRICS.coalesced.inc()
        started = dataclasses.replace(started, job=_serving(deps, started.job, claimed))
    return _execute(deps, lock, started)


def _start(deps: FlushDeps, tenant_id: str, job_id: str) -> StartedJob | FlushOutcome:
    """Start the job (its row as it now is, the session's new epoch, which fences out any
    earlier flush of the session, and the session's view), or the outcome of a job that
    cannot run."""
    try:
        started = deps.store.start_job(tenant_id, job_id)
    except FlushJobNotFoundError:
        # A message naming no job row was never accepted (enqueue writes the row first).
        return FlushOutcome("unknown", job_id)
    except InvalidJobStateError:
        return FlushOutcome("skipped", job_id, job_id)
    return started


def _serving(deps: FlushDeps, job: FlushJob, other_id: str) -> FlushJob:
    """``job`` with the options of the queued job ``other_id``, which it now serves."""
    try:
        other = deps.store.finish_job(
            job.tenant_id, other_id, "skipped", error=f"served by job {job.id}"
        )
    except (InvalidJobStateError, FlushJobNotFoundError) as exc:
        log.warning("flush job %s not finished as skipped: %s", other_id, exc)
        return job
    return dataclasses.replace(
        job,
        force=job.force or other.force,
        full_reflection_rebuild=job.full_reflection_rebuild or other.full_reflection_rebuild,
    )


def _run_other(
    deps: FlushDeps, lock: SessionLock, tenant_id: str, session_id: str, other_id: str
) -> FlushOutcome:
    other = _start(deps, tenant_id, other_id)
    if isinstance(other, FlushOutcome):
        return other
    return _execute(deps, lock, other)


def _execute(deps: FlushDeps, lock: SessionLock, started: StartedJob) -> FlushOutcome:
    job = started.job
    tenant_id, session_id, job_id = job.tenant_id, job.session_id, job.id
    # The job row counts attempts to run, not messages: duplicates dropped at a busy lock or
    # skipped as finished are harmless, while a message that kills its worker mid-flush comes
    # back here. Durable, so a Redis restart does not reset it.
    if job.attempts > 1:
        METRICS.redeliveries.inc()
    if timing.redelivery_exhausted(job.attempts, max_deliveries=deps.max_deliveries):
        poison = f"poison message: attempted {job.attempts} times (limit {deps.max_deliveries})"
        stored = _finish_quietly(deps, tenant_id, job_id, "failed", error=poison)
        return FlushOutcome("poison", job_id, job_id, stored)
    lock.start_heartbeat()
    # The last records of the flush commit with the job's finish (one transaction less); any
    # earlier ones are written before the next provider call starts.
    memory = SqlMemoryUnitOfWork(
        deps.store,
        tenant_id,
        session_id,
        epoch=started.epoch,
        before_write=lock.check,
        view=started.view,
        hold_last=True,
    )
    models = deps.worker_models
    try:
        provider = _WritingFirst(deps.provider(), memory.write_held)
        runtime = ObservationalMemoryRuntime(
            memory,
            settings=dict(deps.memory_settings),
            # Reflector and dropper fall back to the observer's provider (one adapter).
            observation=WorkerConfig(provider=provider, model=models.get("observer")),
            reflection=WorkerConfig(model=models.get("reflector")),
            dropper=WorkerConfig(model=models.get("dropper")),
            session_model=deps.model,
            secrets=deps.secrets,
            prompts=deps.prompts,
        )
        result = runtime.flush(full_reflection_rebuild=job.full_reflection_rebuild, force=job.force)
    except Exception as exc:  # store unreachable mid-flush, bad settings, provider factory ...
        crashed = f"{type(exc).__name__}: {exc}"
        stored = _finish_quietly(deps, tenant_id, job_id, "failed", error=crashed)
        return FlushOutcome("failed", job_id, job_id, stored)
    counts = _counts(result)
    version = runtime.prompt_version
    state: Literal["succeeded", "failed"] = "failed" if result.error else "succeeded"
    if memory.fenced is None:
        finish = JobFinish(job_id, state, counts, result.error, deps.secrets, result.note, version)
        try:
            job_row = memory.finish(finish)
        except (LockLostError, StaleEpochError):
            pass  # recorded in memory.fenced: the job is finished as fenced out below
        except Exception as exc:  # the held records could not be written
            lost = f"{type(exc).__name__}: {exc}"
            stored = _finish_quietly(
                deps, tenant_id, job_id, "failed", counts=counts, error=lost, version=version
            )
            return FlushOutcome("failed", job_id, job_id, stored, counts)
        else:
            if job_row is None:
                log.warning("flush job %s was finished meanwhile; kept its state", job_id)
                return FlushOutcome(state, job_id, job_id, result.error, counts, result.note)
            return FlushOutcome(state, job_id, job_id, job_row.error, counts, job_row.reason)
    if isinstance(memory.fenced, StaleEpochError):
        METRICS.fence_rejections.inc()
    error = f"fenced out before writing: {memory.fenced}"
    stored = _finish_quietly(
        deps, tenant_id, job_id, "failed", counts=counts, error=error, version=version
    )
    return FlushOutcome("failed", job_id, job_id, stored, counts)


class _WritingFirst:
    """The flush's provider, writing the records held back before each call, so a step's
    records are durable before the next step's model work starts."""

    def __init__(self, provider: Provider, write_held: Callable[[], None]) -> None:
        self._provider = provider
        self._write_held = write_held

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Write what is held (fencing errors propagate and fail the step), then call."""
        self._write_held()
        return self._provider.generate(request)


def _counts(result: FlushResult) -> dict[str, int]:
    return {
        "appended": len(result.appended_entry_ids),
        "observations": len(result.observation_ids),
        "reflections": len(result.reflection_ids),
        "dropped": len(result.dropped_observation_ids),
    }


def _finish_quietly(
    deps: FlushDeps,
    tenant_id: str,
    job_id: str,
    state: Literal["succeeded", "failed", "skipped"],
    *,
    counts: Mapping[str, int] | None = None,
    error: str | None = None,
    version: str | None = None,
) -> str | None:
    """Finish the job; a job finished meanwhile (the reconciler swept it) keeps its state.
    ``version`` is the prompt version of a job that got as far as the pipeline. Returns the
    stored (redacted) error."""
    try:
        return deps.store.finish_job(
            tenant_id,
            job_id,
            state,
            counts=counts,
            error=error,
            secrets=deps.secrets,
            prompt_version=version,
        ).error
    except (InvalidJobStateError, FlushJobNotFoundError) as exc:
        log.warning("flush job %s not finished as %s: %s", job_id, state, exc)
        return error


def _bound_publish(deps: FlushDeps, tenant_id: str, session_id: str) -> Callable[[str], None]:
    def publish(job_id: str) -> None:
        deps.publish(tenant_id, session_id, job_id)

    return publish


__all__ = [
    "FlushDeps",
    "FlushOutcome",
    "PublishJob",
    "request_flush",
    "run_flush_job",
]
