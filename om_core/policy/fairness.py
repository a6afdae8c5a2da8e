"""Fair queueing of flush jobs across tenants, the pure parts: who goes next, and what the
operators' metrics name.

A flush job is **waiting** (held back in the fair queue), **admitted** (sent to the broker,
queued there) or **running** (a worker took its message). At most ``capacity`` jobs are
admitted or running at once (the task slots of the live worker pool), so the broker's queue
stays short. Whenever a place frees, the next job admitted is the oldest waiting job of the
tenant that was served least lately: each tenant's **usage** counts its admissions, each one
decaying by half every ``half_life_ms`` (60 s in the service). A tenant alone fills every slot;
a tenant that asks behind another's backlog has used nothing lately, so it takes the next free
slots until its usage catches up, and from then on two busy tenants alternate (equal shares).
The decay bounds how long a newcomer's priority lasts: a tenant that had been busy for long
yields at most about ``1.44 * half_life`` of free slots to one that floods after it.

Usage is kept as one number per tenant that never needs rescaling: ``log2(u) + t / half_life``
for usage ``u`` at time ``t``. Decay multiplies every tenant's ``u`` by the same factor, so the
numbers of two tenants compare the same at any time, and the least served tenant is simply the
lowest (:func:`used_after_admission`; a tenant never served is ``-inf``).

:class:`FairQueueModel` is the reference of that rule, step by step. The scheduler itself runs
as one Lua script in Redis (``om_workers/coordination/lua/fair_queue.lua``), which must make the
same choices: a test drives both with the same operations and compares what they admit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

JobState = Literal["waiting", "admitted", "running"]

DEFAULT_HALF_LIFE_S = 60.0
"""How long until a tenant's past admissions count half (``OM_FAIR_QUEUE_HALF_LIFE_S``)."""
NEVER_SERVED = -math.inf
"""The usage of a tenant with no admission remembered: it goes before any other."""
FORGET_BELOW = -20.0
"""A usage more than this many halvings below "now" (under a millionth) is forgotten."""


def used_after_admission(used: float, now_ms: int, half_life_ms: int) -> float:
    """A tenant's usage (``log2(u) + now / half_life``) after one more admission at ``now_ms``.

    ``u`` decays to ``u * 2**-(dt / half_life)`` over ``dt`` ms and then gains 1. Raises
    ``ValueError`` for a half-life under 1 ms.
    """
    if half_life_ms < 1:
        raise ValueError(f"half_life_ms must be >= 1, got {half_life_ms}")
    now = now_ms / half_life_ms
    if used == NEVER_SERVED:
        return now
    return now + math.log(2.0 ** (used - now) + 1.0) / math.log(2.0)


@dataclass(frozen=True)
class QueuedJob:
    """One flush job as the fair queue knows it."""

    tenant_id: str
    session_id: str
    job_id: str


