"""Fair queueing of flush jobs across tenants, the pure parts: who goes next, and what the
operators' metrics name.

A flush job is **waiting** (held back in the fair queue), **admitted** (sent to the broker,
queued there) or **running** (a worker took its message). At most ``capacity`` jobs are
admitted or running at once (the task slots of the live worker pool), so the broker's queue
stays short; whenever a place frees, the next job admitted is the oldest waiting job of the
tenant with the fewest jobs admitted or running, ties going to the tenant served least
recently. A tenant alone fills every slot; a tenant arriving behind a backlog of another's
gets the next free slots until both hold the same share (max-min fairness), then they
alternate.

:class:`FairQueueModel` is the reference of that rule, step by step. The scheduler itself
runs as one Lua script in Redis (``om_workers/coordination/lua/fair_queue.lua``), which must
make the same choices: a test drives both with the same operations and compares what they
admit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

JobState = Literal["waiting", "admitted", "running"]


@dataclass(frozen=True)
class QueuedJob:
    """One flush job as the fair queue knows it."""

    tenant_id: str
    session_id: str
    job_id: str


@dataclass(frozen=True)
class FairQueueModel:
    """The fair queue's state. Every operation returns the new state and the jobs it admitted,
    oldest admission first (the caller publishes them); ``capacity`` is at least 1.

    ``waiting`` maps a tenant to its waiting job ids, first in first out; ``states`` every job
    the queue holds; ``served`` the admission number of each tenant's latest admission (a
    tenant absent from it was idle and goes first among equals); ``admissions`` the last
    admission number handed out.
    """

    jobs: Mapping[str, QueuedJob] = field(default_factory=dict)
    states: Mapping[str, JobState] = field(default_factory=dict)
    waiting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    served: Mapping[str, int] = field(default_factory=dict)
    admissions: int = 0

    def add(self, job: QueuedJob, capacity: int) -> tuple[FairQueueModel, bool, list[QueuedJob]]:
        """A job wants to run. Returns the new state, whether the job was already admitted or
        running (its message may have been dropped: the caller sends it again), and the jobs
        admitted now. A job already waiting keeps its place."""
        state = self.states.get(job.job_id)
        if state is not None:
            model, admitted = self.dispatch(capacity)
            return model, state != "waiting", admitted
        line = (*self.waiting.get(job.tenant_id, ()), job.job_id)
        model = replace(
            self,
            jobs={**self.jobs, job.job_id: job},
            states={**self.states, job.job_id: "waiting"},
            waiting={**self.waiting, job.tenant_id: line},
        )
        admitted_model, admitted = model.dispatch(capacity)
        return admitted_model, False, admitted

    def start(self, job_id: str) -> FairQueueModel:
        """The job's message was taken by a worker. A job the queue does not hold as admitted
        (lost state, or a duplicate message of a job waiting again) is left as it is."""
        if self.states.get(job_id) != "admitted":
            return self
        return replace(self, states={**self.states, job_id: "running"})

    def done(self, job_id: str, capacity: int) -> tuple[FairQueueModel, list[QueuedJob]]:
        """The job's message was finished with (whatever the outcome): its place frees and the
        next jobs are admitted. A waiting or unknown job is left as it is."""
        if self.states.get(job_id) not in ("admitted", "running"):
            return self.dispatch(capacity)
        return self._forget(job_id).dispatch(capacity)

    def give_back(self, job_id: str) -> FairQueueModel:
        """An admitted job the broker refused goes back to the head of its tenant's waiting
        jobs; nothing is admitted in its stead (the broker is likely down)."""
        if self.states.get(job_id) != "admitted":
            return self
        tenant = self.jobs[job_id].tenant_id
        return replace(
            self,
            states={**self.states, job_id: "waiting"},
            waiting={**self.waiting, tenant: (job_id, *self.waiting.get(tenant, ()))},
        )

    def dispatch(self, capacity: int) -> tuple[FairQueueModel, list[QueuedJob]]:
        """Admit waiting jobs while fewer than ``capacity`` are admitted or running."""
        model, admitted = self, []
        while model.in_flight() < max(1, capacity):
            tenant = model.next_tenant()
            if tenant is None:
                break
            model, job = model._admit(tenant)
            admitted.append(job)
        return model, admitted

    def next_tenant(self) -> str | None:
        """The tenant whose oldest waiting job is admitted next: fewest jobs admitted or
        running, then served least recently (an idle tenant first), then by id."""
        ready = [tenant for tenant, line in self.waiting.items() if line]
        if not ready:
            return None
        return min(ready, key=lambda t: (self.in_flight(t), self.served.get(t, 0), t))

    def in_flight(self, tenant_id: str | None = None) -> int:
        """Jobs admitted or running, of one tenant or of all."""
        return sum(
            1
            for job_id, state in self.states.items()
            if state != "waiting"
            and (tenant_id is None or self.jobs[job_id].tenant_id == tenant_id)
        )

    def _admit(self, tenant: str) -> tuple[FairQueueModel, QueuedJob]:
        job_id, *rest = self.waiting[tenant]
        number = self.admissions + 1
        waiting = {**self.waiting, tenant: tuple(rest)}
        if not rest:
            del waiting[tenant]
        model = replace(
            self,
            states={**self.states, job_id: "admitted"},
            waiting=waiting,
            served={**self.served, tenant: number},
            admissions=number,
        )
        return model, self.jobs[job_id]

    def _forget(self, job_id: str) -> FairQueueModel:
        tenant = self.jobs[job_id].tenant_id
        jobs = {k: v for k, v in self.jobs.items() if k != job_id}
        states = {k: v for k, v in self.states.items() if k != job_id}
        served = dict(self.served)
        idle = not self.waiting.get(tenant) and not any(jobs[k].tenant_id == tenant for k in states)
        if idle:
            served.pop(tenant, None)  # an idle tenant that comes back goes first among equals
        return replace(self, jobs=jobs, states=states, served=served)


OTHER_TENANTS = "(others)"
"""The label value that sums every tenant outside the top N (no tenant id has parentheses)."""


@dataclass(frozen=True)
class TenantLoad:
    """One tenant's flush jobs: ``waiting`` in the fair queue, ``queued`` in the broker
    (admitted, not started) and ``running``; ``throttled`` requests its keys had refused by a
    rate limit (since Redis last started)."""

    tenant_id: str
    waiting: int = 0
    queued: int = 0
    running: int = 0
    throttled: int = 0

    @property
    def jobs(self) -> int:
        """Every flush job of the tenant the queue holds."""
        return self.waiting + self.queued + self.running


def top_tenants(loads: Iterable[TenantLoad], n: int) -> list[TenantLoad]:
    """The ``n`` busiest tenants (most jobs, then most throttled, then by id), and one
    :data:`OTHER_TENANTS` entry summing the rest when there is a rest: a metric labelled by
    tenant then has at most ``n + 1`` values however many tenants there are.

    Raises ``ValueError`` when ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ranked = sorted(loads, key=lambda t: (-t.jobs, -t.throttled, t.tenant_id))
    top, rest = ranked[:n], ranked[n:]
    if not rest:
        return top
    other = TenantLoad(
        OTHER_TENANTS,
        waiting=sum(t.waiting for t in rest),
        queued=sum(t.queued for t in rest),
        running=sum(t.running for t in rest),
        throttled=sum(t.throttled for t in rest),
    )
    return [*top, other]
