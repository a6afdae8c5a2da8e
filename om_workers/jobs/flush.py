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
   that was requested meanwhile; a job fenced out because its lock was lost (a Redis
   restart) requests its session again.

Duplicates are told apart by the durable job row, not by the ``pending`` marker: a message
redelivered after its worker crashed finds its marker already claimed, yet its job never
finished and must run again (coverage cursors read under the new lock make the second attempt
duplicate nothing). A marker is therefore only needed to serve *other* requests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from om_core.flush.provider import Provider, ProviderRequest, ProviderResponse
from om_core.flush.runtime import FlushResult, ObservationalMemoryRuntime, WorkerConfig
from om_workers.coordination import timing
from om_workers.coordination.coalesce import drop_marker, release_and_republish
from om_workers.coordination.deferred import DEFERRED
from om_workers.coordination.fairness import FairPlace
from om_workers.coordination.locks import SessionLock
from om_workers.errors import (
    FlushJobNotFoundError,
    InvalidJobStateError,
    OMWorkersError,
)
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.metering import UsageMeter
from om_workers.jobs.requests import request_flush
from om_workers.jobs.running import Finished, RunningJob
from om_workers.metrics import METRICS
from om_workers.store.records import FlushJob, StartedJob
from om_workers.telemetry import tracing
from om_workers.telemetry.genai import TracedProvider

log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "failed", "skipped", "busy", "poison", "unknown", "unavailable"]


@dataclass(frozen=True)
class FlushOutcome:
    """What :func:`run_flush_job` did with one message.

    ``job_id`` is the message's job; ``ran_job_id`` the job whose row it ran or finished (another
    job's when it served that job's request, ``None`` when it touched no row); ``error`` the
    redacted reason of a failed job (also stored on its row); ``reason`` why a job that
    recorded nothing did nothing; ``deliveries`` the webhook deliveries its finish wrote, to
    publish (``None``: not known, read them back by the job's id); ``lost_lock`` the job as it
    ran when it was fenced out because its session lock was lost (its session is requested
    again with its options once the lock is released), else ``None``.
    """

    outcome: Outcome
    job_id: str
    ran_job_id: str | None = None
    error: str | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    deliveries: tuple[str, ...] | None = None
    lost_lock: FlushJob | None = None


