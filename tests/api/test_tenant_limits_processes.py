"""Rate limits and per-tenant metrics across two real ``om api`` processes sharing one Redis
and one store: a key's flush budget holds across both (exactly the burst passes, the next is a
429 with ``Retry-After``), another tenant's key is unaffected, and either process's ``/metrics``
reports the same service-wide figures: each tenant's flush jobs by state, its throttled
requests and the fair queue's backlog."""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from typer.testing import CliRunner

from om_api.cli.commands import app as cli
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore
from tests.api.processes import start_api

BURST = 3
ADMIN_TOKEN = "admin-token-for-the-two-processes"
METRICS_TOKEN = "metrics-token-for-the-two-processes"


@pytest.fixture
def two_apis(
    migrated_url: str, redis_server: EmbeddedRedis, client: redis.Redis, tmp_path: Path
) -> Iterator[tuple[str, str]]:
    # ``client`` empties the shared Redis first: budgets, counts and the fair queue of another
    # backend's run of this test would add to this one's.
    limits = {
        "OM_RATE_LIMITS_ENABLED": "true",
        "OM_RATE_FLUSHES_PER_S": "0.01",  # no refill while the test runs
        "OM_RATE_FLUSHES_BURST": str(BURST),
        "OM_RATE_LIMIT_CACHE_S": "0",
        "OM_ADMIN_TOKEN": ADMIN_TOKEN,
        "OM_METRICS_TOKEN": METRICS_TOKEN,
    }
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for n in range(2):
            process, url = start_api(
                migrated_url, redis_server.url, tmp_path / f"api{n}.log", **limits
            )
            processes.append(process)
            urls.append(url)
        yield urls[0], urls[1]
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def _samples(url: str) -> dict[str, float]:
    scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    text = httpx.get(f"{url}/metrics", headers=scrape, timeout=10).text
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(r"(om_(?:tenant|flush)_\S+) (\S+)", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def test_a_flush_budget_holds_across_processes_and_metrics_name_each_tenant(
    migrated_url: str, two_apis: tuple[str, str], redis_server: EmbeddedRedis
) -> None:
    store = SqlStore.from_url(migrated_url)
    try:
        accounts = AccountStore(store.engine)
        tenants = {name: accounts.create_tenant(name).id for name in ("busy", "quiet")}
        keys = {name: accounts.create_api_key(tid).plaintext for name, tid in tenants.items()}
        for tenant_id in tenants.values():
            for n in range(BURST + 2):
                store.create_session(tenant_id, f"s{n}")
    finally:
        store.close()
    first, second = two_apis

    def flush(name: str, url: str, n: int) -> httpx.Response:
        headers = {"Authorization": f"Bearer {keys[name]}"}
        return httpx.post(f"{url}/v1/sessions/s{n}/flush", headers=headers, timeout=10)

    began = time.monotonic()
    answers = [flush("busy", (first, second)[n % 2], n) for n in range(BURST + 2)]
    spent_s = time.monotonic() - began
    assert [a.status_code for a in answers] == [202] * BURST + [429, 429]
    # One request per 100 s, less what the bucket refilled while the burst ran (a loaded
    # machine takes seconds over it).
    retry_after = int(answers[BURST].headers["Retry-After"])
    assert 100 - math.ceil(spent_s) <= retry_after <= 100, (retry_after, spent_s)
    assert flush("quiet", second, 0).status_code == 202
    busy, quiet = tenants["busy"], tenants["quiet"]
    for url in (first, second):
        samples = _samples(url)
        assert samples[f'om_tenant_throttled_requests_total{{tenant="{busy}"}}'] == 2
        assert samples[f'om_tenant_throttled_requests_total{{tenant="{quiet}"}}'] == 0
        # No worker has joined the pool: one job is admitted to the broker, the rest wait.
        assert samples["om_flush_backlog"] == BURST + 1
        by_state = {
            state: sum(
                samples[f'om_tenant_flush_jobs{{state="{state}",tenant="{t}"}}']
                for t in (busy, quiet)
            )
            for state in ("waiting", "queued", "running")
        }
        assert by_state == {"waiting": BURST, "queued": 1, "running": 0}
    # The same figures for an operator: the admin route and `om queue`.
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    queue = httpx.get(f"{first}/v1/admin/queue", headers=admin, timeout=10).json()
    assert queue["backlog"] == BURST + 1
    assert [t["tenant_id"] for t in queue["tenants"]] == [busy, quiet]  # busiest first
    assert queue["tenants"][0]["throttled"] == 2
    assert httpx.get(f"{first}/v1/admin/queue", timeout=10).status_code == 401
    shown = CliRunner().invoke(cli, ["queue", "--redis-url", redis_server.url])
    assert shown.exit_code == 0, shown.output
    assert f"{BURST + 1} flush jobs" in shown.output and busy in shown.output
    as_json = CliRunner().invoke(cli, ["queue", "--json", "--redis-url", redis_server.url])
    assert json.loads(as_json.output) == queue
