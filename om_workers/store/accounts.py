"""Account administration: tenants, API keys, rate-limit overrides, retention and the audit
trail.

:class:`AccountStore` works on the same engine as the session store but is no part of a
session's transaction: each method is its own short transaction (foreign errors translated at
the unit of work's seam, :func:`~om_workers.store.unit_of_work.translate_errors`).

A key is shown once; the store keeps only its SHA-256. SHA-256 without a salt is enough here
because keys are 256-bit random tokens, not passwords: there is nothing to guess, and the hash
stays an indexed exact-match lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, bindparam, func, insert, select, update

from om_core.errors import InvalidInputError
from om_core.policy.rate_limit import REQUEST_CLASSES, RateLimit, RequestClass
from om_workers.errors import (
    ApiKeyNotFoundError,
    InvalidApiKeyError,
    TenantExistsError,
    TenantNotFoundError,
)
from om_workers.store.audit import MAX_AUDIT_PAGE, AuditEvent, audit_page, insert_audit
from om_workers.store.engine import create_store_engine, read_transaction, write_transaction
from om_workers.store.records import ApiKeyInfo, CreatedApiKey, Tenant, as_utc, as_utc_or_none
from om_workers.store.schema import api_keys, tenants
from om_workers.store.service import retry_once_after_race
from om_workers.store.unit_of_work import translate_errors, utc_now

API_KEY_PREFIX = "om_"
_MAX_KEY_LENGTH = 512


def hash_api_key(plaintext: str) -> str:
    """The stored form of a key: lowercase hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def key_prefix(key_id: str) -> str:
    """How every plaintext of key ``key_id`` begins: safe to show, never enough to use."""
    return f"{API_KEY_PREFIX}{key_id}_"


# Every column but the hash: nothing that lists keys ever reads it.
_KEY_COLUMNS = (
    api_keys.c.id,
    api_keys.c.tenant_id,
    api_keys.c.label,
    api_keys.c.created_at,
    api_keys.c.revoked_at,
)


def _key_info(row: Row[Any, Any, Any, Any, Any]) -> ApiKeyInfo:
    # A row of _KEY_COLUMNS.
    return ApiKeyInfo(
        key_id=row.id,
        tenant_id=row.tenant_id,
        prefix=key_prefix(row.id),
        label=row.label,
        created_at=as_utc(row.created_at),
        revoked_at=as_utc_or_none(row.revoked_at),
    )


_TENANT_ID = select(tenants.c.id).where(tenants.c.id == bindparam("tenant_id"))
_TENANT = select(tenants.c.id, tenants.c.name, tenants.c.created_at).where(
    tenants.c.id == bindparam("tenant_id")
)
_INSERT_TENANT = insert(tenants)
_RETENTION = select(tenants.c.retention_days).where(tenants.c.id == bindparam("tenant_id"))
_SET_RETENTION = (
    update(tenants)
    .where(tenants.c.id == bindparam("tenant_id"))
    .values(retention_days=bindparam("days"))
)
_RETAINING = select(tenants.c.id, tenants.c.retention_days).where(
    tenants.c.retention_days.is_not(None)
)
MAX_RETENTION_DAYS = 36_500
_INSERT_KEY = insert(api_keys)
_RESOLVE = select(api_keys.c.tenant_id, api_keys.c.id).where(
    api_keys.c.key_hash == bindparam("key_hash"), api_keys.c.revoked_at.is_(None)
)
_RATE_LIMITS = select(tenants.c.rate_limits).where(tenants.c.id == bindparam("tenant_id"))
_SET_RATE_LIMITS = (
    update(tenants)
    .where(tenants.c.id == bindparam("tenant_id"))
    .values(rate_limits=bindparam("new_limits"))
)
_REVOKED_AT = func.coalesce(api_keys.c.revoked_at, bindparam("now"))
_REVOKE_TENANT_KEY = (
    update(api_keys)
    # An UPDATE may not bind a parameter named like one of its table's columns.
    .where(api_keys.c.id == bindparam("key_id"), api_keys.c.tenant_id == bindparam("tenant"))
    .values(revoked_at=_REVOKED_AT)
)
_REVOKE_KEY = (
    update(api_keys).where(api_keys.c.id == bindparam("key_id")).values(revoked_at=_REVOKED_AT)
)
_KEY = select(*_KEY_COLUMNS).where(api_keys.c.id == bindparam("key_id"))
_TENANT_KEYS = (
    select(*_KEY_COLUMNS)
    .where(api_keys.c.tenant_id == bindparam("tenant_id"))
    .order_by(api_keys.c.created_at, api_keys.c.id)
)


def _require_tenant(connection: Connection, tenant_id: str) -> None:
    if connection.execute(_TENANT_ID, {"tenant_id": tenant_id}).first() is None:
        raise TenantNotFoundError(f"no tenant {tenant_id!r}")


