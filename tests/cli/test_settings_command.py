"""``om settings``: the settings in effect, in the groups of docs/settings.md, secrets masked."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from om_api.cli import app
from om_workers.config import get_settings
from om_workers.settings_reference import sections

SECRETS = {
    "OM_PROVIDER_API_KEY": "sk-provider-secret",
    "OM_ADMIN_TOKEN": "admin-secret",
    "OM_API_KEY": "om_key_secret",
    "OM_FLOWER_BASIC_AUTH": "ops:flower-secret",
}


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    # The commands read the cached settings: each test's environment must be the one read.
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _env(**extra: str) -> dict[str, str | None]:
    # Every OM_* variable of the test process cleared, then the given ones.
    cleared: dict[str, str | None] = {k: None for k in os.environ if k.startswith("OM_")}
    return {**cleared, **extra}


def test_text_shows_every_group_and_masks_secrets() -> None:
    env = _env(
        OM_LOCK_TTL_S="30",
        OM_DATABASE_URL="postgresql+psycopg://om:db-secret@db:5432/om",
        **SECRETS,
    )
    result = CliRunner().invoke(app, ["settings"], env=env)
    assert result.exit_code == 0, result.output
    for section in sections():
        assert section.title in result.output
    lines = result.output.splitlines()
    ttl = next(line for line in lines if "OM_LOCK_TTL_S" in line)
    assert ttl.split()[1:] == ["30", "set"]
    workers = next(line for line in lines if "OM_WORKER_CONCURRENCY" in line)
    assert workers.split()[1:] == ["16", "default"]
    for secret in [*SECRETS.values(), "db-secret"]:
        assert secret not in result.output
    assert "postgresql+psycopg://om:***@db:5432/om" in result.output


def test_json_is_grouped_like_the_model() -> None:
    result = CliRunner().invoke(app, ["settings", "--json"], env=_env(**SECRETS))
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["locks"] == {"ttl_s": 60.0}
    assert shown["llm"]["api_key"] == "********" and shown["cli"]["api_key"] == "********"
    assert shown["redis"] == {"url": None, "broker_url": None}
    assert shown["memory_settings"] == {} and shown["log_level"] == "INFO"
    assert not [s for s in SECRETS.values() if s in result.stdout]


def test_a_bad_value_is_one_line_naming_the_variable() -> None:
    result = CliRunner().invoke(app, ["settings"], env=_env(OM_WORKER_CONCURRENCY="many"))
    assert result.exit_code == 2
    assert "om: invalid OM_* settings: OM_WORKER_CONCURRENCY" in result.output


def test_services_without_redis_say_what_to_set() -> None:
    # Only om up, om demo and the tests start a Redis of their own.
    for command in (["worker"], ["beat"], ["flower"], ["queue"]):
        result = CliRunner().invoke(app, command, env=_env())
        assert result.exit_code == 2, (command, result.output)
        assert "OM_REDIS_URL is unset" in result.output, command
        assert "set OM_REDIS_URL=redis://" in result.output and "make up" in result.output
