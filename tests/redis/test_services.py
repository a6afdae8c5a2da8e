"""The composition root (:mod:`om_workers.services`) against real SQLite and the private Redis:
it builds a working store and client from settings, and the API and the worker both take
their dependencies from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from om_api.server.app import create_app
from om_api.server.state import ApiState
from om_core.flush.extractive import ExtractiveProvider
from om_workers.celery import app as tasks
from om_workers.config import Settings, get_settings
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.errors import ConfigError
from om_workers.jobs.requests import request_flush
from om_workers.providers import OpenAICompatibleProvider
from om_workers.services import Services, build_services
from om_workers.store import upgrade

KEY = "sk-services-0123456789abcdef"
MEMORY = {"observation": {"messageTokens": 123}}


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    return url


@pytest.fixture
def services(database_url: str, redis_server: EmbeddedRedis) -> Iterator[Services]:
    settings = Settings(
        database_url=database_url,
        redis_url=redis_server.url,
        provider_api_key=SecretStr(KEY),
        observer_model="observer-model",
        memory_settings=MEMORY,
    )
    built = build_services(settings)
    built.redis.flushdb()
    yield built
    built.close()


def test_builds_a_working_store_and_redis_from_settings(services: Services) -> None:
    tenant = services.accounts.create_tenant("acme").id
    services.store.create_session(tenant, "s1")
    published: list[str] = []
    deps = services.flush_deps(lambda t, s, job: published.append(job))
    request = request_flush(deps.store, deps.redis, tenant, "s1", publish=deps.publish)
    assert published == [request.job_id] and not request.coalesced
    assert services.store.get_job(tenant, request.job_id).state == "queued"
    assert services.redis.ping()
    assert services.secrets == (KEY,)
    assert services.memory().observation.message_tokens == 123
    assert services.memory() is services.memory()  # resolved once
    assert services.provider_factory() is services.provider_factory()  # built once


def test_flush_deps_are_the_services(services: Services) -> None:
    def publish(tenant_id: str, session_id: str, job_id: str) -> None:
        return None

    deps = services.flush_deps(publish)
    settings = services.settings
    assert (deps.store, deps.redis, deps.publish) == (services.store, services.redis, publish)
    assert isinstance(deps.provider(), ExtractiveProvider)
    assert (deps.model, deps.lock_ttl_s, deps.max_deliveries) == (
        settings.llm.model,
        settings.locks.ttl_s,
        settings.delivery.max_deliveries,
    )
    assert deps.memory_settings == MEMORY and type(deps.memory_settings) is dict
    assert deps.secrets == (KEY,)
    assert deps.worker_models == {"observer": "observer-model"}
    # The offline provider computes in the worker's process: its flushes run one at a time.
    assert deps.compute_lock is not None


def test_a_provider_outside_the_process_runs_flushes_side_by_side(
    database_url: str, redis_server: EmbeddedRedis
) -> None:
    settings = Settings(
        database_url=database_url, redis_url=redis_server.url, provider="tests.e2e.providers:slow"
    )
    built = build_services(settings)
    try:
        assert built.flush_deps(lambda t, s, j: None).compute_lock is None
    finally:
        built.close()


def test_the_api_runs_on_the_services(services: Services) -> None:
    state: ApiState = create_app(services=services).state.om
    assert state.services is services
    assert (state.store, state.redis, state.settings) == (
        services.store,
        services.redis,
        services.settings,
    )
    assert state.memory_settings.observation.message_tokens == 123
    assert KEY in state.secrets
    with pytest.raises(ValueError):
        create_app(services.settings, services=services)


def test_unset_redis_url_and_lazy_failures(database_url: str, redis_server: EmbeddedRedis) -> None:
    with pytest.raises(ConfigError, match="OM_REDIS_URL"):
        build_services(Settings(database_url=database_url))
    # A provider the API cannot load does not stop the API; the worker fails at its first task.
    bad = build_services(
        Settings(database_url=database_url, redis_url=redis_server.url, provider="nope")
    )
    try:
        create_app(services=bad)
        with pytest.raises(ConfigError):
            bad.flush_deps(lambda t, s, j: None)
    finally:
        bad.close()
    # Invalid memory settings stop the API at startup; the worker passes them to each run.
    invalid = build_services(
        Settings(
            database_url=database_url,
            redis_url=redis_server.url,
            memory_settings={"observation": {"messageTokens": "many"}},
        )
    )
    try:
        with pytest.raises(ValueError):
            create_app(services=invalid)
        assert invalid.flush_deps(lambda t, s, j: None).memory_settings
    finally:
        invalid.close()


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, redis_server: EmbeddedRedis, database_url: str
) -> Iterator[None]:
    monkeypatch.setenv("OM_REDIS_URL", redis_server.url)
    monkeypatch.setenv("OM_DATABASE_URL", database_url)
    monkeypatch.setenv("OM_PROVIDER", "openai")
    monkeypatch.setenv("OM_PROVIDER_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("OM_PROVIDER_API_KEY", KEY)
    caches = (get_settings, tasks.get_app, tasks.worker_deps)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


def test_api_and_worker_build_the_same_services_from_the_environment(
    environment: None, redis_server: EmbeddedRedis
) -> None:
    state: ApiState = create_app().state.om
    deps = tasks.worker_deps()
    try:
        assert state.store.engine.url == deps.store.engine.url
        api_redis = state.redis.connection_pool.connection_kwargs
        worker_redis = deps.redis.connection_pool.connection_kwargs
        assert api_redis["port"] == worker_redis["port"] == redis_server.port
        assert isinstance(deps.provider(), OpenAICompatibleProvider)
        assert isinstance(state.services.provider_factory()(), OpenAICompatibleProvider)
        assert deps.secrets == state.services.secrets == (KEY,)
        assert KEY in state.secrets
    finally:
        state.services.close()
        deps.store.close()
        deps.redis.close()
