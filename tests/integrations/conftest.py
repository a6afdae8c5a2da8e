"""A running stack for the integrations' tests: the embedded stack of ``om up`` (private Redis,
SQLite, the API over HTTP, one worker; no beat, no Flower) with the extractive provider and
settings that observe every message, so a flush makes observations at once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from om_api.cli.stack import Stack, StackConfig, StackInfo
from tests.e2e.support import LOW


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """The stack's URLs and a dev tenant's API key (``info.api_url``, ``info.api_key``)."""
    root = tmp_path_factory.mktemp("integrations")
    config = StackConfig(
        database_url=f"sqlite:///{root / 'om.db'}",
        api_port=0,
        flower_port=0,
        beat=False,
        flower=False,
        env={"OM_SETTINGS_JSON": json.dumps(LOW)},
        log_dir=root / "logs",
    )
    with Stack(config) as running:
        yield running.info
