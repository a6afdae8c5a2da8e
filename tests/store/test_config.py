"""Settings and URLs: OM_DATABASE_URL is read in one place; PostgreSQL pins psycopg 3."""

from __future__ import annotations

import pytest

from om_workers.config import DEFAULT_DATABASE_URL, Settings
from om_workers.errors import ConfigError
from om_workers.store import normalize_database_url


def test_database_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OM_DATABASE_URL", raising=False)
    assert Settings().store.url == DEFAULT_DATABASE_URL == "sqlite:///./om.db"
    monkeypatch.setenv("OM_DATABASE_URL", "sqlite:////tmp/x.db")
    assert Settings().store.url == "sqlite:////tmp/x.db"


def test_urls_are_normalised_or_refused() -> None:
    assert normalize_database_url("postgresql://u@h:5432/db") == "postgresql+psycopg://u@h:5432/db"
    assert normalize_database_url("sqlite:///./om.db") == "sqlite:///./om.db"
    for bad in ("mysql://u@h/db", "not a url"):
        with pytest.raises(ConfigError):
            normalize_database_url(bad)
