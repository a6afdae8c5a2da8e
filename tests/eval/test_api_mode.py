"""``--api``: the replay through a live API whose flush jobs run the real job code in threads
(no Celery: ``run_flush_job`` is what the worker task calls), against real Redis and SQLite."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_workers.config import Settings, get_settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.store import SqlStore, upgrade
from tests.api.server import ADMIN_TOKEN, LiveApi, Published, serve
from tests.eval import synthetic


@pytest.fixture(scope="module")
def api_with_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('eval-api') / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    with EmbeddedRedis() as server:
        client = connect(server.url)

        def publish(tenant_id: str, session_id: str, job_id: str) -> None:
            threading.Thread(
                target=run_flush_job, args=(deps, tenant_id, session_id, job_id), daemon=True
            ).start()

        deps = FlushDeps(
            store=store, redis=client, publish=publish, memory_settings=synthetic.SETTINGS
        )
        settings = Settings(
            database_url=database_url, redis_url=server.url, admin_token=ADMIN_TOKEN
        )
        with serve(settings, store, client, Published(), publish=publish) as live:
            yield live
        client.close()
    store.close()


def test_api_mode_replays_through_the_stack(
    api_with_jobs: LiveApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, http = api_with_jobs.tenant()
    key = http.headers["Authorization"].removeprefix("Bearer ")
    http.close()
    monkeypatch.delenv("OM_API_KEY", raising=False)
    get_settings.cache_clear()
    out = tmp_path / "r.json"
    data = str(synthetic.write(tmp_path))
    args = ["eval", "locomo", data, "--api", api_with_jobs.url, "--key", key, "--force"]
    result = CliRunner().invoke(app, [*args, "--json-file", str(out)])
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["meta"]["mode"] == "api"
    [conv] = report["conversations"]
    assert conv["session_id"].startswith("locomo-tiny-")
    # The stack observes with the same settings and provider as the in-process replay, and
    # its context and recall tell the harness the same: the same figures.
    overall = report["overall"]
    assert (overall["grounded"], overall["ungrounded"], overall["answer_scored"]) == (3, 4, 5)
    assert overall["evidence_turns_reachable"] == overall["evidence_turns"] == 10
    assert conv["turns_out_of_reach"] == 0 and conv["gap"]["messages"] == 0
    assert conv["memory_items_shown"] > 0
    grounded = [q["grounded"] for q in conv["questions"]]
    assert grounded == [synthetic.EXPECTED[i][0] for i in range(9)]
    # A second replay gets a fresh session: entry ids never collide within the tenant.
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
