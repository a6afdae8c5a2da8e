"""Fixtures every suite shares: one private, real Redis server per test run (never the
machine's; a container of ``OM_TEST_REDIS_IMAGE`` when that is set, see
``tests/containers/redis_server.py``), a client on it that starts each test on an empty
database, and a migrated store:
a real SQLite file always, PostgreSQL too when ``OM_TEST_DATABASE_URL`` is set (skipped, with
the reason, when it is not). Each
PostgreSQL test gets a fresh schema (via the URL's ``search_path``, so child processes reach
the same tables) and drops it afterwards."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, normalize_database_url, upgrade
from tests.containers.redis_server import private_redis

# Per-key rate limits are off for every suite (and the API processes it starts, which inherit
# the environment): load, chaos and burst tests would otherwise measure the limiter. They are
# on, with small limits, in tests/api/test_rate_limits.py.
os.environ.setdefault("OM_RATE_LIMITS_ENABLED", "false")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Why tests were skipped, one line a reason with its count (``-rs`` lists every test)."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"skipped {count}: {reason}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with private_redis() as server:
        yield server


@pytest.fixture
def client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    conn = connect(redis_server.url)
    conn.flushdb()
    yield conn
    conn.close()


PG_URL = os.environ.get("OM_TEST_DATABASE_URL")
needs_postgres = pytest.mark.skipif(
    PG_URL is None,
    reason="PostgreSQL: OM_TEST_DATABASE_URL is not set "
    "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/om_test)",
)
BACKENDS = [pytest.param("sqlite"), pytest.param("postgresql", marks=needs_postgres)]
"""Every SQL store a test runs on; the PostgreSQL cases show as skipped, with the reason, when
no PostgreSQL is configured."""


def _pg_schema_url(base: str, schema: str) -> str:
    url = make_url(normalize_database_url(base))
    return url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False
    )


@contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database's URL: a SQLite file in tmp_path, or a fresh PostgreSQL schema."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'om.db'}"
        return
    assert PG_URL is not None
    schema = f"om_t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(normalize_database_url(PG_URL))
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        yield _pg_schema_url(PG_URL, schema)
        with admin.begin() as connection:
            connection.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on each backend (see :func:`fresh_database`)."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def migrated_url(database_url: str) -> str:
    upgrade(database_url)
    return database_url


@pytest.fixture
def store(migrated_url: str) -> Iterator[SqlStore]:
    instance = SqlStore.from_url(migrated_url)
    yield instance
    instance.close()


@pytest.fixture
def accounts(store: SqlStore) -> AccountStore:
    """Tenants and keys, on the store's engine."""
    return AccountStore(store.engine)


@pytest.fixture
def tenant(accounts: AccountStore) -> str:
    return accounts.create_tenant("acme").id


@pytest.fixture
def session_id(store: SqlStore, tenant: str) -> str:
    return store.create_session(tenant, "s1").id
