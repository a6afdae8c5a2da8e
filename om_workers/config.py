"""Runtime configuration: every ``OM_*`` environment variable is read here and nowhere else.

:class:`Settings` groups the knobs by concern, each group a frozen model: ``settings.store.url``
(``OM_DATABASE_URL``), ``settings.locks.ttl_s`` (``OM_LOCK_TTL_S``) ... Every leaf names its
own variable (:func:`~om_workers.settings_env.setting`), so the environment stays flat and
each variable keeps its name; :mod:`om_workers.settings_env` does the mapping, and
:mod:`om_workers.settings_reference` renders ``docs/settings.md`` from these fields. Python code
may pass the flat names too: ``Settings(lock_ttl_s=5, redis_url=...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from om_core.policy.fairness import DEFAULT_HALF_LIFE_S
from om_core.policy.usage import ModelPrice
from om_core.read.context import MIN_CONTEXT_TOKENS
from om_workers.settings_env import FlatSettingsSource, merge, setting

DEFAULT_DATABASE_URL = "sqlite:///./om.db"

DEFAULT_CONTEXT_MAX_TOKENS = 32_000
"""A context read's default budget, estimated tokens: a quarter of a 128k-token model window,
leaving the rest to the agent's own prompt, tools and answer."""

REDIS_REQUIRED = (
    "OM_REDIS_URL is unset: om api, om worker, om beat, om flower and om queue need the Redis "
    "the whole deployment shares; set OM_REDIS_URL=redis://HOST:PORT/0 (with om up or make up "
    "running, use the Redis URL it prints), or run the whole stack with om up"
)
"""What a process that needs the shared Redis says when ``OM_REDIS_URL`` is unset."""


def _group(title: str) -> ConfigDict:
    # The title heads the group's section in docs/settings.md and in om settings.
    return ConfigDict(frozen=True, extra="forbid", title=title, validate_by_name=True)


class StoreSettings(BaseModel):
    """Where sessions, memory records, flush jobs, tenants and API keys are kept."""

    model_config = _group("Store")

    url: str = setting(
        "OM_DATABASE_URL",
        DEFAULT_DATABASE_URL,
        min_length=1,
        description="SQLAlchemy URL of the store: a SQLite file, or "
        "postgresql://user:password@host:5432/db in production (driven by psycopg 3).",
    )
    pool_size: int = setting(
        "OM_DATABASE_POOL_SIZE",
        20,
        ge=1,
        le=1000,
        description="Database connections a process keeps open (and as many more while "
        "busier, closed after use); an API process serves up to 40 requests at once.",
    )


class RedisSettings(BaseModel):
    """Redis holds the session locks, the flush coalescing markers, the fair queue and the
    rate limits, and is the Celery broker unless OM_BROKER_URL names RabbitMQ. Only om up,
    om demo and the tests start a private Redis of their own; every other process needs
    OM_REDIS_URL."""

    model_config = _group("Redis and the broker")

    url: str | None = setting(
        "OM_REDIS_URL",
        description="Redis URL; om api, om worker, om beat, om flower and om queue refuse to "
        "start without it, om up and om demo start a private Redis (om up prints its URL).",
    )
    broker_url: str | None = setting(
        "OM_BROKER_URL",
        description="Celery broker; unset or empty: OM_REDIS_URL. "
        "amqp://user:password@host:5672/vhost: RabbitMQ (quorum queue om, publisher confirms).",
    )

    @field_validator("broker_url")
    @classmethod
    def _empty_broker_is_unset(cls, value: str | None) -> str | None:
        """An empty ``OM_BROKER_URL`` (compose's ``${OM_BROKER_URL:-}``) means unset. The
        scheme is checked where the Celery app is built (``om_workers.celery.config``), so a
        bad URL's password never lands in a validation error."""
        if value is None:
            return None
        return value.strip() or None


