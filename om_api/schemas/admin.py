"""Health and the admin routes: tenants, rate limits, the flush queue, API keys, retention,
the audit trail, usage reports and webhooks."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import Field, computed_field

from om_api.schemas.base import PathId, RequestModel, WireModel

# Health and admin --------------------------------------------------------------------------


class HealthOut(WireModel):
    """``/healthz`` and ``/readyz``: ``status`` is ``ok`` or ``unavailable``; ``checks`` names
    each dependency's state (readiness only)."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, bool] = Field(default_factory=dict)


class CreateTenantRequest(RequestModel):
    """``POST /v1/admin/tenants``."""

    id: PathId
    name: str | None = Field(default=None, max_length=256)


class TenantOut(WireModel):
    """A tenant."""

    id: str
    name: str
    created_at: datetime


class RateLimitIn(RequestModel):
    """One request class's limit: ``rate_per_s`` sustained, ``burst`` at once from idle."""

    rate_per_s: float = Field(gt=0, le=1_000_000, allow_inf_nan=False)
    burst: int = Field(ge=1, le=1_000_000)


class SetRateLimitsRequest(RequestModel):
    """``PUT /v1/admin/tenants/{id}/limits``: the tenant's overrides, replacing the old ones.
    An absent or null class uses the ``OM_RATE_*`` default."""

    appends: RateLimitIn | None = None
    flushes: RateLimitIn | None = None
    reads: RateLimitIn | None = None


class RateLimitOut(WireModel):
    """One request class's limit per API key."""

    rate_per_s: float
    burst: int


class RateLimitsOut(WireModel):
    """A tenant's rate limits per API key: its ``overrides`` (absent class: none) and the
    ``effective`` limit of every class (override, else the deployment's default). Replicas
    apply a change within ``OM_RATE_LIMIT_CACHE_S``."""

    tenant_id: str
    overrides: dict[str, RateLimitOut]
    effective: dict[str, RateLimitOut]


class TenantLoadOut(WireModel):
    """One tenant's flush jobs in the fair queue (``waiting`` for a place, ``queued`` in the
    broker, ``running``) and its ``throttled`` requests (refused by a rate limit since Redis
    started)."""

    tenant_id: str
    waiting: int
    queued: int
    running: int
    throttled: int


class FlushQueueOut(WireModel):
    """``GET /v1/admin/queue``: the fair queue's ``backlog`` (flush jobs waiting, queued or
    running, all tenants) and each tenant with jobs or throttled requests, busiest first."""

    backlog: int
    tenants: list[TenantLoadOut]


class CreateKeyRequest(RequestModel):
    """``POST /v1/admin/tenants/{id}/keys`` (the body is optional)."""

    label: str = Field(default="", max_length=256)


class KeyOut(WireModel):
    """A new API key; ``key`` is shown once (only its hash is stored)."""

    key_id: str
    tenant_id: str
    key: str


class ApiKeyOut(WireModel):
    """An API key as listed: never the key itself, only its id and ``prefix``, the part every
    key starts with (``om_<key_id>_``) that tells keys apart in a config file or a log.
    ``revoked`` is ``revoked_at is not None`` (computed; ignored when read back).

    Built from any object with these attributes (``ApiKeyOut.model_validate(info,
    from_attributes=True)``), such as the store's ``ApiKeyInfo``."""

    key_id: str
    tenant_id: str
    prefix: str
    label: str
    created_at: datetime
    revoked_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def revoked(self) -> bool:
        """Whether the key is revoked (every request with it is a 401)."""
        return self.revoked_at is not None


class ApiKeysOut(WireModel):
    """``GET /v1/admin/tenants/{id}/keys``: the tenant's keys, oldest first, revoked ones too."""

    keys: list[ApiKeyOut]


# Erasure, retention and the audit trail (admin) --------------------------------------------

MAX_RETENTION_DAYS = 36_500
"""The longest retention period an admin may set (days; a hundred years)."""
MAX_AUDIT_EVENTS = 1000
"""Largest ``limit`` of ``GET /v1/admin/audit``."""
MAX_RETENTION_LISTING = 1000
"""Largest ``limit`` of a retention dry run."""


