"""Model usage in the store, on each backend: written with a job's finish, read per job and per
tenant per day, kept unlinked when its session is erased, deleted with its tenant."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select

from om_workers.errors import SessionNotFoundError
from om_workers.store import AccountStore, ModelUsage, SqlStore
from om_workers.store.records import JobFinish
from om_workers.store.repositories.usage import utc_day
from om_workers.store.schema import model_usage

GPT = ModelUsage("gpt-test", calls=3, input_tokens=1200, output_tokens=90)
SMALL = ModelUsage("small", calls=1, input_tokens=40, output_tokens=5)


def _finished_job(store: SqlStore, tenant: str, session: str, *usage: ModelUsage) -> str:
    try:
        store.get_session(tenant, session)
    except SessionNotFoundError:
        store.create_session(tenant, session)
    job = store.create_job(tenant, session, force=True, full_reflection_rebuild=False).id
    store.start_job(tenant, job)
    finished = store.finish_job_if_open(tenant, JobFinish(job, "succeeded", usage=usage))
    assert finished is not None and finished.state == "succeeded"
    return job


def _erase_session(store: SqlStore, tenant: str, session_id: str) -> None:
    job = store.erasure.erase_session(tenant, session_id, None)
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target, chunk=100)
    store.erasure.finish_job(job.id, "succeeded", {"sessions": len(started[1])})


def test_a_jobs_usage_is_written_with_its_finish_and_read_by_model(
    store: SqlStore, tenant: str
) -> None:
    job = _finished_job(store, tenant, "s1", GPT, SMALL)
    assert store.usage.of_job(tenant, job) == (GPT, SMALL)
    # Another tenant never sees it, and a job without usage has none.
    AccountStore(store.engine).create_tenant("rival")
    assert store.usage.of_job("rival", job) == ()
    assert store.usage.of_job(tenant, _finished_job(store, tenant, "s1")) == ()


def test_usage_of_a_job_finished_meanwhile_is_still_counted(store: SqlStore, tenant: str) -> None:
    job = _finished_job(store, tenant, "s1", GPT)
    late = store.finish_job_if_open(tenant, JobFinish(job, "failed", usage=(SMALL,)))
    assert late is None  # the row keeps its state ...
    assert store.get_job(tenant, job).state == "succeeded"
    assert store.usage.of_job(tenant, job) == (GPT, SMALL)  # ... the calls were still made


def test_daily_totals_per_tenant_and_model(store: SqlStore, tenant: str) -> None:
    AccountStore(store.engine).create_tenant("other")
    _finished_job(store, tenant, "a", GPT)
    _finished_job(store, tenant, "b", GPT, SMALL)
    _finished_job(store, "other", "a", SMALL)
    today = utc_day(datetime.now(UTC))
    mine = store.usage.daily(tenant, today, today)
    assert [(r.model, r.calls, r.input_tokens, r.output_tokens) for r in mine] == [
        ("gpt-test", 6, 2400, 180),
        ("small", 1, 40, 5),
    ]
    assert {r.tenant_id for r in mine} == {tenant} and {r.day for r in mine} == {today}
    everyone = store.usage.daily(None, today, today)
    assert [(r.tenant_id, r.model) for r in everyone] == sorted(
        [(tenant, "gpt-test"), (tenant, "small"), ("other", "small")]
    )
    assert store.usage.daily(tenant, "2000-01-01", "2000-12-31") == ()


def test_session_erasure_keeps_counts_unlinked(store: SqlStore, tenant: str) -> None:
    job = _finished_job(store, tenant, "gone", GPT)
    kept = _finished_job(store, tenant, "kept", SMALL)
    _erase_session(store, tenant, "gone")
    with store.engine.connect() as connection:
        rows = connection.execute(select(model_usage.c.job_id, model_usage.c.session_pk)).all()
    links = {job_id: session_pk for job_id, session_pk in rows}
    assert links[job] is None and links[kept] is not None
    today = utc_day(datetime.now(UTC))
    totals = {r.model: r.input_tokens for r in store.usage.daily(tenant, today, today)}
    assert totals == {"gpt-test": 1200, "small": 40}


def test_tenant_erasure_deletes_its_usage(store: SqlStore, tenant: str) -> None:
    AccountStore(store.engine).create_tenant("other")
    _finished_job(store, tenant, "s1", GPT)
    _finished_job(store, "other", "s1", SMALL)
    job = store.erasure.erase_tenant(tenant)
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target, chunk=100)
    store.erasure.finish_job(job.id, "succeeded", {"sessions": len(started[1])})
    with store.engine.connect() as connection:
        tenants = set(connection.execute(select(model_usage.c.tenant_id)).scalars())
    assert tenants == {"other"}
