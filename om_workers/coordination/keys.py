"""Every Redis key name, TTL and Lua script ``om_workers`` uses, in one place.

Keys live under the prefix ``om:`` so one Redis can be shared with other programs and an
operator can list everything this service owns with ``SCAN MATCH om:*``:

- ``om:pending:{tenant}:{session}``: job id of the flush that is queued but not yet started
  (``SET NX EX`` in :func:`om_workers.coordination.coalesce.enqueue`);
- ``om:lock:{tenant}:{session}``: token of the worker running the session's flush, its
  worker id and a random part (``<worker id>/<hex>``; ``SET NX PX`` in
  :class:`om_workers.coordination.locks.SessionLock`);
- ``om:worker:{worker id}``: present while that worker process lives (refreshed by its
  heartbeat thread, :mod:`om_workers.coordination.liveness`): a lock whose holder's key is gone
  was left by a dead process and may be taken at once;
- ``om:rate:{key id}:{class}``: an API key's rate-limit bucket for one request class, its GCRA
  theoretical arrival time in microseconds (``SET PX`` in the ``rate_limit.lua`` script,
  :mod:`om_workers.coordination.rate_limit`); it expires once the bucket is full again;
  ``om:throttled`` counts each tenant's refused requests;
- ``om:fair:*``, ``om:backlog``: the fair queue of flush jobs across tenants (waiting jobs per
  tenant, jobs in flight, the order tenants are served in; ``lua/fair_queue.lua``,
  :mod:`om_workers.coordination.fairness`); ``om:pool`` and ``om:pool:slots``: the live
  workers' task slots, the fair queue's capacity (:mod:`om_workers.coordination.pool`);
- ``om:reconcile:soon``: set (``SET NX PX``) by the process that asked for an early reconciler
  pass, so processes asking at the same moment get one pass between them
  (:func:`om_workers.jobs.reconcile.request_reconcile_soon`); ``om:reconcile:lost-watch``: set
  by the worker process that looks for runs of dead workers this turn
  (:mod:`om_workers.jobs.lost_runs`), so the cluster looks once per turn;
- ``om:console:{sha256 of the cookie}``: a web-console sign-in (tenant and API key id, or
  admin, and its form token; never the API key), expiring after ``OM_CONSOLE_SESSION_TTL_S``
  (:mod:`om_workers.coordination.console_signin`).

There is deliberately no Redis fence key: Redis here runs without persistence, so a counter
kept in it would restart from zero after a Redis restart and could not fence anything. The fence
is the session's epoch in the SQL store (raised when the lock is taken, checked on every write).

Id parts are escaped (``%`` -> ``%25``, ``:`` -> ``%3A``) so that tenant ``a:b`` with session
``c`` and tenant ``a`` with session ``b:c`` never share a key.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Final

PREFIX: Final = "om:"

# TTLs. The lock TTL is the only one workers tune (OM_LOCK_TTL_S); the others are safety nets
# so that nothing this service writes outlives its use forever.

DEFAULT_LOCK_TTL_S: Final = 60.0
"""Session lock TTL, seconds. A heartbeat extends it every third of this while a job is alive,
so it bounds how long a crashed worker blocks its session, not how long a job may take."""

LIVENESS_TTL_S: Final = 5.0
"""Lifetime of a worker's ``om:worker:`` key, seconds, refreshed every third of it; capped by the
lock TTL. It bounds how long a killed worker's lock blocks its session once its message is
redelivered (RabbitMQ: at once) or the reconciler looks. A live worker that cannot refresh it
for this long (a Redis outage) may see its lock taken: the fenced write keeps that safe, at the
cost of repeated LLM calls."""

PENDING_TTL_S: Final = 3600
"""Lifetime of a ``pending`` marker, whole seconds. Long enough to outlive any queue wait; if a
marker's message is lost (Redis restart, crash) the reconciler re-publishes it well before this,
and the expiry only guarantees a forgotten marker cannot block coalescing forever."""


def _part(value: str) -> str:
    """Escape one id so it cannot be confused with the ``:`` separator."""
    if not value:
        raise ValueError("key parts must be non-empty")
    return value.replace("%", "%25").replace(":", "%3A")


def _unpart(value: str) -> str:
    """Undo :func:`_part` in one pass (two sequential replaces could decode ``%253A`` twice)."""
    return re.sub("%(25|3A)", lambda m: "%" if m.group(1) == "25" else ":", value)


def pending_key(tenant_id: str, session_id: str) -> str:
    """Key of the session's ``pending`` marker (value: the queued job id).

    Raises ``ValueError`` for an empty id.
    """
    return f"{PREFIX}pending:{_part(tenant_id)}:{_part(session_id)}"


def lock_key(tenant_id: str, session_id: str) -> str:
    """Key of the session's lock (value: the holder's random token).

    Raises ``ValueError`` for an empty id.
    """
    return f"{PREFIX}lock:{_part(tenant_id)}:{_part(session_id)}"


def session_keys(tenant_id: str, session_id: str) -> tuple[str, ...]:
    """Every key that belongs to one session alone (its ``pending`` marker and its lock):
    what erasing the session deletes. The fair queue's entries name a session's flush jobs by
    id only and drain as their messages run (an erased session's jobs end ``skipped``).

    Raises ``ValueError`` for an empty id.
    """
    return (pending_key(tenant_id, session_id), lock_key(tenant_id, session_id))


WORKER_PREFIX: Final = f"{PREFIX}worker:"
"""Prefix of the liveness keys; the lock script builds the holder's key from it."""


_WORKER_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,200}")


