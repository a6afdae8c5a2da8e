"""The retention pass (``om.retention`` on Celery beat, every ``OM_RETENTION_INTERVAL_S``),
pure of Celery: for each tenant with ``retention_days`` set, the sessions not written to for
longer than that are erased, as one ``retention`` erasure job per tenant and pass (at most
``batch`` sessions each; the rest go at the next pass). Off by default: a tenant without
``retention_days`` keeps everything.

"Idle" is the session row's ``updated_at``: every append, flush and link moves it, reads do
not. The dry run (:func:`retention_dry_run`) lists what a pass would erase now, writing
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from om_workers.store import AccountStore, SqlStore


@dataclass(frozen=True)
class RetentionDryRun:
    """What a retention pass would erase for one tenant now: sessions idle since before
    ``cutoff`` (``None`` and nothing: the tenant keeps everything)."""

    tenant_id: str
    retention_days: int | None
    cutoff: datetime | None
    session_ids: tuple[str, ...]


def retention_cutoff(now: datetime, days: int) -> datetime:
    """Sessions not written since this moment are past a ``days`` retention period."""
    return now - timedelta(days=days)


def retention_dry_run(
    store: SqlStore, accounts: AccountStore, tenant_id: str, *, now: datetime, limit: int
) -> RetentionDryRun:
    """Up to ``limit`` sessions of the tenant a retention pass would erase at ``now``, longest
    idle first. Raises :class:`~om_workers.errors.TenantNotFoundError`."""
    days = accounts.get_retention_days(tenant_id)
    if days is None:
        return RetentionDryRun(tenant_id, None, None, ())
    cutoff = retention_cutoff(now, days)
    idle = store.erasure.idle_sessions(tenant_id, cutoff, limit)
    return RetentionDryRun(tenant_id, days, cutoff, tuple(idle))


def run_retention_pass(
    store: SqlStore,
    accounts: AccountStore,
    publish_erasure: Callable[[str], None],
    *,
    now: datetime,
    batch: int,
) -> dict[str, str]:
    """Open a ``retention`` erasure job per tenant with idle sessions past its period and
    publish it; tenant id -> job id. A publish that fails leaves a durable job the reconciler
    publishes later."""
    opened: dict[str, str] = {}
    for tenant_id, days in sorted(accounts.retention_policies().items()):
        job = store.erasure.erase_idle(tenant_id, retention_cutoff(now, days), batch)
        if job is None:
            continue
        opened[tenant_id] = job.id
        try:
            publish_erasure(job.id)
        except Exception:  # the job row is durable: the reconciler's step 5 publishes it
            continue
    return opened