def run_flush_job(
    deps: FlushDeps,
    tenant_id: str,
    session_id: str,
    job_id: str,
    force: bool = False,
    *,
    place: FairPlace | None = None,
) -> FlushOutcome:
    """Run the flush job ``job_id`` of one session (see the module docstring).

    ``place`` is the message's place in the fair queue: marked running in the lock acquire's
    round trip, and freed in the release's when the job ended (not when it could not start,
    which the caller may retry); :attr:`FairPlace.freed` tells whether it was.

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
    outcome = _guarded(deps, tenant_id, session_id, job_id, force, place)
    ran = outcome.outcome in ("succeeded", "failed")
    METRICS.observe_job(outcome.outcome, time.monotonic() - started if ran else None)
    return outcome


def _guarded(
    deps: FlushDeps,
    tenant_id: str,
    session_id: str,
    job_id: str,
    force: bool,
    place: FairPlace | None,
) -> FlushOutcome:
    try:
        return _run(deps, tenant_id, session_id, job_id, force, place)
    except OMWorkersError as exc:
        log.warning("flush job %s of %s/%s could not start: %s", job_id, tenant_id, session_id, exc)
        return FlushOutcome("unavailable", job_id, error=str(exc))
    except Exception as exc:  # never let one job take the worker down
        log.exception("flush job %s of %s/%s crashed", job_id, tenant_id, session_id)
        return FlushOutcome("unavailable", job_id, error=f"{type(exc).__name__}: {exc}")


def _run(
    deps: FlushDeps,
    tenant_id: str,
    session_id: str,
    job_id: str,
    force: bool,
    place: FairPlace | None,
) -> FlushOutcome:
    lock = SessionLock(
        deps.redis, tenant_id, session_id, ttl_s=deps.lock_ttl_s, on_lost=METRICS.lock_lost.inc
    )
    with tracing.span("session lock acquire", attributes={"om.job_id": job_id}):
        acquired = lock.acquire(claim_pending=True, before=[] if place is None else [place.start()])
        tracing.set_attributes({"om.lock.acquired": acquired})
    if not acquired:
        # Drop the message and leave ``pending`` alone: the holder's release publishes it.
        # Never re-set a claimed marker here: later requests would coalesce onto a job that
        # already read the session. On Redis a message redelivered after its worker crashed
        # cannot meet that crashed worker's lock: the visibility timeout (counted from
        # delivery) exceeds the lock TTL, so the lock expired first (RabbitMQ redelivers at
        # once: the task retries a busy job still running until the lock expires); if another
        # job holds the lock, that job reads the whole session after this job's request and
        # serves it.
        return FlushOutcome("busy", job_id, job_id)
    ended: FlushOutcome | None = None
    try:
        ended = _run_locked(deps, lock, tenant_id, session_id, job_id, force)
        return ended
    finally:
        publish = _bound_publish(deps, tenant_id, session_id)
        # A job that raised may be retried by the caller and keeps its place.
        after = [place.done()] if place is not None and ended is not None else []
        try:
            release_and_republish(lock, publish, after=after)
        except Exception as exc:
            # Redis or the broker is out: release and re-publish once it is back, so the
            # session does not wait for the lock TTL and the reconciler.
            what = f"releasing the lock of {tenant_id}/{session_id}"
            log.warning("%s failed (%s); retrying in the background", what, exc)
            DEFERRED.retry(
                what,
                lambda: release_and_republish(lock, publish),
                timing.redis_retry_deadline_s(deps.lock_ttl_s),
            )
        if ended is not None and ended.lost_lock is not None:
            _request_again(deps, ended.lost_lock)


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
    running = RunningJob(deps, started, before_write=lock.check)
    job = running.job
    # The job row counts attempts to run, not messages: duplicates dropped at a busy lock or
    # skipped as finished are harmless, while a message that kills its worker mid-flush comes
    # back here. Durable, so a Redis restart does not reset it.
    if job.attempts > 1:
        METRICS.redeliveries.inc()
    if timing.redelivery_exhausted(job.attempts, max_deliveries=deps.max_deliveries):
        poison = f"poison message: attempted {job.attempts} times (limit {deps.max_deliveries})"
        return _outcome(job.id, running.fail(poison), outcome="poison")
    lock.start_heartbeat()
    with deps.compute_lock or contextlib.nullcontext():
        try:
            runtime = _runtime(deps, running)
            result = runtime.flush(
                full_reflection_rebuild=job.full_reflection_rebuild, force=job.force
            )
        except Exception as exc:  # store unreachable mid-flush, bad settings, provider factory
            return _outcome(job.id, running.fail(f"{type(exc).__name__}: {exc}"))
        finished = running.finish(
            "failed" if result.error else "succeeded",
            counts=_counts(result),
            error=result.error,
            reason=result.note,
            version=runtime.prompt_version,
        )
    return _outcome(job.id, finished, lost_lock=job if running.lost_lock else None)


def _request_again(deps: FlushDeps, job: FlushJob) -> None:
    """Request the session of a job that lost its lock again, with the job's options, once
    the lock is released (so the release does not publish the new job a second time).

    Its work is not done, and nothing else asks for it soon: a Redis restart takes the lock's
    ``pending`` marker with it, so no release re-publishes a request, and the reconciler's
    backlog pass backs off from a session whose last jobs failed, as a session flushing
    through a few restarts in a row would look. A newer flush that fenced this one out reads
    the whole session itself, so only a lost lock asks again. When Redis or the broker is
    still out, the reconciler's passes find the session later.
    """
    try:
        request_flush(
            deps.store,
            deps.redis,
            job.tenant_id,
            job.session_id,
            publish=deps.publish,
            force=job.force,
            full_reflection_rebuild=job.full_reflection_rebuild,
        )
    except Exception as exc:  # the reconciler finds the session: never fail the job's finish
        log.warning(
            "flush job %s lost its lock; requesting its session again failed: %s", job.id, exc
        )


def _runtime(deps: FlushDeps, running: RunningJob) -> ObservationalMemoryRuntime:
    """The flush's runtime over the job's memory unit of work; records held back are written
    before each provider call, so no model work starts while a step's records are not durable."""
    models = deps.worker_models
    provider = _WritingFirst(
        TracedProvider(deps.provider()), running.memory.write_held, running.meter
    )
    return ObservationalMemoryRuntime(
        running.memory,
        settings=dict(deps.memory_settings),
        # Reflector and dropper fall back to the observer's provider (one adapter).
        observation=WorkerConfig(provider=provider, model=models.get("observer")),
        reflection=WorkerConfig(model=models.get("reflector")),
        dropper=WorkerConfig(model=models.get("dropper")),
        session_model=deps.model,
        secrets=deps.secrets,
        prompts=deps.prompts,
    )


def _outcome(
    job_id: str,
    finished: Finished,
    *,
    outcome: Outcome | None = None,
    lost_lock: FlushJob | None = None,
) -> FlushOutcome:
    return FlushOutcome(
        outcome or finished.state,
        job_id,
        job_id,
        finished.error,
        finished.counts,
        finished.reason,
        finished.deliveries,
        lost_lock,
    )


class _WritingFirst:
    """The flush's provider, writing the records held back before each call, so a step's
    records are durable before the next step's model work starts, and counting each
    answer's reported usage on the job's meter."""

    def __init__(
        self, provider: Provider, write_held: Callable[[], None], meter: UsageMeter
    ) -> None:
        self._provider = provider
        self._write_held = write_held
        self._meter = meter

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        """Write what is held (fencing errors propagate and fail the step), then call."""
        self._write_held()
        response = self._provider.generate(request)
        self._meter.count(request.model, response.usage)
        return response


def _counts(result: FlushResult) -> dict[str, int]:
    return {
        "appended": len(result.appended_entry_ids),
        "observations": len(result.observation_ids),
        "reflections": len(result.reflection_ids),
        "dropped": len(result.dropped_observation_ids),
    }


def _bound_publish(deps: FlushDeps, tenant_id: str, session_id: str) -> Callable[[str], None]:
    def publish(job_id: str) -> None:
        deps.publish(tenant_id, session_id, job_id)

    return publish


__all__ = ["FlushOutcome", "run_flush_job"]