class LlmSettings(BaseModel):
    """The provider the memory workers (observer, reflector, dropper) call, and how each call
    is bounded and retried. The flush time limits are derived from the last four."""

    model_config = _group("Provider")

    provider: str = setting(
        "OM_PROVIDER",
        "extractive",
        min_length=1,
        description="extractive (offline, no model), openai (any OpenAI-compatible server), "
        "anthropic, or package.module:factory returning an om_core Provider.",
    )
    model: str = setting(
        "OM_MODEL", "extractive", min_length=1, description="Model name the workers ask for."
    )
    observer_model: str | None = setting(
        "OM_OBSERVER_MODEL",
        description="The observer's model; unset: observation.model of the memory settings, "
        "else OM_MODEL.",
    )
    reflector_model: str | None = setting(
        "OM_REFLECTOR_MODEL",
        description="The reflector's model; unset: reflection.model, else OM_MODEL.",
    )
    dropper_model: str | None = setting(
        "OM_DROPPER_MODEL",
        description="The dropper's model; unset: dropper.model, else OM_MODEL.",
    )
    base_url: str | None = setting(
        "OM_PROVIDER_BASE_URL",
        description="Base URL of the openai or anthropic API; unset: the vendor's own.",
    )
    api_key: SecretStr | None = setting(
        "OM_PROVIDER_API_KEY",
        description="Provider API key; redacted from every log line, stored error and answer.",
    )
    prompts_file: Path | None = setting(
        "OM_PROMPTS_FILE",
        description="TOML or JSON file with a version name and observer/reflector "
        "instructions, checked at start-up; unset: the built-in observer-2/reflector-2.",
    )
    http_timeout_s: float = setting(
        "OM_HTTP_TIMEOUT_S", 60.0, gt=0, description="Timeout of one provider HTTP call, seconds."
    )
    max_attempts: int = setting(
        "OM_PROVIDER_MAX_ATTEMPTS",
        3,
        ge=1,
        description="Calls per provider request: the first one and its retries.",
    )
    backoff_base_s: float = setting(
        "OM_BACKOFF_BASE_S",
        0.5,
        ge=0,
        description="First wait before a provider retry, seconds; doubles per retry (jitter).",
    )
    backoff_cap_s: float = setting(
        "OM_BACKOFF_CAP_S",
        30.0,
        gt=0,
        description="Longest wait before a provider retry, seconds; a longer Retry-After gives "
        "up at once.",
    )
    prices: dict[str, ModelPrice] = setting(
        "OM_PRICES",
        dict,
        description='JSON price per million tokens by model, {"gpt-4o-mini": {"input": 0.15, '
        '"output": 0.6}}, for the cost figures of om usage and the usage routes; a model '
        "without a price has no cost.",
    )


class LockSettings(BaseModel):
    """One flush runs per session at a time, under a Redis lock its holder keeps alive."""

    model_config = _group("Session locks")

    ttl_s: float = setting(
        "OM_LOCK_TTL_S",
        60.0,
        gt=0,
        description="TTL of a session lock, seconds; the heartbeat extends it every TTL/3. On "
        "the Redis broker it must be below the visibility timeout.",
    )


class ErasureSettings(BaseModel):
    """Erasure jobs (DELETE of a session, a subject or a tenant, and retention) and the
    retention pass."""

    model_config = _group("Erasure and retention")

    chunk_entries: int = setting(
        "OM_ERASE_CHUNK_ENTRIES",
        2000,
        ge=1,
        description="Entries an erasure deletes per transaction; smaller chunks give other "
        "writers the database back sooner, larger ones erase a long session faster.",
    )
    pause_s: float = setting(
        "OM_ERASE_PAUSE_S",
        0.0,
        ge=0,
        description="Seconds an erasure waits between two chunks, leaving the database to "
        "other tenants meanwhile; 0: no pause (erasures finish soonest).",
    )
    retry_after_s: float = setting(
        "OM_ERASE_RETRY_AFTER_S",
        120.0,
        gt=0,
        description="An erasure job that made no progress for this long (its worker died) is "
        "published again by the reconciler, which finishes it.",
    )
    retention_interval_s: float = setting(
        "OM_RETENTION_INTERVAL_S",
        3600.0,
        gt=0,
        description="Seconds between two retention passes (Celery beat), each erasing the "
        "sessions idle longer than their tenant's retention_days.",
    )
    retention_batch: int = setting(
        "OM_RETENTION_BATCH",
        500,
        ge=1,
        description="Sessions one retention pass erases per tenant at most; the rest wait for "
        "the next pass.",
    )


