"""Fair queueing of flush jobs across tenants, in Redis.

The broker's queue is first in, first out: were every requested flush published at once, a
tenant asking for ten thousand would put every other tenant's next flush behind all of them.
So a flush job first enters the **fair queue**, and only ``capacity`` jobs (the live worker
pool's task slots, :mod:`om_workers.coordination.pool`) are *admitted* to the broker or running
at once. Each freed place goes to the tenant served least lately (its admissions, decaying by
half every ``half_life_s``): the rule of :class:`om_core.policy.fairness.FairQueueModel`, which
``lua/fair_queue.lua`` runs as one atomic step.

The steps, each one script call that returns the jobs it admitted (the caller publishes them):

- :meth:`FairQueue.add` when a job is published: it waits its turn (a job already waiting
  keeps its place; one in flight is reported as a duplicate, whose message the caller sends
  again: it may have been dropped at a busy lock);
- :meth:`FairQueue.start` when a worker takes its message, :meth:`FairQueue.done` when the
  message is finished with, whatever the outcome (not when Celery retries it);
- :meth:`FairQueue.give_back` when the broker refused an admitted job;
- :meth:`FairQueue.sweep` (the reconciler): forgets jobs in flight for longer than a flush
  job can last (their message was lost) and admits what the capacity allows.

Lost fair-queue state costs fairness and latency, never work: a job the queue forgot still has
its ``pending`` marker and its ``queued`` row, which the reconciler publishes again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Literal, cast

import redis
from opentelemetry.trace import SpanKind

from om_core.policy.fairness import DEFAULT_HALF_LIFE_S, QueuedJob, TenantLoad
from om_workers.coordination import keys, timing
from om_workers.coordination.batch import Reply, ScriptCall
from om_workers.coordination.connection import translate_errors
from om_workers.errors import CoordinationError
from om_workers.telemetry import tracing

log = logging.getLogger(__name__)

Step = Literal["add", "start", "done", "return", "sweep", "fill", "reap", "departed"]

Send = Callable[[str, str, str], None]
"""Publishes ``om.flush`` for ``(tenant_id, session_id, job_id)``; raises when the broker
refuses it."""


class FairQueue:
    """The fair queue in Redis. ``capacity`` is the number of jobs admitted or running at once
    (0: the live worker pool's task slots, at least 1); ``half_life_s`` how fast a tenant's
    usage fades; ``clock`` returns the time in ms (default: Redis's own clock, so every
    process shares one; tests pass theirs to compare with the pure model).

    Raises ``ValueError`` for a negative capacity or a half-life under a millisecond."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        capacity: int = 0,
        half_life_s: float = DEFAULT_HALF_LIFE_S,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if half_life_s < 0.001:
            raise ValueError(f"half_life_s must be at least 0.001, got {half_life_s}")
        self._client = client
        self._script = client.register_script(keys.FAIR_QUEUE)
        self._capacity = capacity
        self._half_life_ms = round(half_life_s * 1000)
        self._clock = clock

    def add(self, tenant_id: str, session_id: str, job_id: str) -> tuple[bool, list[QueuedJob]]:
        """Queue a job; returns whether it was already in flight and the jobs admitted now
        (this one, or others first). Raises
        :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
        return self._step("add", job_id, tenant_id, session_id)

    def start(self, job_id: str, worker_id: str = "", liveness_ttl_s: float = 0.0) -> None:
        """Count the admitted job as running in the worker process ``worker_id`` (its pool
        advertisement's id): should that advertisement expire (the process died), the job's
        place is freed. With ``liveness_ttl_s`` (seconds), a process outside the pool (a
        prefork child) gets its liveness key now if it has none, so :meth:`reap` can tell when
        it dies."""
        self._step("start", job_id, worker_id=worker_id, liveness_ttl_s=liveness_ttl_s)

    def done(self, job_id: str) -> list[QueuedJob]:
        """Free the job's place; returns the jobs admitted in its stead."""
        return self._step("done", job_id)[1]

    def give_back(self, job: QueuedJob) -> None:
        """Put an admitted job the broker refused back at the head of its tenant's line."""
        self._step("return", job.job_id, job.tenant_id)

    def sweep(self, older_than_s: float) -> list[QueuedJob]:
        """Forget jobs in flight for longer than ``older_than_s`` seconds (their message was
        lost: no flush job lasts that long) and admit what the capacity allows."""
        return self._step("sweep", sweep_ms=round(older_than_s * 1000))[1]

    def fill(self) -> list[QueuedJob]:
        """Admit what the capacity allows (the pool may have grown)."""
        return self._step("fill")[1]

    def reap(self) -> list[QueuedJob]:
        """Free the places of jobs running in processes outside the pool whose liveness key
        is gone (a killed prefork child; the parent's slots stay advertised), then admit what
        the capacity allows. One pass over the jobs in flight."""
        return self._step("reap", reap=True)[1]

    def departed(self) -> list[QueuedJob]:
        """Once after a worker's advertisement was found expired (it died): every job admitted
        but not started, whose message the dead worker may have held (on the Redis broker it
        would come back only after the visibility timeout); otherwise nothing."""
        return self._step("departed")[1]

    def remember_trace(self, job_id: str, carrier: dict[str, str]) -> None:
        """Keep the W3C trace context of the request whose job now waits (for
        :data:`~om_workers.coordination.keys.TRACE_CONTEXT_TTL_S`). Telemetry only: a Redis
        failure is ignored."""
        traceparent = carrier.get("traceparent")
        if traceparent:
            with contextlib.suppress(redis.RedisError):
                key = keys.trace_context_key(job_id)
                self._client.set(key, traceparent, ex=keys.TRACE_CONTEXT_TTL_S)

    def recall_trace(self, job_id: str) -> dict[str, str]:
        """The trace context :meth:`remember_trace` kept for the job, once (it is deleted);
        empty when none was kept or Redis cannot be reached."""
        with contextlib.suppress(redis.RedisError):
            kept = self._client.getdel(keys.trace_context_key(job_id))
            if kept:
                text = kept.decode() if isinstance(kept, bytes) else str(kept)
                return {"traceparent": text}
        return {}

    def load(self) -> tuple[int, list[TenantLoad]]:
        """The backlog (every job the queue holds, waiting, admitted or running: what KEDA
        scales on) and each tenant with jobs in the queue or requests refused by a rate limit:
        its jobs waiting, queued in the broker and running, and its throttled requests (two
        round trips). Raises :class:`~om_workers.errors.RedisUnavailableError` when Redis
        cannot be reached."""
        with translate_errors("reading the fair queue's load"):
            pipe = self._client.pipeline(transaction=False)
            pipe.llen(keys.BACKLOG)
            for name in (keys.FAIR_LINES, keys.FAIR_IN_FLIGHT_COUNTS, keys.FAIR_RUNNING_COUNTS):
                pipe.hgetall(name)
            pipe.hgetall(keys.THROTTLED)
            backlog, *replies = pipe.execute()
            lines, in_flight, running, throttled = (cast(dict[str, str], r) for r in replies)
            pipe = self._client.pipeline(transaction=False)
            for line in lines.values():
                pipe.llen(line)
            waiting = dict(zip(lines, (int(n) for n in pipe.execute()), strict=True))
        tenants = sorted({*lines, *in_flight, *throttled})
        return int(backlog), [
            TenantLoad(
                tenant,
                waiting=waiting.get(tenant, 0),
                queued=max(0, int(in_flight.get(tenant, 0)) - int(running.get(tenant, 0))),
                running=int(running.get(tenant, 0)),
                throttled=int(throttled.get(tenant, 0)),
            )
            for tenant in tenants
        ]

    def _step(
        self,
        step: Step,
        job_id: str = "",
        tenant_id: str | None = None,
        session_id: str = "",
        *,
        sweep_ms: int = 0,
        worker_id: str = "",
        liveness_ttl_s: float = 0.0,
        reap: bool = False,
    ) -> tuple[bool, list[QueuedJob]]:
        args = self._args(
            step,
            job_id,
            tenant_id,
            session_id,
            sweep_ms=sweep_ms,
            worker_id=worker_id,
            liveness_ttl_s=liveness_ttl_s,
            reap=reap,
        )
        with translate_errors("scheduling a flush"):
            reply = self._script(keys=keys.fair_queue_keys(tenant_id), args=args)
        return _parse(reply)

    def call(
        self,
        step: Literal["start", "done"],
        job_id: str,
        on_reply: Callable[[Reply], None],
        *,
        worker_id: str = "",
        liveness_ttl_s: float = 0.0,
    ) -> ScriptCall:
        """The :meth:`start` or :meth:`done` step of ``job_id`` as a call to send along with
        another script (:func:`~om_workers.coordination.batch.run_together`); ``on_reply``
        gets its reply (read it with :func:`admitted_of`) or its error."""
        args = self._args(step, job_id, worker_id=worker_id, liveness_ttl_s=liveness_ttl_s)
        return ScriptCall(self._script, keys.fair_queue_keys(), args, on_reply)

    def _args(
        self,
        step: Step,
        job_id: str = "",
        tenant_id: str | None = None,
        session_id: str = "",
        *,
        sweep_ms: int = 0,
        worker_id: str = "",
        liveness_ttl_s: float = 0.0,
        reap: bool = False,
    ) -> list[str | int]:
        now = "" if self._clock is None else self._clock()
        watch_liveness = reap or liveness_ttl_s > 0
        return [
            step,
            job_id,
            tenant_id or "",
            session_id,
            self._capacity,
            sweep_ms,
            worker_id,
            self._half_life_ms,
            now,
            keys.WORKER_PREFIX if watch_liveness else "",
            timing.ttl_ms(liveness_ttl_s) if liveness_ttl_s > 0 else 0,
        ]


def admitted_of(reply: Reply) -> list[QueuedJob]:
    """The jobs a fair-queue step's reply admitted. Raises the
    :class:`~om_workers.errors.CoordinationError` of a step that failed."""
    return _parse(reply)[1]


def _parse(reply: Reply) -> tuple[bool, list[QueuedJob]]:
    if isinstance(reply, redis.RedisError):
        with translate_errors("scheduling a flush"):
            raise reply
    values = cast(list[object], reply)
    parts = [str(part) for part in values[1:]]
    admitted = [
        QueuedJob(tenant, session, job)
        for tenant, session, job in zip(parts[::3], parts[1::3], parts[2::3], strict=True)
    ]
    return int(cast(int, values[0])) == 1, admitted


def send_admitted(
    admitted: Sequence[QueuedJob], send: Send, queue: FairQueue, own_job_id: str = ""
) -> None:
    """Publish every admitted job; one the broker refuses goes back to the head of its
    tenant's line (the next finished job or reconcile pass admits it again). Raises the first
    broker error after trying the rest. Only ``own_job_id`` (the job of the caller's request)
    is published inside the caller's trace; another job joins the trace of the request that
    queued it (:meth:`FairQueue.recall_trace`), or starts its own."""
    failure: Exception | None = None
    for job in admitted:
        try:
            with _trace_of(job.job_id, own_job_id, queue):
                send(job.tenant_id, job.session_id, job.job_id)
        except Exception as exc:
            failure = failure or exc
            queue.give_back(job)
    if failure is not None:
        raise failure


def _trace_of(job_id: str, own_job_id: str, queue: FairQueue) -> AbstractContextManager[None]:
    """The trace a job's publish belongs to (see :func:`send_admitted`)."""
    if job_id == own_job_id or not tracing.enabled():
        return nullcontext()
    carrier = queue.recall_trace(job_id)
    if not carrier:
        return tracing.detached()
    return tracing.continued(
        carrier, "fair_queue admitted", kind=SpanKind.INTERNAL, attributes={"om.job_id": job_id}
    )


class FairPublisher:
    """Publishes flush jobs through the fair queue: what the queue admits is sent with
    ``send`` (the broker publish), the rest waits its turn. Called like ``send``, it is the
    :data:`~om_workers.jobs.deps.PublishJob` of every publisher of a process (API, worker
    release, reconciler); the worker reports each message's start and finish."""

    def __init__(self, queue: FairQueue, send: Send) -> None:
        self.queue = queue
        self._send = send

    def __call__(self, tenant_id: str, session_id: str, job_id: str) -> None:
        """Queue the job and send what the queue admits; a job already in flight is sent
        again (its message may have been dropped at a busy lock; a duplicate is harmless).
        Raises :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be
        reached, and the broker's error when a send fails (that job waits again)."""
        with tracing.span("fair_queue add", attributes={"om.job_id": job_id}):
            duplicate, admitted = self.queue.add(tenant_id, session_id, job_id)
            tracing.set_attributes({"om.fair_queue.admitted": len(admitted)})
            waits = not duplicate and all(job.job_id != job_id for job in admitted)
            if waits and tracing.enabled():
                self.queue.remember_trace(job_id, tracing.inject_headers())
        if duplicate:
            self._send(tenant_id, session_id, job_id)
        send_admitted(admitted, self._send, self.queue, own_job_id=job_id)

    def started(self, job_id: str, worker_id: str, liveness_ttl_s: float = 0.0) -> None:
        """The worker process ``worker_id`` took the job's message (see :meth:`FairQueue.start`
        for ``liveness_ttl_s``). Raises like :meth:`FairQueue.start`."""
        self.queue.start(job_id, worker_id, liveness_ttl_s)

    def reap(self) -> None:
        """Free the places of dead processes outside the pool and send what the capacity then
        admits (:meth:`FairQueue.reap`), and, once a worker was found dead, send again the
        jobs admitted but not started (:meth:`FairQueue.departed`; a copy of a message that
        did arrive is skipped by its job's state). Raises like :meth:`__call__`."""
        send_admitted(self.queue.reap(), self._send, self.queue)
        failure: Exception | None = None
        for job in self.queue.departed():
            try:
                self._send(job.tenant_id, job.session_id, job.job_id)
            except Exception as exc:  # the next departure, or the reconciler, sends it
                failure = failure or exc
        if failure is not None:
            raise failure

    def finished(self, job_id: str) -> None:
        """The job's message is finished with: send the jobs admitted in its place. Raises
        like :meth:`__call__`."""
        send_admitted(self.queue.done(job_id), self._send, self.queue)

    def send_admitted(self, admitted: Sequence[QueuedJob]) -> None:
        """Send jobs a step admitted (:func:`send_admitted`). Raises like :meth:`__call__`."""
        send_admitted(admitted, self._send, self.queue)

    def place(self, job_id: str, worker_id: str, liveness_ttl_s: float = 0.0) -> FairPlace:
        """The place of the job whose message the worker process ``worker_id`` took (see
        :meth:`FairQueue.start` for ``liveness_ttl_s``)."""
        return FairPlace(self, job_id, worker_id, liveness_ttl_s)

    def fill(self) -> None:
        """Send what the capacity admits now (a worker joined the pool). Raises like
        :meth:`__call__`."""
        send_admitted(self.queue.fill(), self._send, self.queue)

    def sweep(self, older_than_s: float) -> None:
        """Forget jobs in flight longer than ``older_than_s`` seconds and send what the
        capacity then admits (the reconciler, every pass). Raises like :meth:`__call__`."""
        send_admitted(self.queue.sweep(older_than_s), self._send, self.queue)


class FairPlace:
    """One ``om.flush`` message's place in the fair queue, marked running and freed in the
    session lock's own round trips: :meth:`start` rides along with the lock acquire,
    :meth:`done` with its release (see :mod:`om_workers.coordination.batch`).

    A failed ``start`` costs fairness, never the job, so it is logged, not raised (the
    reconciler's sweep frees a place left counted). Once :meth:`done` reached Redis,
    :attr:`freed` is true and :attr:`admitted` holds the jobs admitted in its stead, which the
    worker publishes with :meth:`send_admitted`; until then the place is the worker's to free
    (:meth:`FairPublisher.finished`).
    """

    def __init__(
        self, publisher: FairPublisher, job_id: str, worker_id: str, liveness_ttl_s: float
    ) -> None:
        self.job_id = job_id
        self.freed = False
        self.admitted: list[QueuedJob] = []
        self.publisher = publisher
        self._worker_id = worker_id
        self._liveness_ttl_s = liveness_ttl_s

    def start(self) -> ScriptCall:
        """The step that counts the job as running in this worker process."""
        return self.publisher.queue.call(
            "start",
            self.job_id,
            self._started,
            worker_id=self._worker_id,
            liveness_ttl_s=self._liveness_ttl_s,
        )

    def done(self) -> ScriptCall:
        """The step that frees the job's place (only when its message is finished with, not
        when it will be retried)."""
        return self.publisher.queue.call("done", self.job_id, self._done)

    def send_admitted(self) -> None:
        """Publish the jobs :meth:`done` admitted. Raises the first broker error after trying
        the rest (those refused wait in their line again)."""
        admitted, self.admitted = self.admitted, []
        self.publisher.send_admitted(admitted)

    def _started(self, reply: Reply) -> None:
        if isinstance(reply, Exception):
            log.warning("marking flush %s running failed: %s", self.job_id, reply)

    def _done(self, reply: Reply) -> None:
        try:
            self.admitted = admitted_of(reply)
        except CoordinationError as exc:
            log.warning("freeing the fair-queue place of flush %s failed: %s", self.job_id, exc)
            return
        self.freed = True