def worker_key(worker_id: str) -> str:
    """Key that says the worker process ``worker_id`` is alive.

    Worker ids use only ``[A-Za-z0-9._-]`` (the lock script appends them to the prefix as they
    are, so there is nothing to escape); raises ``ValueError`` for any other id.
    """
    if not _WORKER_ID.fullmatch(worker_id):
        raise ValueError(f"not a worker id: {worker_id!r}")
    return f"{WORKER_PREFIX}{worker_id}"


def lock_holder(token: str) -> str | None:
    """The worker id in a lock token (``<worker id>/<hex>``), ``None`` for a token without one."""
    worker_id, slash, _ = token.partition("/")
    return worker_id if slash and worker_id else None


def rate_key(key_id: str, request_class: str) -> str:
    """Key of an API key's rate-limit bucket for one request class (value: a GCRA TAT, µs).

    Raises ``ValueError`` for an empty id or class.
    """
    return f"{PREFIX}rate:{_part(key_id)}:{_part(request_class)}"


FAIR_JOBS: Final = f"{PREFIX}fair:jobs"
"""Every flush job the fair queue holds: job id -> ``[state, tenant id, session id]`` (JSON)."""
FAIR_READY: Final = f"{PREFIX}fair:ready"
"""Tenants with waiting jobs, ranked by who goes next (see ``lua/fair_queue.lua``)."""
FAIR_LINES: Final = f"{PREFIX}fair:lines"
"""Tenant id -> the key of its line of waiting job ids (:func:`fair_line_key`)."""
FAIR_IN_FLIGHT: Final = f"{PREFIX}fair:in_flight"
"""Jobs admitted to the broker or running: job id -> ms when admitted or started."""
FAIR_IN_FLIGHT_COUNTS: Final = f"{PREFIX}fair:in_flight_counts"
FAIR_RUNNING_COUNTS: Final = f"{PREFIX}fair:running_counts"
FAIR_USAGE: Final = f"{PREFIX}fair:usage"
"""Tenant id -> its recent admissions, decayed (``om_core.policy.fairness``): who is served next."""
BACKLOG: Final = f"{PREFIX}backlog"
"""One token per flush job the fair queue holds (waiting, admitted or running); only its
length means anything: KEDA scales the workers on it."""
POOL: Final = f"{PREFIX}pool"
"""Live worker processes: worker id -> ms when its advertisement expires."""
POOL_SLOTS: Final = f"{PREFIX}pool:slots"
"""Worker id -> its task slots (``OM_WORKER_CONCURRENCY``)."""
POOL_DEPARTED: Final = f"{POOL}:departed"
"""Set by ``fair_queue.lua`` (which derives it from :data:`POOL`) when it finds a worker's
advertisement expired; cleared by its ``departed`` step."""
RECONCILE_SOON: Final = f"{PREFIX}reconcile:soon"
"""Present for a few seconds after an early reconciler pass was asked for."""
RECONCILE_LAST: Final = f"{PREFIX}reconcile:last"
"""JSON ``{"redis_ms", "local_ms"}`` of the newest reconciler pass: when it ran on Redis's clock
(so ``om doctor`` can tell whether beat keeps it running) and on the clock of the worker that
ran it (that worker's skew). Expires after :data:`RECONCILE_LAST_TTL_S`."""
RECONCILE_LAST_TTL_S: Final = 7 * 24 * 3600
"""A week: a marker this old says as much as none."""
LOST_RUN_WATCH: Final = f"{PREFIX}reconcile:lost-watch"
"""Present while one process's look for runs of dead workers counts for the cluster."""
THROTTLED: Final = f"{PREFIX}throttled"
"""Tenant id -> requests its API keys had refused by a rate limit (since Redis started)."""


