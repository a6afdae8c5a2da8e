"""Runtime configuration: every ``OM_*`` environment variable is read here and nowhere else.

Each setting is one field of :class:`Settings` (``database_url`` <- ``OM_DATABASE_URL``); later
components add their own fields (``redis_url`` <- ``OM_REDIS_URL`` ...) next to these.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from om_core.policy.fairness import DEFAULT_HALF_LIFE_S
from om_core.read.context import MIN_CONTEXT_TOKENS

DEFAULT_DATABASE_URL = "sqlite:///./om.db"


DEFAULT_CONTEXT_MAX_TOKENS = 32_000
"""A context read's default budget, estimated tokens: a quarter of a 128k-token model window,
leaving the rest to the agent's own prompt, tools and answer."""


class Settings(BaseSettings):
    """Settings read from ``OM_*`` environment variables.

    Raises ``pydantic.ValidationError`` when a variable is set to a value of the wrong shape.
    """

    model_config = SettingsConfigDict(
        env_prefix="OM_",
        extra="ignore",
        frozen=True,
    )

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        min_length=1,
        description="SQLAlchemy URL of the session store; SQLite file by default, "
        "PostgreSQL as postgresql+psycopg://user@host:port/db.",
    )

    # Distributed flush (docs/architecture.md). Durations are seconds.
    redis_url: str | None = Field(
        default=None,
        description="Redis for locks and coalescing, and the broker unless OM_BROKER_URL is "
        "set; unset: a private embedded Redis.",
    )
    broker_url: str | None = Field(
        default=None,
        description="Celery broker; unset or empty: OM_REDIS_URL. amqp://user:password@host:5672/"
        "vhost: RabbitMQ (quorum queue om, publisher confirms); Redis (OM_REDIS_URL) then serves "
        "locks and coalescing only.",
    )
    provider: str = Field(
        default="extractive",
        min_length=1,
        description="Memory worker provider: 'extractive' (offline), 'openai' (any "
        "OpenAI-compatible server), 'anthropic', or 'package.module:factory', a zero-argument "
        "callable returning an om_core Provider.",
    )
    model: str = Field(default="extractive", min_length=1, description="Worker model name.")
    provider_base_url: str | None = Field(
        default=None, description="Base URL of the openai/anthropic API; unset: the vendor's."
    )
    provider_api_key: SecretStr | None = Field(
        default=None, description="Provider API key; redacted from every stored error."
    )
    prompts_file: Path | None = Field(
        default=None,
        description="JSON or TOML file with this deployment's observer/reflector instructions "
        "and their version name (see om_workers.prompts); unset: the built-in prompts.",
    )
    observer_model: str | None = Field(default=None, description="Observer model override.")
    reflector_model: str | None = Field(default=None, description="Reflector model override.")
    dropper_model: str | None = Field(default=None, description="Dropper model override.")
    backoff_base_s: float = Field(default=0.5, ge=0, description="First provider retry wait.")
    worker_metrics_port: int = Field(
        default=0, ge=0, le=65535, description="Worker Prometheus port; 0: no metrics server."
    )
    worker_metrics_host: str = Field(default="127.0.0.1", description="Metrics bind address.")
    metrics_top_tenants: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Tenants named in per-tenant metrics; the rest are summed as (others).",
    )
    memory_settings: dict[str, Any] = Field(
        default_factory=dict,
        # OM_SETTINGS_JSON is the documented name; OM_MEMORY_SETTINGS was its first spelling.
        validation_alias=AliasChoices("OM_SETTINGS_JSON", "OM_MEMORY_SETTINGS", "memory_settings"),
        description="JSON object of observational-memory settings (nested groups).",
    )
    context_max_tokens: int = Field(
        default=DEFAULT_CONTEXT_MAX_TOKENS,
        ge=MIN_CONTEXT_TOKENS,
        description="Token budget of a context read when the request names none.",
    )
    lock_ttl_s: float = Field(default=60.0, gt=0, description="Session lock TTL.")
    max_deliveries: int = Field(default=5, ge=1, description="Deliveries before poison.")
    worker_concurrency: int = Field(default=16, ge=1, description="Task slots per worker.")
    http_timeout_s: float = Field(default=60.0, gt=0, description="Provider HTTP timeout.")
    provider_max_attempts: int = Field(default=3, ge=1, description="Calls per provider request.")
    backoff_cap_s: float = Field(default=30.0, gt=0, description="Longest retry wait.")
    queue_wait_s: float = Field(default=300.0, ge=0, description="Longest prefetch queue wait.")
    soft_time_limit_s: float | None = Field(default=None, gt=0, description="Override (all 3).")
    hard_time_limit_s: float | None = Field(default=None, gt=0, description="Override (all 3).")
    visibility_timeout_s: float | None = Field(default=None, gt=0, description="Override.")
    reconcile_interval_s: float = Field(default=60.0, gt=0, description="om.reconcile period.")
    # Fair queueing across tenants (docs/architecture.md, "Fair queueing across tenants").
    fair_queueing: bool = Field(
        default=True,
        description="Admit flush jobs to the broker fairly across tenants (off: first in, "
        "first out).",
    )
    fair_queue_capacity: int = Field(
        default=0,
        ge=0,
        description="Flush jobs admitted or running at once; 0: the live workers' task slots.",
    )
    fair_queue_half_life_s: float = Field(
        default=DEFAULT_HALF_LIFE_S,
        ge=0.001,
        description="Seconds until a tenant's past admissions count half in the fair queue.",
    )

    # HTTP API.
    admin_token: str | None = Field(
        default=None,
        description="Bearer token of the admin routes (tenants, keys); unset: admin routes 401.",
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Largest request body the API reads (413)."
    )
    log_level: str = Field(default="INFO", description="Log level of every om service.")

    # Per-API-key rate limits (docs/architecture.md, "Rate limits"): sustained requests per
    # second and the burst an idle key may send at once, per request class, enforced in Redis
    # across replicas. An admin can override them per tenant (PUT /v1/admin/tenants/{id}/limits,
    # om tenants limits). Sized so an agent appending every turn and reading its context never
    # meets them, while one runaway client cannot take the whole store or worker pool.
    rate_limits_enabled: bool = Field(
        default=True, description="Enforce the per-key rate limits (429 over them)."
    )
    rate_appends_per_s: float = Field(default=20.0, gt=0, le=1e6, description="Appends/s.")
    rate_appends_burst: int = Field(default=40, ge=1, description="Append burst.")
    rate_flushes_per_s: float = Field(default=5.0, gt=0, le=1e6, description="Flushes/s.")
    rate_flushes_burst: int = Field(default=20, ge=1, description="Flush burst.")
    rate_reads_per_s: float = Field(default=50.0, gt=0, le=1e6, description="Reads/s.")
    rate_reads_burst: int = Field(default=100, ge=1, description="Read burst.")
    rate_limit_cache_s: float = Field(
        default=2.0,
        ge=0,
        description="How long an API process keeps a tenant's limit overrides before reading "
        "them again (0: every request).",
    )

    # Ports of om api / om flower and of the embedded stack (om up, make up).
    api_port: int = Field(
        default=8000, ge=0, le=65535, description="API port of om api and om up (0: any free)."
    )
    flower_port: int = Field(
        default=5555, ge=0, le=65535, description="Flower port of om flower and om up (0: any)."
    )

    # Command line: the client commands' target, and Flower's credentials.
    api_url: str = Field(
        default="http://127.0.0.1:8000", description="API base URL for om status/view/recall."
    )
    api_key: SecretStr | None = Field(default=None, description="API key for those commands.")
    flower_basic_auth: SecretStr | None = Field(
        default=None, description="user:password of Flower (om flower, om up)."
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once; call ``get_settings.cache_clear()`` to re-read."""
    return Settings()
