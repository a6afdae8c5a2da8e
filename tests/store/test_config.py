"""Settings and URLs: every OM_* variable is read in one place, into its group, under its own
name; PostgreSQL pins psycopg 3."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from pydantic import SecretStr, ValidationError
from pydantic_settings.exceptions import SettingsError

from om_core.policy.usage import ModelPrice
from om_workers.config import DEFAULT_DATABASE_URL, LockSettings, RateLimitSettings, Settings
from om_workers.errors import ConfigError
from om_workers.settings_env import Leaf, env_names, first_error, leaves
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


# Grouped settings, flat variables -------------------------------------------------------------


SAMPLES: dict[str, tuple[str, object]] = {
    "OM_PRICES": (
        '{"gpt-x": {"input": 0.15, "output": 0.6}}',
        {"gpt-x": ModelPrice(input=0.15, output=0.6)},
    ),
    "OM_PROXY_UPSTREAM_URL": ("http://h:1/v1", "http://h:1/v1"),
}
"""Settings whose values have a shape of their own, by variable."""


def _sample(leaf: Leaf) -> tuple[str, object]:
    """A valid value for ``leaf`` as its variable would hold it, and as the setting reads it:
    next to its default, so every bound holds."""
    text, default = str(leaf.field.annotation), leaf.field.default
    if leaf.env[0] in SAMPLES:
        return SAMPLES[leaf.env[0]]
    if "SecretStr" in text:
        return "s3cret", "s3cret"
    if "Literal" in text:
        choice = next(c for c in get_args(leaf.field.annotation) if c != default)
        return str(choice), choice
    if "dict" in text:
        return '{"observation": {"messageTokens": 2000}}', {"observation": {"messageTokens": 2000}}
    if "bool" in text:
        return str(not default).lower(), not default
    if "Path" in text:
        return "/etc/om/prompts.toml", Path("/etc/om/prompts.toml")
    if "int" in text:
        return str(default + 1), default + 1
    if "float" in text:
        value = (default or 2000.0) + 1.5
        return str(value), value
    return "redis://h:1/0", "redis://h:1/0"


def _read(settings: Settings, leaf: Leaf) -> object:
    owner = settings if leaf.group is None else getattr(settings, leaf.group)
    value = getattr(owner, leaf.name)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


@pytest.mark.parametrize("leaf", leaves(Settings), ids=lambda leaf: leaf.env[0])
def test_every_setting_is_read_from_its_own_variable(
    monkeypatch: pytest.MonkeyPatch, leaf: Leaf
) -> None:
    for name in env_names(Settings):
        monkeypatch.delenv(name, raising=False)
    raw, expected = _sample(leaf)
    monkeypatch.setenv(leaf.env[0], raw)
    assert _read(Settings(), leaf) == expected
    # The flat keyword (the variable without OM_, lower case) reads the same.
    monkeypatch.delenv(leaf.env[0])
    value = expected if isinstance(expected, dict) else raw
    assert _read(Settings(**{leaf.flat_names[0]: value}), leaf) == expected


def test_flat_and_grouped_keywords_override_the_environment_leaf_by_leaf(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OM_LOCK_TTL_S", "30")
    monkeypatch.setenv("OM_RATE_READS_BURST", "7")
    assert Settings().locks.ttl_s == 30
    assert Settings(lock_ttl_s=5).locks.ttl_s == 5
    assert Settings(locks={"ttl_s": 6}).locks.ttl_s == 6
    assert Settings(locks=LockSettings(ttl_s=9)).locks.ttl_s == 9
    limits = Settings(rate_reads_per_s=3).rate_limits
    assert (limits.reads_per_s, limits.reads_burst) == (3, 7)  # the other leaf from the env
    # A group object is taken whole: its defaults replace the environment's values.
    assert Settings(rate_limits=RateLimitSettings()).rate_limits.reads_burst == 1200


def test_the_old_memory_settings_name_and_broken_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OM_SETTINGS_JSON", raising=False)
    monkeypatch.setenv("OM_MEMORY_SETTINGS", '{"context": {"recentMessages": 4}}')
    assert Settings().memory_settings == {"context": {"recentMessages": 4}}
    monkeypatch.setenv("OM_SETTINGS_JSON", '{"context": {"recentMessages": 6}}')
    assert Settings().memory_settings == {"context": {"recentMessages": 6}}  # the new name wins
    assert Settings(memory_settings={}).memory_settings == {}  # a keyword replaces, never merges
    monkeypatch.setenv("OM_SETTINGS_JSON", "{not json")
    with pytest.raises(SettingsError, match="OM_SETTINGS_JSON is not JSON"):
        Settings()


def test_errors_name_the_variable_and_unknown_keywords_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OM_MAX_BODY_BYTES", "lots")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert first_error(caught.value).startswith("OM_MAX_BODY_BYTES: ")
    monkeypatch.delenv("OM_MAX_BODY_BYTES")
    with pytest.raises(ValidationError, match="lok_ttl_s"):
        Settings(lok_ttl_s=5)
    monkeypatch.setenv("OM_BROKER_URL", "")  # compose's ${OM_BROKER_URL:-}: unset
    assert Settings().redis.broker_url is None


def test_a_copy_takes_the_same_names_and_is_validated() -> None:
    base = Settings(lock_ttl_s=30, rate_reads_burst=7)
    copy = base.model_copy(update={"rate_limits_enabled": False, "locks": {"ttl_s": 5}})
    assert (copy.rate_limits.enabled, copy.rate_limits.reads_burst) == (False, 7)
    assert copy.locks.ttl_s == 5 and base.locks.ttl_s == 30
    with pytest.raises(ValidationError, match="OM_LOCK_TTL_S"):
        base.model_copy(update={"lock_ttl_s": -1})
    with pytest.raises(ValidationError, match="lok_ttl_s"):
        base.model_copy(update={"lok_ttl_s": 1})