class DeliverySettings(BaseModel):
    """How long a flush job may run and when its message is given back. The time limits are
    derived from the provider settings unless set; set the soft and hard limits together. The
    workers refuse to start unless OM_HTTP_TIMEOUT_S < soft limit < hard limit < visibility
    timeout (RabbitMQ: the first three only)."""

    model_config = _group("Delivery and time limits")

    max_deliveries: int = setting(
        "OM_MAX_DELIVERIES",
        5,
        ge=1,
        description="Deliveries of one flush job's message before it is failed as poison.",
    )
    queue_wait_s: float = setting(
        "OM_QUEUE_WAIT_S",
        300.0,
        ge=0,
        description="Longest a delivered message waits in a worker's prefetch before it "
        "starts, seconds; part of the derived visibility timeout.",
    )
    soft_time_limit_s: float | None = setting(
        "OM_SOFT_TIME_LIMIT_S",
        gt=0,
        description="Celery soft time limit of a flush job, seconds; unset: three full "
        "provider retry chains (observer, reflector, dropper) plus 10 %.",
    )
    hard_time_limit_s: float | None = setting(
        "OM_HARD_TIME_LIMIT_S",
        gt=0,
        description="Celery hard time limit, seconds (the task is killed); unset: the soft "
        "limit plus a grace of max(30 s, 10 %).",
    )
    visibility_timeout_s: float | None = setting(
        "OM_VISIBILITY_TIMEOUT_S",
        gt=0,
        description="Redis broker: seconds until an unacked message is redelivered; unset: "
        "the hard limit + OM_QUEUE_WAIT_S + the same grace. RabbitMQ: the stuck-job age only.",
    )
    reconcile_interval_s: float = setting(
        "OM_RECONCILE_INTERVAL_S",
        60.0,
        gt=0,
        description="Period of om.reconcile on beat, seconds: re-publishes lost work, fails "
        "dead workers' jobs.",
    )


class WebhookSettings(BaseModel):
    """Signed webhooks (Standard Webhooks) to the endpoints tenants register: each attempt's
    timeout, the retry schedule, and whether private addresses may be called."""

    model_config = _group("Webhooks")

    timeout_s: float = setting(
        "OM_WEBHOOK_TIMEOUT_S",
        10.0,
        gt=0,
        le=120,
        description="Seconds one delivery attempt may take (connect, send, answer).",
    )
    max_attempts: int = setting(
        "OM_WEBHOOK_MAX_ATTEMPTS",
        12,
        ge=1,
        le=100,
        description="Attempts of one delivery before it is failed (an admin can redeliver it).",
    )
    backoff_base_s: float = setting(
        "OM_WEBHOOK_BACKOFF_BASE_S",
        5.0,
        gt=0,
        description="Seconds before the first retry of a failed delivery; each later retry "
        "waits twice as long, up to OM_WEBHOOK_BACKOFF_CAP_S (less up to a quarter, jitter).",
    )
    backoff_cap_s: float = setting(
        "OM_WEBHOOK_BACKOFF_CAP_S",
        3600.0,
        gt=0,
        description="Longest wait between two attempts of one delivery, seconds.",
    )
    allow_private: bool = setting(
        "OM_WEBHOOK_ALLOW_PRIVATE",
        False,
        description="Allow endpoints whose host resolves to a private, loopback or "
        "link-local address (refused by default: no server-side request forgery).",
    )


class WorkerProcessSettings(BaseModel):
    """What one om worker process runs and serves."""

    model_config = _group("Workers")

    concurrency: int = setting(
        "OM_WORKER_CONCURRENCY",
        16,
        ge=1,
        description="Task slots (threads) per worker; om worker --concurrency overrides it.",
    )
    metrics_port: int = setting(
        "OM_WORKER_METRICS_PORT",
        0,
        ge=0,
        le=65535,
        description="Port of the worker's Prometheus /metrics; 0: no worker metrics at all.",
    )
    metrics_host: str = setting(
        "OM_WORKER_METRICS_HOST",
        "127.0.0.1",
        description="Address the worker metrics server binds (0.0.0.0 in a container).",
    )


