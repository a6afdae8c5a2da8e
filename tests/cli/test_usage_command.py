"""``om usage`` on the database: the report per tenant per day with costs at OM_PRICES, --json
as the admin route answers, and a bad window (exit 2) or an unknown tenant named in one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner, Result

from om_api.cli import app, render
from om_api.schemas import JobOut, JobUsageOut
from om_workers.store import ModelUsage
from om_workers.store.records import JobFinish
from tests.cli.conftest import Tenant

PRICES = json.dumps({"gpt-x": {"input": 1.0, "output": 2.0}})
ENV = {"COLUMNS": "160", "NO_COLOR": "1", "OM_PRICES": PRICES}


def run_db(tenant: Tenant, *args: str) -> Result:
    from om_workers.config import get_settings

    get_settings.cache_clear()  # OM_PRICES is read from this run's environment
    url = str(tenant.api.store.engine.url)
    try:
        return CliRunner().invoke(app, ["usage", *args, "--database-url", url], env=ENV)
    finally:
        get_settings.cache_clear()


def test_usage_report_with_costs(tenant: Tenant) -> None:
    store = tenant.api.store
    store.create_session(tenant.tenant_id, "s")
    job = store.create_job(tenant.tenant_id, "s", force=True).id
    store.start_job(tenant.tenant_id, job)
    used = (ModelUsage("gpt-x", 2, 500_000, 1_000), ModelUsage("local", 1, 10, 1))
    store.finish_job_if_open(tenant.tenant_id, JobFinish(job, "succeeded", usage=used))

    answer = run_db(tenant, "--tenant", tenant.tenant_id, "--json")
    assert answer.exit_code == 0, answer.output
    report = json.loads(answer.stdout)
    today = datetime.now(UTC).date().isoformat()
    assert [(r["day"], r["model"], r["cost"]) for r in report["rows"]] == [
        (today, "gpt-x", 0.502),
        (today, "local", None),
    ]
    assert report["cost"] == 0.502 and report["unpriced_models"] == ["local"]

    table = run_db(tenant, "--tenant", tenant.tenant_id)
    assert table.exit_code == 0, table.output
    assert "gpt-x" in table.stdout and "0.502000" in table.stdout
    assert "no price in OM_PRICES for: local" in table.stdout
    empty = run_db(tenant, "--tenant", tenant.tenant_id, "--until", "2001-01-01")
    assert "no model usage recorded" in empty.stdout


def test_bad_window_and_unknown_tenant_fail_in_one_line(tenant: Tenant) -> None:
    bad = run_db(tenant, "--since", "2026-02-01", "--until", "2026-01-01")
    assert bad.exit_code == 2 and "is after until" in bad.output
    assert run_db(tenant, "--since", "soon").exit_code == 2
    unknown = run_db(tenant, "--tenant", "nobody-here")
    assert unknown.exit_code != 0 and "nobody-here" in unknown.output


def test_a_jobs_usage_is_shown_with_it(capsys: pytest.CaptureFixture[str]) -> None:
    usage = JobUsageOut(calls=3, input_tokens=1200, output_tokens=90, cost=0.000234)
    job = JobOut(
        id="j1",
        session_id="s",
        state="succeeded",
        force=False,
        full_reflection_rebuild=False,
        attempts=1,
        queued_at=datetime.now(UTC),
        started_at=None,
        finished_at=None,
        duration_s=None,
        counts={"observations": 2},
        error=None,
        usage=usage,
    )
    render.show_job(job)
    shown = capsys.readouterr().out
    assert "model usage: 3 calls, 1200 input and 90 output tokens, cost 0.000234" in shown
    render.show_job(
        job.model_copy(update={"usage": JobUsageOut(calls=0, input_tokens=0, output_tokens=0)})
    )
    assert "model usage" not in capsys.readouterr().out
