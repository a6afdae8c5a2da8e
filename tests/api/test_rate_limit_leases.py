"""Rate-limit leases (``om_api.server.limits``): a busy key spends requests its API process took
from the shared bucket in one Redis call, never more than the bucket holds, and two processes
together still admit no more than the limit. Real Redis, real SQLite; no timing."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from om_api.server.limits import ApiRateLimits, RateLimitedError
from om_api.server.metrics import ApiMetrics
from om_core.policy.rate_limit import RateLimit, lease_size
from om_workers.config import Settings
from om_workers.coordination import keys
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.coordination.rate_limit import RateLimiter
from om_workers.store import AccountStore, SqlStore, upgrade

# A slow refill: nothing comes back into the bucket while a test runs, however slow the machine.
BURST = 200
RATE = 0.01


@pytest.fixture
def client(api_redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    connection = connect(api_redis_server.url)
    yield connection
    connection.close()


@pytest.fixture
def accounts(tmp_path: Path) -> Iterator[AccountStore]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    yield AccountStore(store.engine)
    store.close()


def _limits(accounts: AccountStore, client: redis.Redis, **settings: object) -> ApiRateLimits:
    # The suite turns limits off by default; these tests are about them.
    wanted = {"rate_limits_enabled": True, **settings}
    resolved = Settings(rate_reads_per_s=RATE * 100_000, rate_reads_burst=BURST, **wanted)
    return ApiRateLimits(resolved, accounts, RateLimiter(client), ApiMetrics())


def test_a_busy_key_spends_a_lease_without_asking_redis_again(
    accounts: AccountStore, client: redis.Redis
) -> None:
    tenant = accounts.create_tenant("leased").id
    limits = _limits(accounts, client)
    size = lease_size(limits.effective(tenant)["reads"])
    assert size > 1
    assert not limits.spend_leased(tenant, "k1", "reads")  # nothing taken yet
    limits.check(tenant, "k1", "reads")  # takes a lease from Redis, spends one of it
    bucket = keys.rate_key("k1", "reads")
    taken = client.get(bucket)
    for _ in range(size - 1):
        assert limits.spend_leased(tenant, "k1", "reads")
    assert client.get(bucket) == taken  # spent locally: the bucket did not move
    assert not limits.spend_leased(tenant, "k1", "reads")  # the lease is spent
    limits.check(tenant, "k1", "reads")
    assert client.get(bucket) != taken  # a new lease
    # Another class and another key have leases of their own.
    assert not limits.spend_leased(tenant, "k1", "appends")
    assert not limits.spend_leased(tenant, "k2", "reads")


def test_two_processes_with_leases_never_admit_more_than_the_bucket_holds(
    accounts: AccountStore, client: redis.Redis
) -> None:
    tenant = accounts.create_tenant("shared").id
    # A lease needs a rate of some tens a second, so the bucket refills while this runs: the
    # bound below counts the refill from the time measured, no margin assumed.
    limit = RateLimit(rate_per_s=100, burst=BURST)
    accounts.set_rate_limits(tenant, {"reads": limit})
    one, two = _limits(accounts, client), _limits(accounts, client)
    assert lease_size(limit) > 1
    admitted = 0
    started = time.monotonic()
    for turn in range(3 * BURST):
        try:
            (one if turn % 3 else two).check(tenant, "k3", "reads")
            admitted += 1
        except RateLimitedError:
            continue
    refilled = math.ceil(limit.rate_per_s * (time.monotonic() - started)) + 1
    # Every admitted request came out of the one bucket, and each process may still hold part
    # of its last lease unspent.
    assert BURST - 2 * lease_size(limit) < admitted <= BURST + refilled


def test_limits_off_spend_nothing_and_small_limits_ask_every_time(
    accounts: AccountStore, client: redis.Redis
) -> None:
    tenant = accounts.create_tenant("plain").id
    assert _limits(accounts, client, rate_limits_enabled=False).spend_leased(tenant, "k4", "reads")
    accounts.set_rate_limits(tenant, {"reads": RateLimit(rate_per_s=RATE, burst=2)})
    limits = _limits(accounts, client)
    limits.check(tenant, "k4", "reads")
    assert not limits.spend_leased(tenant, "k4", "reads")  # a lease of one: nothing left
    limits.check(tenant, "k4", "reads")
    with pytest.raises(RateLimitedError):
        limits.check(tenant, "k4", "reads")


def _script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval")
    )


def test_requests_at_once_wait_for_one_lease_instead_of_taking_one_each(
    accounts: AccountStore, client: redis.Redis
) -> None:
    tenant = accounts.create_tenant("burst").id
    limits = _limits(accounts, client)
    limits.check(tenant, "warm", "reads")  # the script loaded, the tenant's limits read
    size = lease_size(limits.effective(tenant)["reads"])
    start = threading.Barrier(32)
    before = _script_calls(client)

    def request() -> None:
        start.wait(timeout=60)
        limits.check(tenant, "k5", "reads")

    threads = [threading.Thread(target=request) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # 32 requests at once, one fetch at a time: a lease each time the last one ran out.
    assert _script_calls(client) - before == math.ceil(32 / size)


def test_after_redis_fails_requests_pass_unchecked_for_a_while_and_are_counted(
    accounts: AccountStore, tmp_path: Path
) -> None:
    tenant = accounts.create_tenant("outage").id
    nowhere = connect(f"redis://127.0.0.1:{free_port()}/0", connect_timeout_s=0.2, retries=0)
    metrics = ApiMetrics()
    resolved = Settings(rate_limits_enabled=True)
    limits = ApiRateLimits(resolved, accounts, RateLimiter(nowhere), metrics)
    try:
        limits.check(tenant, "k6", "reads")  # Redis asked, unreachable: the request passes
        # The next ones pass at once, with no Redis call, each counted as unchecked.
        assert all(limits.spend_leased(tenant, "k6", "reads") for _ in range(5))
        unchecked = metrics.registry.get_sample_value("om_api_rate_limit_unavailable_total")
        assert unchecked == 6
    finally:
        nowhere.close()