class FairQueueSettings(BaseModel):
    """Flush jobs reach the broker fairly across tenants: only as many as the live workers
    have task slots at once, each free slot to the tenant served least lately."""

    model_config = _group("Fair queue")

    enabled: bool = setting(
        "OM_FAIR_QUEUEING",
        True,
        description="Admit flush jobs fairly across tenants; false: first in, first out.",
    )
    capacity: int = setting(
        "OM_FAIR_QUEUE_CAPACITY",
        0,
        ge=0,
        description="Flush jobs admitted to the broker or running at once; 0: the live "
        "workers' task slots.",
    )
    half_life_s: float = setting(
        "OM_FAIR_QUEUE_HALF_LIFE_S",
        DEFAULT_HALF_LIFE_S,
        ge=0.001,
        description="Seconds until a tenant's past admissions count half against it.",
    )


class RateLimitSettings(BaseModel):
    """Per-API-key limits per request class, enforced in Redis across API replicas: sustained
    requests per second and the burst an idle key may send at once. Admins override them per
    tenant (om tenants limits). Over a limit the API answers 429 with Retry-After; with Redis
    unreachable the limiter lets requests pass.

    The defaults are about twice what one agent server sends on one key with 64 agents turning
    as fast as two API processes answer them (about 310 turns a second on two cores, each a
    read, an append and a flush request; tests/bench/results.md, section 13), and well below
    what a runaway loop of reads gets served without limits there."""

    model_config = _group("Rate limits")

    enabled: bool = setting(
        "OM_RATE_LIMITS_ENABLED", True, description="Enforce the per-key rate limits."
    )
    appends_per_s: float = setting(
        "OM_RATE_APPENDS_PER_S", 600.0, gt=0, le=1e6, description="Appends per second per key."
    )
    appends_burst: int = setting(
        "OM_RATE_APPENDS_BURST", 1200, ge=1, description="Appends an idle key may send at once."
    )
    flushes_per_s: float = setting(
        "OM_RATE_FLUSHES_PER_S", 600.0, gt=0, le=1e6, description="Flush requests per second."
    )
    flushes_burst: int = setting(
        "OM_RATE_FLUSHES_BURST", 1200, ge=1, description="Flush requests an idle key sends at once."
    )
    reads_per_s: float = setting(
        "OM_RATE_READS_PER_S", 600.0, gt=0, le=1e6, description="Reads per second per key."
    )
    reads_burst: int = setting(
        "OM_RATE_READS_BURST", 1200, ge=1, description="Reads an idle key may send at once."
    )
    cache_s: float = setting(
        "OM_RATE_LIMIT_CACHE_S",
        2.0,
        ge=0,
        description="How long an API process keeps a tenant's overrides before reading them "
        "again, seconds (0: every request).",
    )


class ApiSettings(BaseModel):
    """The HTTP API (om api, and om up's)."""

    model_config = _group("HTTP API")

    port: int = setting(
        "OM_API_PORT",
        8000,
        ge=0,
        le=65535,
        description="Port of om api and om up (0: any free port).",
    )
    workers: int = setting(
        "OM_API_WORKERS",
        1,
        ge=1,
        le=64,
        description="Processes om api serves its port from (om api --workers); more than one "
        "when the API is busier than one core.",
    )
    read_threads: int = setting(
        "OM_API_READ_THREADS",
        16,
        ge=1,
        le=256,
        description="Threads of an API process that read contexts (GET .../context) at once; "
        "more wait their turn. Apart from appends and flush requests, so that a burst of those "
        "never delays the read an agent waits on before its model call. On SQLite only a "
        "context whose memory must be rendered afresh takes one: the rest of a turn runs on "
        "the event loop.",
    )
    write_threads: int = setting(
        "OM_API_WRITE_THREADS",
        1,
        ge=1,
        le=256,
        description="Threads of an API process that append entries and accept flush requests "
        "at once; more wait their turn, on the event loop. One keeps the database and the GIL "
        "free for context reads (SQLite writes one at a time anyway); raise it when the "
        "database has cores to spare. On SQLite a write takes one only while another writer "
        "holds the file.",
    )
    admin_token: str | None = setting(
        "OM_ADMIN_TOKEN",
        secret=True,
        description="Bearer token of the admin routes (tenants, keys, queue); unset: they "
        "answer 401.",
    )
    max_body_bytes: int = setting(
        "OM_MAX_BODY_BYTES",
        8 * 1024 * 1024,
        ge=1024,
        description="Largest request body the API reads, bytes (8 MiB); a larger one is "
        "answered 413.",
    )
    key_cache_s: float = setting(
        "OM_API_KEY_CACHE_S",
        1.0,
        ge=0,
        le=60,
        description="How long an API process trusts an API key it resolved, seconds: a key "
        "revoked elsewhere is refused within this time (at once by the process that revoked "
        "it); 0: every request reads the key from the database.",
    )
    context_max_tokens: int = setting(
        "OM_CONTEXT_MAX_TOKENS",
        DEFAULT_CONTEXT_MAX_TOKENS,
        ge=MIN_CONTEXT_TOKENS,
        description="Token budget of a context read that names none (a quarter of a 128k window).",
    )
    mcp_enabled: bool = setting(
        "OM_MCP_ENABLED",
        True,
        description="Serve the MCP tools at /mcp (streamable HTTP, each caller with its own "
        "API key); false: /mcp answers 404.",
    )
    console_session_ttl_s: int = setting(
        "OM_CONSOLE_SESSION_TTL_S",
        8 * 3600,
        ge=60,
        le=7 * 24 * 3600,
        description="How long a web-console sign-in (/console) lasts, seconds (8 hours); then "
        "the console asks for the API key or admin token again.",
    )


