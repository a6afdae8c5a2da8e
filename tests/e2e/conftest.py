"""Worker tests run on the shared private Redis (tests/conftest.py) and a SQLite store file."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from om_workers.celery.config import create_celery_app
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.coordination.timing import TimeLimits
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.e2e.workers import StartWorker, Worker, worker_env


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[SqlStore]:
    instance = SqlStore.from_url(database_url)
    yield instance
    instance.close()


@pytest.fixture
def tenant(accounts: AccountStore) -> str:
    return accounts.create_tenant("acme").id


@pytest.fixture
def app(redis_server: EmbeddedRedis) -> Any:
    """A publishing Celery app on the test Redis (the API's side of ``om.flush``)."""
    return create_celery_app(
        broker_url=redis_server.url, limits=TimeLimits(60, 70, 80, 90), concurrency=1
    )


@pytest.fixture
def start_worker(
    redis_server: EmbeddedRedis, database_url: str, tmp_path: Path, client: redis.Redis
) -> Iterator[StartWorker]:
    """Starts ``celery worker`` processes on the test Redis and store; all stopped afterwards.
    ``redis_url=`` points one at another Redis; other keywords become its environment."""
    started: list[Worker] = []
    names = itertools.count(1)

    def start(redis_url: str | None = None, **env: str) -> Worker:
        name = f"w{next(names)}"
        worker = Worker(
            name,
            worker_env(redis_url or redis_server.url, database_url, **env),
            tmp_path / f"{name}.log",
        )
        started.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in started:
        worker.stop()
