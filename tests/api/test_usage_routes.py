"""Usage over HTTP, on each backend: a flush job's usage on ``GET /v1/jobs/{id}`` (tenant-scoped)
and the admin report ``GET /v1/admin/usage`` with its window checked at the boundary."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from om_workers.store import ModelUsage
from om_workers.store.records import JobFinish
from tests.api.server import LiveApi

USED = (ModelUsage("gpt-x", 2, 700, 40), ModelUsage("mini", 1, 30, 4))


def _job_with_usage(live: LiveApi, tenant_id: str, session: str) -> str:
    live.store.create_session(tenant_id, session)
    job = live.store.create_job(tenant_id, session, force=True).id
    live.store.start_job(tenant_id, job)
    assert live.store.finish_job_if_open(tenant_id, JobFinish(job, "succeeded", usage=USED))
    return job


def test_a_jobs_usage_is_on_its_record_and_only_for_its_tenant(backend_api: LiveApi) -> None:
    tenant_id, http = backend_api.tenant()
    _, rival = backend_api.tenant()
    job = _job_with_usage(backend_api, tenant_id, "s1")
    usage = http.get(f"/v1/jobs/{job}").json()["usage"]
    assert (usage["calls"], usage["input_tokens"], usage["output_tokens"]) == (3, 730, 44)
    assert [m["model"] for m in usage["models"]] == ["gpt-x", "mini"]
    assert usage["cost"] is None and usage["unpriced_models"] == ["gpt-x", "mini"]
    assert rival.get(f"/v1/jobs/{job}").status_code == 404


def test_admin_report_per_tenant_per_day(backend_api: LiveApi) -> None:
    tenant_id, _ = backend_api.tenant()
    other_id, _ = backend_api.tenant()
    _job_with_usage(backend_api, tenant_id, "a")
    _job_with_usage(backend_api, tenant_id, "b")
    _job_with_usage(backend_api, other_id, "a")
    today = datetime.now(UTC).date().isoformat()
    with backend_api.admin() as admin:
        report = admin.get("/v1/admin/usage", params={"tenant": tenant_id}).json()
        assert (report["until"], report["tenant_id"]) == (today, tenant_id)
        rows = [(r["tenant_id"], r["day"], r["model"], r["input_tokens"]) for r in report["rows"]]
        assert rows == [(tenant_id, today, "gpt-x", 1400), (tenant_id, today, "mini", 60)]
        assert (report["calls"], report["output_tokens"]) == (6, 88)
        everyone = admin.get("/v1/admin/usage").json()
        assert {tenant_id, other_id} <= {r["tenant_id"] for r in everyone["rows"]}
        past = admin.get("/v1/admin/usage", params={"until": "2020-01-31"}).json()
        assert past["rows"] == [] and past["since"] == "2020-01-02"


def test_admin_report_refuses_bad_windows_strangers_and_unknown_tenants(
    backend_api: LiveApi,
) -> None:
    _, http = backend_api.tenant()
    assert http.get("/v1/admin/usage").status_code == 401
    with backend_api.anonymous() as anonymous:
        assert anonymous.get("/v1/admin/usage").status_code == 401
    until = date(2026, 6, 30)
    widest = (until - timedelta(days=365)).isoformat()
    too_wide = (until - timedelta(days=366)).isoformat()
    with backend_api.admin() as admin:
        assert admin.get("/v1/admin/usage", params={"tenant": "nobody"}).status_code == 404
        window = {"since": widest, "until": until.isoformat()}
        assert admin.get("/v1/admin/usage", params=window).status_code == 200
        for bad in (
            {"since": too_wide, "until": until.isoformat()},
            {"since": "2026-07-01", "until": "2026-06-30"},
            {"since": "2026-02-30"},
            {"until": "tomorrow"},
        ):
            answer = admin.get("/v1/admin/usage", params=bad)
            assert answer.status_code == 422, (bad, answer.text)
            assert answer.json()["error"] == "invalid_input" and answer.json()["detail"]