class RetentionRequest(RequestModel):
    """``PUT /v1/admin/tenants/{id}/retention``: erase the tenant's sessions once they have
    been idle (no write) for ``days`` days; ``null`` keeps everything (the default)."""

    days: int | None = Field(ge=1, le=MAX_RETENTION_DAYS)


class RetentionOut(WireModel):
    """A tenant's retention period and the dry run: the sessions a retention pass would erase
    now (idle since before ``cutoff``), longest idle first, at most the asked ``limit``."""

    tenant_id: str
    retention_days: int | None
    cutoff: datetime | None
    would_erase: list[str]


class AuditEventOut(WireModel):
    """One audit record: who (``key_id``; null for an admin or the retention pass), what
    (``action``: erase, retention, export, import ...), which session, subject or tenant
    (``target``), when, and the ``outcome`` (accepted, succeeded, failed ...). Never content."""

    tenant_id: str
    key_id: str | None
    action: str
    target: str
    outcome: str
    job_id: str | None
    created_at: datetime


class AuditOut(WireModel):
    """The newest audit events, newest first."""

    events: list[AuditEventOut]


class DailyUsageOut(WireModel):
    """A tenant's usage of one model on one UTC ``day`` (``YYYY-MM-DD``); ``cost`` at
    ``OM_PRICES``, ``null`` for a model without a price."""

    tenant_id: str
    day: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None


class UsageReportOut(WireModel):
    """Model usage per tenant per day, days ``since`` to ``until`` inclusive (UTC), by tenant,
    day and model; totals over the rows (``cost`` sums the priced rows, ``null`` when none is
    priced; ``unpriced_models`` names the models without a price)."""

    since: str
    until: str
    tenant_id: str | None
    rows: list[DailyUsageOut]
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None
    unpriced_models: list[str] = Field(default_factory=list)


WebhookEventType = Literal["flush.succeeded", "flush.failed", "session.erased"]
_WEBHOOK_EVENT_TYPES: Final[tuple[WebhookEventType, ...]] = (
    "flush.succeeded",
    "flush.failed",
    "session.erased",
)
MAX_WEBHOOK_URL_CHARS: Final = 2048
MAX_WEBHOOK_DELIVERIES: Final = 1000
"""Most deliveries one listing answers."""
WEBHOOK_SECRET_PATTERN: Final = r"^whsec_[A-Za-z0-9+/]{32,88}={0,2}$"


class CreateWebhookRequest(RequestModel):
    """``POST /v1/admin/tenants/{id}/webhooks``: the receiver's ``url`` (http or https, a
    public address unless the operator allows private ones), the ``event_types`` it wants
    (default: all), and its ``secret`` (``whsec_`` + base64 of 24 to 64 bytes; generated when
    absent)."""

    url: str = Field(min_length=1, max_length=MAX_WEBHOOK_URL_CHARS)
    event_types: list[WebhookEventType] = Field(
        default_factory=lambda: list(_WEBHOOK_EVENT_TYPES),
        min_length=1,
        max_length=3,
    )
    secret: str | None = Field(default=None, pattern=WEBHOOK_SECRET_PATTERN, repr=False)


class WebhookEndpointOut(WireModel):
    """A webhook endpoint. ``secret`` is in the creating answer only, never in a listing."""

    id: str
    tenant_id: str
    url: str
    event_types: list[WebhookEventType]
    enabled: bool
    created_at: datetime
    secret: str | None = Field(default=None, repr=False)


class WebhookEndpointsOut(WireModel):
    """A tenant's webhook endpoints, oldest first (no secrets)."""

    endpoints: list[WebhookEndpointOut]


class WebhookDeliveryOut(WireModel):
    """One event for one endpoint: ``id`` is its ``webhook-id``; ``state`` pending, delivered
    or failed (its attempts used up); the last attempt's HTTP ``last_status`` or
    ``last_error``; when it is due again (``next_attempt_at``). Never the payload."""

    id: str
    endpoint_id: str
    event_type: WebhookEventType
    session_id: str | None
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveriesOut(WireModel):
    """A tenant's newest webhook deliveries, newest first."""

    deliveries: list[WebhookDeliveryOut]