class EmbeddingSettings(BaseModel):
    """Optional semantic search: the embedder workers run after a flush, and the query side of
    ``mode=hybrid`` searches (off by default)."""

    model_config = _group("Semantic search")

    provider: Literal["none", "local", "openai"] = setting(
        "OM_EMBEDDINGS_PROVIDER",
        "none",
        description="none (off: lexical search only), local (the bundled e5-small model of the "
        "embeddings extra, offline) or openai (an OpenAI-compatible /embeddings endpoint).",
    )
    model: str = setting(
        "OM_EMBEDDINGS_MODEL",
        "",
        description="Model name; unset: multilingual-e5-small (local) or "
        "text-embedding-3-small (openai). Vectors of another model are not compared.",
    )
    url: str | None = setting(
        "OM_EMBEDDINGS_URL",
        description="Base URL of the OpenAI-compatible API (its /embeddings route is called); "
        "unset: the vendor's own.",
    )
    api_key: SecretStr | None = setting(
        "OM_EMBEDDINGS_API_KEY",
        description="Key of the embeddings API; redacted from every log line and error.",
    )
    batch_size: int = setting(
        "OM_EMBEDDINGS_BATCH_SIZE",
        32,
        ge=1,
        le=2048,
        description="Texts embedded per call (and per transaction of vectors written).",
    )


class MetricsSettings(BaseModel):
    """The Prometheus metrics the API serves at /metrics to a scraper holding the metrics token
    (worker metrics: Workers)."""

    model_config = _group("Metrics")

    top_tenants: int = setting(
        "OM_METRICS_TOP_TENANTS",
        10,
        ge=1,
        le=1000,
        description="Tenants named in per-tenant metrics; the rest are summed as (others).",
    )
    token: str | None = setting(
        "OM_METRICS_TOKEN",
        secret=True,
        description="Bearer token a scraper sends to the API's /metrics; unset: the API "
        "answers 404 there (its per-tenant series name every busy tenant). Worker metrics "
        "are on their own port (OM_WORKER_METRICS_PORT).",
    )


class FlowerSettings(BaseModel):
    """Flower, the Celery monitor (om flower, and om up's)."""

    model_config = _group("Flower")

    port: int = setting(
        "OM_FLOWER_PORT",
        5555,
        ge=0,
        le=65535,
        description="Port of om flower and om up (0: any free port).",
    )
    basic_auth: SecretStr | None = setting(
        "OM_FLOWER_BASIC_AUTH",
        description="user:password of Flower's UI and API; unset: om up and om flower generate "
        "one and print it.",
    )


