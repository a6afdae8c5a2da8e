"""Model usage of the service layer: a flush job's usage, and totals per tenant per day.

The rows are written by the job's finish (:class:`~om_workers.store.records.JobFinish`
``usage``); this module only reads them. :class:`~om_workers.store.SqlStore` exposes it as
``store.usage``.
"""

from __future__ import annotations

from om_workers.store.records import DailyUsage, ModelUsage
from om_workers.store.service import Service


class UsageService(Service):
    """Reads of model usage. Database failures raise
    :class:`~om_workers.errors.StoreUnavailableError` or :class:`~om_workers.errors.StoreError`."""

    def of_job(self, tenant_id: str, job_id: str) -> tuple[ModelUsage, ...]:
        """The flush job's usage by model; empty for a job whose calls reported none (or an
        unknown job: the caller checks the job exists)."""
        with self._units.read() as uow:
            return uow.usage.of_job(tenant_id, job_id)

    def daily(self, tenant_id: str | None, since: str, until: str) -> tuple[DailyUsage, ...]:
        """Totals per tenant, UTC day and model, days ``since`` to ``until`` inclusive
        (``YYYY-MM-DD``, checked by :func:`om_core.policy.usage.usage_window`), of one
        tenant or of every tenant (``None``)."""
        with self._units.read() as uow:
            return uow.usage.daily(tenant_id, since, until)


__all__ = ["UsageService"]
