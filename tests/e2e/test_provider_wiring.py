"""``OM_PROVIDER`` and friends wired into the worker: adapter, URL, key, models, retry policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import redis
from pydantic import SecretStr

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ProviderResponse
from om_workers.celery import app as tasks
from om_workers.config import Settings, get_settings
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.errors import ConfigError
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.providers import AnthropicProvider, OpenAICompatibleProvider
from om_workers.providers.setup import (
    provider_factory,
    provider_secrets,
    retry_policy,
    worker_models,
)
from om_workers.store import SqlStore
from tests.e2e import llm_server
from tests.e2e.support import add_chat, fully_observed

KEY = "sk-wiring-0123456789abcdef"


def test_openai_provider_from_settings_talks_to_the_base_url_with_the_key() -> None:
    with llm_server.running() as server:
        settings = Settings(
            provider="openai", provider_base_url=server.url, provider_api_key=SecretStr(KEY)
        )
        factory = provider_factory(settings)
        provider = factory()
        assert isinstance(provider, OpenAICompatibleProvider) and factory() is provider
        request = ProviderRequest(
            messages=(), model="gpt-test", correlation_id="om:wired", tools=()
        )
        assert provider.generate(request).message.tool_calls == ()
        assert server.calls_for("wired") == 1 and server.models["gpt-test"] == 1


def test_anthropic_and_extractive_and_module_factories() -> None:
    anthropic = provider_factory(Settings(provider="anthropic", provider_base_url="http://x"))()
    assert isinstance(anthropic, AnthropicProvider)
    assert isinstance(provider_factory(Settings())(), ExtractiveProvider)
    slow = provider_factory(Settings(provider="tests.e2e.providers:slow"))
    assert slow() is not slow()  # factories are called per run
    for bad in ("gpt", "tests.e2e.providers:missing", "no_such_module:make"):
        with pytest.raises(ConfigError):
            provider_factory(Settings(provider=bad))


def test_key_is_a_redaction_secret_and_never_in_the_settings_repr() -> None:
    settings = Settings(provider="openai", provider_api_key=SecretStr(KEY))
    assert provider_secrets(settings) == (KEY,)
    assert KEY not in repr(settings) and KEY not in str(settings.model_dump())
    assert provider_secrets(Settings()) == ()


def test_retry_policy_and_models_follow_the_settings() -> None:
    policy = retry_policy(Settings(provider_max_attempts=5, backoff_base_s=0.1, backoff_cap_s=2.0))
    assert (policy.attempts, policy.base_s, policy.cap_s) == (5, 0.1, 2.0)
    assert policy.give_up_on_long_retry_after and policy.jitter == 0.5
    assert policy.max_retry_after_s == 2.0  # a longer Retry-After would break the time limits
    assert worker_models(Settings(observer_model="o", dropper_model="d")) == {
        "observer": "o",
        "dropper": "d",
    }


class Recording(ExtractiveProvider):
    models: ClassVar[list[str]] = []

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        Recording.models.append(request.model)
        return super().generate(request)


def test_per_worker_model_overrides_the_session_model(
    store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "m")
    messages = add_chat(store, tenant, "m", 2)
    Recording.models = []
    deps = FlushDeps(
        store=store,
        redis=client,
        publish=lambda t, s, j: None,
        provider=Recording,
        model="session-model",
        memory_settings={"observation": {"messageTokens": 1}},
        worker_models={"observer": "observer-model"},
    )
    job = request_flush(store, client, tenant, "m", publish=deps.publish).job_id
    assert run_flush_job(deps, tenant, "m", job).outcome == "succeeded"
    assert fully_observed(store, tenant, "m", messages)
    assert Recording.models and set(Recording.models) == {"observer-model"}


@pytest.fixture
def worker_settings(
    monkeypatch: pytest.MonkeyPatch, redis_server: EmbeddedRedis, database_url: str
) -> Iterator[None]:
    monkeypatch.setenv("OM_REDIS_URL", redis_server.url)
    monkeypatch.setenv("OM_DATABASE_URL", database_url)
    monkeypatch.setenv("OM_PROVIDER", "openai")
    monkeypatch.setenv("OM_PROVIDER_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OM_PROVIDER_API_KEY", KEY)
    monkeypatch.setenv("OM_REFLECTOR_MODEL", "reflector-model")
    caches = (get_settings, tasks.get_app, tasks.worker_deps)
    for cache in caches:
        cache.cache_clear()
    yield
    deps = tasks.worker_deps()
    deps.store.close()
    deps.redis.close()
    for cache in caches:
        cache.cache_clear()


def test_worker_deps_carry_provider_key_and_models(worker_settings: None, tmp_path: Path) -> None:
    deps = tasks.worker_deps()
    assert isinstance(deps.provider(), OpenAICompatibleProvider)
    assert deps.secrets == (KEY,)
    assert deps.worker_models == {"reflector": "reflector-model"}