class AccountStore:
    """Tenants, API keys and per-tenant rate-limit overrides, on the session store's engine.

    Every method runs in its own transaction and either completes or writes nothing; database
    failures surface as :class:`~om_workers.errors.StoreUnavailableError` or
    :class:`~om_workers.errors.StoreError`, as the session store's do.
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._engine = engine
        self._clock = clock

    @classmethod
    def from_url(cls, database_url: str, **engine_kwargs: Any) -> AccountStore:
        """An account store on ``database_url`` (its own engine: :meth:`close` it).
        Raises :class:`~om_workers.errors.ConfigError`."""
        return cls(create_store_engine(database_url, **engine_kwargs))

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine."""
        return self._engine

    def close(self) -> None:
        """Close the engine's pooled connections (shared with a session store on the same
        engine; both reconnect when used again)."""
        self._engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with translate_errors(), write_transaction(self._engine) as connection:
            yield connection

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with translate_errors(), read_transaction(self._engine) as connection:
            yield connection

    def create_tenant(self, tenant_id: str, name: str | None = None) -> Tenant:
        """Create a tenant. Raises :class:`TenantExistsError` when the id is taken."""

        def create() -> Tenant:
            now = self._clock()
            with self._write() as connection:
                if connection.execute(_TENANT_ID, {"tenant_id": tenant_id}).first() is not None:
                    raise TenantExistsError(f"tenant {tenant_id!r} already exists")
                values = {"id": tenant_id, "name": name or tenant_id, "created_at": now}
                connection.execute(_INSERT_TENANT, values)
            return Tenant(id=tenant_id, name=name or tenant_id, created_at=now)

        return retry_once_after_race(create)

    def get_tenant(self, tenant_id: str) -> Tenant:
        """The tenant. Raises :class:`TenantNotFoundError`."""
        with self._read() as connection:
            row = connection.execute(_TENANT, {"tenant_id": tenant_id}).first()
        if row is None:
            raise TenantNotFoundError(f"no tenant {tenant_id!r}")
        return Tenant(id=row.id, name=row.name, created_at=as_utc(row.created_at))

    def create_api_key(self, tenant_id: str, label: str = "") -> CreatedApiKey:
        """A new key for the tenant; its plaintext is in the result and nowhere else.

        Raises :class:`TenantNotFoundError`.
        """
        key_id = secrets.token_hex(8)
        plaintext = f"{key_prefix(key_id)}{secrets.token_urlsafe(32)}"
        with self._write() as connection:
            _require_tenant(connection, tenant_id)
            connection.execute(
                _INSERT_KEY,
                {
                    "id": key_id,
                    "tenant_id": tenant_id,
                    "key_hash": hash_api_key(plaintext),
                    "label": label,
                    "created_at": self._clock(),
                    "revoked_at": None,
                },
            )
        return CreatedApiKey(key_id=key_id, tenant_id=tenant_id, plaintext=plaintext)

    def resolve_api_key(self, plaintext: str) -> str:
        """The tenant id a key belongs to.

        Raises :class:`InvalidApiKeyError` when the key is unknown or revoked. Nothing is
        cached: the API calls this on every request, so a revocation committed by any process
        (another API replica, ``om keys revoke``) refuses the key's next request.
        """
        return self.resolve_api_key_id(plaintext)[0]

    def resolve_api_key_id(self, plaintext: str) -> tuple[str, str]:
        """``(tenant id, key id)`` of a key (the key id names its rate-limit buckets).

        Raises :class:`InvalidApiKeyError` like :meth:`resolve_api_key`.
        """
        if not plaintext or len(plaintext) > _MAX_KEY_LENGTH:
            raise InvalidApiKeyError("invalid API key")
        with self._read() as connection:
            row = connection.execute(_RESOLVE, {"key_hash": hash_api_key(plaintext)}).first()
        if row is None:
            raise InvalidApiKeyError("invalid API key")
        return str(row.tenant_id), str(row.id)

    def get_rate_limits(self, tenant_id: str) -> dict[RequestClass, RateLimit]:
        """The tenant's rate-limit overrides by request class (absent class: the default).

        Raises :class:`TenantNotFoundError`.
        """
        with self._read() as connection:
            row = connection.execute(_RATE_LIMITS, {"tenant_id": tenant_id}).first()
        if row is None:
            raise TenantNotFoundError(f"no tenant {tenant_id!r}")
        stored: dict[str, Any] = row.rate_limits or {}
        return {
            name: RateLimit(float(stored[name]["rate_per_s"]), int(stored[name]["burst"]))
            for name in REQUEST_CLASSES
            if isinstance(stored.get(name), dict)
        }

    def set_rate_limits(
        self, tenant_id: str, limits: Mapping[RequestClass, RateLimit]
    ) -> dict[RequestClass, RateLimit]:
        """Replace the tenant's overrides with ``limits`` (empty: back to the defaults) and
        return them. Raises :class:`TenantNotFoundError`."""
        value = {
            name: {"rate_per_s": limit.rate_per_s, "burst": limit.burst}
            for name, limit in limits.items()
        }
        with self._write() as connection:
            params = {"tenant_id": tenant_id, "new_limits": value or None}
            if connection.execute(_SET_RATE_LIMITS, params).rowcount == 0:
                raise TenantNotFoundError(f"no tenant {tenant_id!r}")
        return dict(limits)

    def revoke_api_key(self, tenant_id: str, key_id: str) -> None:
        """Revoke one of the tenant's keys (idempotent). Raises :class:`InvalidApiKeyError` if
        the tenant has no such key."""
        with self._write() as connection:
            params = {"key_id": key_id, "tenant": tenant_id, "now": self._clock()}
            if connection.execute(_REVOKE_TENANT_KEY, params).rowcount == 0:
                raise InvalidApiKeyError(f"no API key {key_id!r} for this tenant")

    def list_api_keys(self, tenant_id: str) -> tuple[ApiKeyInfo, ...]:
        """The tenant's keys, oldest first, revoked ones included; never a key's hash or
        plaintext. Raises :class:`TenantNotFoundError`."""
        with self._read() as connection:
            _require_tenant(connection, tenant_id)
            rows = connection.execute(_TENANT_KEYS, {"tenant_id": tenant_id}).all()
        return tuple(_key_info(row) for row in rows)

    def revoke_key(self, key_id: str) -> ApiKeyInfo:
        """Revoke the key with this id, whichever tenant owns it, and return it; revoking a
        revoked key changes nothing (its first ``revoked_at`` stays). From the commit on,
        :meth:`resolve_api_key` refuses it. Raises :class:`ApiKeyNotFoundError`."""
        with self._write() as connection:
            connection.execute(_REVOKE_KEY, {"key_id": key_id, "now": self._clock()})
            row = connection.execute(_KEY, {"key_id": key_id}).first()
        if row is None:
            raise ApiKeyNotFoundError(f"no API key {key_id!r}")
        return _key_info(row)

    # Retention and the audit trail ----------------------------------------------------------

    def get_retention_days(self, tenant_id: str) -> int | None:
        """Days a session of the tenant may stay idle before the retention pass erases it;
        ``None``: kept for ever. Raises :class:`TenantNotFoundError`."""
        with self._read() as connection:
            row = connection.execute(_RETENTION, {"tenant_id": tenant_id}).first()
        if row is None:
            raise TenantNotFoundError(f"no tenant {tenant_id!r}")
        return None if row.retention_days is None else int(row.retention_days)

    def set_retention_days(self, tenant_id: str, days: int | None) -> None:
        """Set (``None``: clear) the tenant's ``retention_days``. Raises
        :class:`TenantNotFoundError`, :class:`~om_core.errors.InvalidInputError` for days
        outside ``1..MAX_RETENTION_DAYS``."""
        if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
            raise InvalidInputError(f"retention days must be 1..{MAX_RETENTION_DAYS}, got {days}")
        with self._write() as connection:
            _require_tenant(connection, tenant_id)
            connection.execute(_SET_RETENTION, {"tenant_id": tenant_id, "days": days})

    def retention_policies(self) -> dict[str, int]:
        """Every tenant with a retention period: tenant id -> days."""
        with self._read() as connection:
            return {row.id: int(row.retention_days) for row in connection.execute(_RETAINING)}

    def record_audit(
        self,
        tenant_id: str,
        key_id: str | None,
        action: str,
        target: str,
        outcome: str,
        *,
        job_id: str | None = None,
    ) -> None:
        """Append one event to the audit trail, in its own transaction (see
        :mod:`om_workers.store.audit`: ``action`` is an open set, ``erase``, ``export``,
        ``import`` and ``retention`` among it; ``target`` the session id, subject or tenant;
        ``outcome`` e.g. ``accepted``, ``succeeded``, ``failed``, ``refused``). Never pass
        content. Raises :class:`~om_core.errors.InvalidInputError` for an empty or over-long
        action, target or outcome."""
        for name, value, limit in (
            ("action", action, 32),
            ("target", target, 256),
            ("outcome", outcome, 32),
        ):
            if not value or len(value) > limit:
                raise InvalidInputError(f"audit {name} must be 1..{limit} characters")
        with self._write() as connection:
            insert_audit(
                connection,
                tenant_id,
                key_id,
                action,
                target,
                outcome,
                job_id=job_id,
                now=self._clock(),
            )

    def audit_events(self, tenant_id: str | None = None, limit: int = 100) -> list[AuditEvent]:
        """The newest ``limit`` (1..``MAX_AUDIT_PAGE``) audit events, of one tenant or of all.
        Raises :class:`~om_core.errors.InvalidInputError` for a limit out of range."""
        if not 1 <= limit <= MAX_AUDIT_PAGE:
            raise InvalidInputError(f"limit must be 1..{MAX_AUDIT_PAGE}, got {limit}")
        with self._read() as connection:
            return audit_page(connection, tenant_id, limit)
