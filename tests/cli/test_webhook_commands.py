"""``om webhooks add|list|remove|deliveries|redeliver`` on the database: the secret printed
once and never listed, private URLs refused (exit 1, saying why), deliveries listed with their
failures and redelivered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_workers.config import get_settings
from om_workers.store import AccountStore, SqlStore, upgrade

PUBLIC_URL = "https://93.184.216.34/hooks/om"


@pytest.fixture
def no_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Settings read afresh without OM_REDIS_URL (a redelivery then waits for the
    reconciler) and with private addresses refused."""
    monkeypatch.delenv("OM_REDIS_URL", raising=False)
    monkeypatch.delenv("OM_WEBHOOK_ALLOW_PRIVATE", raising=False)
    get_settings.cache_clear()
    yield None
    get_settings.cache_clear()


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["webhooks", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.usefixtures("no_redis")
def test_add_list_deliveries_redeliver_remove(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    AccountStore.from_url(url).create_tenant("acme")
    db = ("--database-url", url)

    code, out, err = _run("add", "acme", PUBLIC_URL, "--event", "flush.failed", *db)
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("whsec_") and "shown once" in err
    code, out, _ = _run("list", "acme", "--json", *db)
    assert code == 0 and secret not in out
    (endpoint,) = json.loads(out)["endpoints"]
    assert endpoint["event_types"] == ["flush.failed"]

    code, _, err = _run("add", "acme", "http://127.0.0.1:8080/hook", *db)
    assert code == 1 and "loopback" in err, err
    code, _, err = _run("add", "acme", PUBLIC_URL, "--event", "flush.done", *db)
    assert code == 2 and "flush.done" in err, err

    store = SqlStore.from_url(url)
    try:
        store.create_session("acme", "s1")
        job = store.create_job("acme", "s1")
        store.finish_job("acme", job.id, "failed", error="boom")
        (delivery_id,) = store.webhooks.pending_of(job.id)
        assert store.webhooks.claim(delivery_id, lease_s=60) is not None
        store.webhooks.record(
            delivery_id, 1, status=500, error="HTTP 500", retry_in_s=None, delivered=False
        )
    finally:
        store.close()
    code, out, _ = _run("deliveries", "acme", "--failing", *db)
    assert code == 0 and delivery_id in out and "failed" in out and "HTTP 500" in out, out
    code, _, err = _run("redeliver", "acme", delivery_id, *db)
    assert code == 0 and "reconciler" in err, err
    code, out, _ = _run("deliveries", "acme", "--json", *db)
    (again,) = json.loads(out)["deliveries"]
    assert (again["state"], again["attempts"]) == ("pending", 0)
    code, _, err = _run("redeliver", "acme", "msg_missing", *db)
    assert code == 1 and "msg_missing" in err

    code, _, _ = _run("remove", "acme", endpoint["id"], *db)
    assert code == 0
    code, _, err = _run("remove", "acme", endpoint["id"], *db)
    assert code == 1 and endpoint["id"] in err