def fair_line_key(tenant_id: str) -> str:
    """Key of the tenant's line of waiting flush job ids, oldest first.

    Raises ``ValueError`` for an empty id.
    """
    return f"{PREFIX}fair:line:{_part(tenant_id)}"


TRACE_CONTEXT_TTL_S: Final = PENDING_TTL_S
"""Lifetime of a waiting flush job's trace context, whole seconds: as long as a ``pending``
marker; a job admitted later than that starts a trace of its own."""


def trace_context_key(job_id: str) -> str:
    """Key of the W3C trace context (``traceparent``) of the request whose flush job
    ``job_id`` waits in the fair queue, with tracing on; read and deleted when the job is
    admitted, so its publish and its worker's spans join that request's trace.

    Raises ``ValueError`` for an empty id.
    """
    return f"{PREFIX}fair:trace:{_part(job_id)}"


def fair_queue_keys(tenant_id: str | None = None) -> list[str]:
    """The ``KEYS`` of ``fair_queue.lua``, in its order; with a tenant, its line last (the
    ``add`` and ``return`` steps need it).

    Raises ``ValueError`` for an empty id.
    """
    shared = [
        FAIR_JOBS,
        FAIR_READY,
        FAIR_LINES,
        FAIR_IN_FLIGHT,
        FAIR_IN_FLIGHT_COUNTS,
        FAIR_RUNNING_COUNTS,
        FAIR_USAGE,
        BACKLOG,
        POOL,
        POOL_SLOTS,
    ]
    return shared if tenant_id is None else [*shared, fair_line_key(tenant_id)]


PENDING_PATTERN: Final = f"{PREFIX}pending:*"
"""``SCAN MATCH`` pattern of every session's ``pending`` marker (for the reconciler)."""


def parse_pending_key(key: str) -> tuple[str, str]:
    """``(tenant_id, session_id)`` of a key built by :func:`pending_key`.

    Raises ``ValueError`` for any other key.
    """
    head = f"{PREFIX}pending:"
    parts = key[len(head) :].split(":") if key.startswith(head) else []
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"not a pending key: {key!r}")
    return _unpart(parts[0]), _unpart(parts[1])


# Lua scripts. Each runs atomically inside Redis, which is what makes the check and the action
# one step: a plain GET followed by PEXPIRE/DEL could act on a lock another worker took in
# between (the classic bug of libraries that release with an unconditional DEL).
# The scripts live beside this module in ``lua/``; each file's header comment states its keys,
# arguments and reply.


CONSOLE_PREFIX: Final = f"{PREFIX}console:"


def console_signin_key(token_digest: str) -> str:
    """Key of a console sign-in, by the hex SHA-256 of its cookie value (the cookie itself is
    never stored, so reading Redis does not sign anyone in)."""
    return f"{CONSOLE_PREFIX}{token_digest}"


def _script(name: str) -> str:
    """The source of ``lua/<name>``, read once at import (shipped as package data)."""
    return resources.files(__package__).joinpath("lua", name).read_text(encoding="utf-8")


EXTEND_LOCK: Final = _script("extend_lock.lua")

RELEASE_LOCK: Final = _script("release_lock.lua")

ACQUIRE_LOCK: Final = _script("acquire_lock.lua")

SET_PENDING: Final = _script("set_pending.lua")

DELETE_IF_EQUAL: Final = _script("delete_if_equal.lua")

RATE_LIMIT: Final = _script("rate_limit.lua")

FAIR_QUEUE: Final = _script("fair_queue.lua")

POOL_ADVERTISE: Final = _script("pool_advertise.lua")