class CliSettings(BaseModel):
    """The API the client commands talk to: om sessions, status, view, recall, context,
    flush, link, unlink and mcp (om keys, om tenants and om db use OM_DATABASE_URL; om queue
    uses OM_REDIS_URL)."""

    model_config = _group("Command line")

    api_url: str = setting(
        "OM_API_URL",
        "http://127.0.0.1:8000",
        description="Base URL of the om API; om up prints it.",
    )
    api_key: SecretStr | None = setting(
        "OM_API_KEY",
        description="The tenant's API key; om up prints a dev key, om keys create makes one.",
    )


class ProxySettings(BaseModel):
    """The OpenAI-compatible proxy (POST /v1/proxy/chat/completions): the upstream it forwards
    each trimmed request to, and how long it waits for it."""

    model_config = _group("Proxy")

    upstream_url: str | None = setting(
        "OM_PROXY_UPSTREAM_URL",
        pattern=r"^https?://\S+/v1/?$",
        description="Base URL of the OpenAI-compatible model server the proxy forwards to, "
        "ending in /v1 (https://api.openai.com/v1); unset: the proxy answers 404.",
    )
    upstream_api_key: SecretStr | None = setting(
        "OM_PROXY_UPSTREAM_API_KEY",
        description="Bearer key the proxy sends upstream; redacted from every log line, error "
        "and answer, never echoed.",
    )
    timeout_s: float = setting(
        "OM_PROXY_TIMEOUT_S",
        300.0,
        gt=0,
        le=3600,
        description="Longest wait for the upstream's answer (or between two streamed chunks), "
        "seconds; then 504.",
    )
    max_messages: int = setting(
        "OM_PROXY_MAX_MESSAGES",
        10_000,
        ge=1,
        le=100_000,
        description="Most messages one proxied request may carry; more: 422.",
    )


class Settings(BaseSettings):
    """Settings read from ``OM_*`` environment variables, in groups.

    Construction takes the groups (``locks=LockSettings(ttl_s=5)``, taken whole, or
    ``locks={"ttl_s": 5}``) or the flat names (``lock_ttl_s=5``: the variable without ``OM_``,
    lower case); both override the environment leaf by leaf. Raises
    ``pydantic.ValidationError`` (its location names the variable, ``locks.OM_LOCK_TTL_S``)
    when a value has the wrong shape or a name is no setting, and ``SettingsError`` when
    ``OM_SETTINGS_JSON`` is not JSON.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    store: StoreSettings = Field(default_factory=StoreSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    locks: LockSettings = Field(default_factory=LockSettings)
    erasure: ErasureSettings = Field(default_factory=ErasureSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    worker: WorkerProcessSettings = Field(default_factory=WorkerProcessSettings)
    fair_queue: FairQueueSettings = Field(default_factory=FairQueueSettings)
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    flower: FlowerSettings = Field(default_factory=FlowerSettings)
    cli: CliSettings = Field(default_factory=CliSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    memory_settings: dict[str, Any] = setting(
        # OM_SETTINGS_JSON is the documented name; OM_MEMORY_SETTINGS was its first spelling.
        ("OM_SETTINGS_JSON", "OM_MEMORY_SETTINGS"),
        dict,
        description="JSON object of memory settings in nested groups "
        '({"observation": {"messageTokens": 2000}}).',
    )
    log_level: str = setting(
        "OM_LOG_LEVEL",
        "INFO",
        description="Log level of every om service; logs are JSON lines on stderr.",
    )

    def __init__(self, **values: Any) -> None:
        # Declared so that type checkers accept the flat names as well as the groups.
        super().__init__(**values)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied, in the names construction takes (``lock_ttl_s``,
        ``locks={"ttl_s": 5}`` ...) and validated like them: pydantic's own copy would set an
        unknown flat name as a stray attribute and change nothing. The environment is not
        read again. Raises ``pydantic.ValidationError`` for a value of the wrong shape."""
        if not update:
            return super().model_copy(deep=deep)
        current = {name: getattr(self, name) for name in type(self).model_fields}
        return type(self).model_validate(merge(type(self), current, update))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments first, then each setting's own variable; no dotenv file and no
        secrets directory (neither was ever read)."""
        return (FlatSettingsSource(settings_cls, init_settings),)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once; call ``get_settings.cache_clear()`` to re-read."""
    return Settings()
