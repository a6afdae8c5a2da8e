"""The worker harness the e2e tests and benchmarks start workers with."""

from __future__ import annotations

from pathlib import Path

from om_workers.coordination.embedded import EmbeddedRedis
from tests.e2e.workers import Worker, worker_env


def test_a_reused_log_does_not_make_a_new_worker_ready_early(
    redis_server: EmbeddedRedis, database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "reused.log"
    log.write_text("celery@old ready.\n")  # what the worker before left in the same file
    worker = Worker("again", worker_env(redis_server.url, database_url), log)
    try:
        worker.wait_ready()
        own = log.read_text()[len("celery@old ready.\n") :]
        assert " ready." in own
    finally:
        worker.stop()