@dataclass(frozen=True)
class FairQueueModel:
    """The fair queue's state. Every operation that may admit returns the new state and the
    jobs it admitted, oldest admission first (the caller publishes them); ``capacity`` is at
    least 1, ``now_ms`` the time of the step in milliseconds.

    ``waiting`` maps a tenant to its waiting job ids, first in first out; ``states`` every job
    the queue holds; ``usage`` each tenant's decayed admissions in the log form of the module
    docstring (absent: never served, or long forgotten).
    """

    half_life_ms: int = round(DEFAULT_HALF_LIFE_S * 1000)
    jobs: Mapping[str, QueuedJob] = field(default_factory=dict)
    states: Mapping[str, JobState] = field(default_factory=dict)
    waiting: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    usage: Mapping[str, float] = field(default_factory=dict)

    def add(
        self, job: QueuedJob, capacity: int, now_ms: int
    ) -> tuple[FairQueueModel, bool, list[QueuedJob]]:
        """A job wants to run. Returns the new state, whether the job was already admitted or
        running (its message may have been dropped: the caller sends it again), and the jobs
        admitted now. A job already waiting keeps its place."""
        state = self.states.get(job.job_id)
        if state is not None:
            model, admitted = self.dispatch(capacity, now_ms)
            return model, state != "waiting", admitted
        line = (*self.waiting.get(job.tenant_id, ()), job.job_id)
        model = replace(
            self,
            jobs={**self.jobs, job.job_id: job},
            states={**self.states, job.job_id: "waiting"},
            waiting={**self.waiting, job.tenant_id: line},
        )
        admitted_model, admitted = model.dispatch(capacity, now_ms)
        return admitted_model, False, admitted

    def start(self, job_id: str) -> FairQueueModel:
        """The job's message was taken by a worker. A job the queue does not hold as admitted
        (lost state, or a duplicate message of a job waiting again) is left as it is."""
        if self.states.get(job_id) != "admitted":
            return self
        return replace(self, states={**self.states, job_id: "running"})

    def done(
        self, job_id: str, capacity: int, now_ms: int
    ) -> tuple[FairQueueModel, list[QueuedJob]]:
        """The job's message was finished with (whatever the outcome): its place frees and the
        next jobs are admitted. A waiting or unknown job is left as it is."""
        if self.states.get(job_id) not in ("admitted", "running"):
            return self.dispatch(capacity, now_ms)
        jobs = {k: v for k, v in self.jobs.items() if k != job_id}
        states = {k: v for k, v in self.states.items() if k != job_id}
        return replace(self, jobs=jobs, states=states).dispatch(capacity, now_ms)

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

    def dispatch(self, capacity: int, now_ms: int) -> tuple[FairQueueModel, list[QueuedJob]]:
        """Admit waiting jobs while fewer than ``capacity`` are admitted or running."""
        model, admitted = self._forget_old_usage(now_ms), []
        while model.in_flight() < max(1, capacity):
            tenant = model.next_tenant()
            if tenant is None:
                break
            model, job = model._admit(tenant, now_ms)
            admitted.append(job)
        return model, admitted

    def next_tenant(self) -> str | None:
        """The tenant whose oldest waiting job is admitted next: the least usage, then by id."""
        ready = [tenant for tenant, line in self.waiting.items() if line]
        if not ready:
            return None
        return min(ready, key=lambda t: (self.usage.get(t, NEVER_SERVED), t))

    def in_flight(self, tenant_id: str | None = None) -> int:
        """Jobs admitted or running, of one tenant or of all."""
        return sum(
            1
            for job_id, state in self.states.items()
            if state != "waiting" and tenant_id in (None, self.jobs[job_id].tenant_id)
        )

    def _admit(self, tenant: str, now_ms: int) -> tuple[FairQueueModel, QueuedJob]:
        job_id, *rest = self.waiting[tenant]
        waiting = {**self.waiting, tenant: tuple(rest)}
        if not rest:
            del waiting[tenant]
        used = used_after_admission(self.usage.get(tenant, NEVER_SERVED), now_ms, self.half_life_ms)
        model = replace(
            self,
            states={**self.states, job_id: "admitted"},
            waiting=waiting,
            usage={**self.usage, tenant: used},
        )
        return model, self.jobs[job_id]

    def _forget_old_usage(self, now_ms: int) -> FairQueueModel:
        floor = now_ms / self.half_life_ms + FORGET_BELOW
        kept = {tenant: used for tenant, used in self.usage.items() if used >= floor}
        return self if len(kept) == len(self.usage) else replace(self, usage=kept)


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


def busiest_first(loads: Iterable[TenantLoad]) -> list[TenantLoad]:
    """Tenants by load: most jobs, then most throttled requests, then by id."""
    return sorted(loads, key=lambda t: (-t.jobs, -t.throttled, t.tenant_id))


def top_tenants(loads: Iterable[TenantLoad], n: int) -> list[TenantLoad]:
    """The ``n`` busiest tenants (most jobs, then most throttled, then by id), and one
    :data:`OTHER_TENANTS` entry summing the rest when there is a rest: a metric labelled by
    tenant then has at most ``n + 1`` values however many tenants there are.

    Raises ``ValueError`` when ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ranked = busiest_first(loads)
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
