"""Model usage: each flush job's token counts by model, and their totals per tenant per day."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, bindparam, func, insert, select

from om_workers.store.records import DailyUsage, ModelUsage, as_utc
from om_workers.store.schema import flush_jobs, model_usage

# The session link is copied from the job's own row in the same statement: a job already
# gone (its session erased meanwhile) records its usage unlinked rather than not at all.
_JOB_SESSION = (
    select(flush_jobs.c.session_pk)
    .where(flush_jobs.c.id == bindparam("job"), flush_jobs.c.tenant_id == bindparam("tenant"))
    .scalar_subquery()
)
_INSERT = insert(model_usage).values(
    tenant_id=bindparam("tenant"),
    session_pk=_JOB_SESSION,
    job_id=bindparam("job"),
    model=bindparam("model_name"),
    calls=bindparam("n_calls"),
    input_tokens=bindparam("n_input"),
    output_tokens=bindparam("n_output"),
    day=bindparam("utc_day"),
    created_at=bindparam("now"),
)
_OF_JOB = (
    select(
        model_usage.c.model,
        func.sum(model_usage.c.calls).label("calls"),
        func.sum(model_usage.c.input_tokens).label("input_tokens"),
        func.sum(model_usage.c.output_tokens).label("output_tokens"),
    )
    .where(model_usage.c.tenant_id == bindparam("tenant"), model_usage.c.job_id == bindparam("job"))
    .group_by(model_usage.c.model)
    .order_by(model_usage.c.model)
)
_DAILY_COLUMNS = (
    model_usage.c.tenant_id,
    model_usage.c.day,
    model_usage.c.model,
    func.sum(model_usage.c.calls).label("calls"),
    func.sum(model_usage.c.input_tokens).label("input_tokens"),
    func.sum(model_usage.c.output_tokens).label("output_tokens"),
)
_IN_DAYS = (
    model_usage.c.day >= bindparam("since"),
    model_usage.c.day <= bindparam("until"),
)
_GROUPS = (model_usage.c.tenant_id, model_usage.c.day, model_usage.c.model)
_DAILY_ALL = select(*_DAILY_COLUMNS).where(*_IN_DAYS).group_by(*_GROUPS).order_by(*_GROUPS)
_DAILY_TENANT = (
    select(*_DAILY_COLUMNS)
    .where(model_usage.c.tenant_id == bindparam("tenant"), *_IN_DAYS)
    .group_by(*_GROUPS)
    .order_by(*_GROUPS)
)


def utc_day(moment: datetime) -> str:
    """The UTC day of ``moment`` as ``YYYY-MM-DD`` (how usage rows are grouped)."""
    return as_utc(moment).strftime("%Y-%m-%d")


class UsageRepository:
    """Usage rows of every tenant, on one unit of work's connection; every read is scoped by
    tenant unless it says otherwise."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def record(
        self, tenant_id: str, job_id: str, usage: Sequence[ModelUsage], *, now: datetime
    ) -> None:
        """Write one row per model of ``usage`` for the job (nothing for an empty one)."""
        if not usage:
            return
        day = utc_day(now)
        self._connection.execute(
            _INSERT,
            [
                {
                    "tenant": tenant_id,
                    "job": job_id,
                    "model_name": used.model,
                    "n_calls": used.calls,
                    "n_input": used.input_tokens,
                    "n_output": used.output_tokens,
                    "utc_day": day,
                    "now": now,
                }
                for used in usage
            ],
        )

    def of_job(self, tenant_id: str, job_id: str) -> tuple[ModelUsage, ...]:
        """The job's usage by model (empty: no call reported usage)."""
        rows = self._connection.execute(_OF_JOB, {"tenant": tenant_id, "job": job_id})
        return tuple(
            ModelUsage(row.model, int(row.calls), int(row.input_tokens), int(row.output_tokens))
            for row in rows
        )

    def daily(self, tenant_id: str | None, since: str, until: str) -> tuple[DailyUsage, ...]:
        """Totals per tenant, UTC day and model for days ``since`` to ``until`` (inclusive,
        ``YYYY-MM-DD``), of one tenant or (``None``) of every tenant, in that order."""
        params = {"since": since, "until": until}
        statement = _DAILY_ALL if tenant_id is None else _DAILY_TENANT
        if tenant_id is not None:
            params["tenant"] = tenant_id
        return tuple(
            DailyUsage(
                row.tenant_id,
                row.day,
                row.model,
                int(row.calls),
                int(row.input_tokens),
                int(row.output_tokens),
            )
            for row in self._connection.execute(statement, params)
        )
