"""Tenants and API keys. A key is shown once; the store keeps only its SHA-256.

SHA-256 without a salt is enough here because keys are 256-bit random tokens, not passwords:
there is nothing to guess, and the hash stays an indexed exact-match lookup.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Row, func, insert, select, update

from om_core.policy.rate_limit import REQUEST_CLASSES, RateLimit, RequestClass
from om_workers.errors import (
    ApiKeyNotFoundError,
    InvalidApiKeyError,
    TenantExistsError,
    TenantNotFoundError,
)
from om_workers.store.base import StoreBase
from om_workers.store.records import ApiKeyInfo, CreatedApiKey, Tenant, as_utc, as_utc_or_none
from om_workers.store.schema import api_keys, tenants

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


def require_tenant(connection: Connection, tenant_id: str) -> None:
    """Raise :class:`TenantNotFoundError` unless the tenant exists."""
    found = connection.execute(select(tenants.c.id).where(tenants.c.id == tenant_id)).first()
    if found is None:
        raise TenantNotFoundError(f"no tenant {tenant_id!r}")


class AccountsMixin(StoreBase):
    """Tenant and API-key operations of :class:`~om_workers.store.SqlStore`."""

    def create_tenant(self, tenant_id: str, name: str | None = None) -> Tenant:
        """Create a tenant. Raises :class:`TenantExistsError` when the id is taken."""

        def create() -> Tenant:
            now = self._now()
            with self._write() as connection:
                taken = connection.execute(
                    select(tenants.c.id).where(tenants.c.id == tenant_id)
                ).first()
                if taken is not None:
                    raise TenantExistsError(f"tenant {tenant_id!r} already exists")
                connection.execute(
                    insert(tenants).values(id=tenant_id, name=name or tenant_id, created_at=now)
                )
            return Tenant(id=tenant_id, name=name or tenant_id, created_at=now)

        return self._retrying(create)

    def get_tenant(self, tenant_id: str) -> Tenant:
        """The tenant. Raises :class:`TenantNotFoundError`."""
        with self._read() as connection:
            row = connection.execute(select(tenants).where(tenants.c.id == tenant_id)).first()
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
            require_tenant(connection, tenant_id)
            connection.execute(
                insert(api_keys).values(
                    id=key_id,
                    tenant_id=tenant_id,
                    key_hash=hash_api_key(plaintext),
                    label=label,
                    created_at=self._now(),
                    revoked_at=None,
                )
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
            row = connection.execute(
                select(api_keys.c.tenant_id, api_keys.c.id).where(
                    api_keys.c.key_hash == hash_api_key(plaintext),
                    api_keys.c.revoked_at.is_(None),
                )
            ).first()
        if row is None:
            raise InvalidApiKeyError("invalid API key")
        return str(row.tenant_id), str(row.id)

    def get_rate_limits(self, tenant_id: str) -> dict[RequestClass, RateLimit]:
        """The tenant's rate-limit overrides by request class (absent class: the default).

        Raises :class:`TenantNotFoundError`.
        """
        with self._read() as connection:
            row = connection.execute(
                select(tenants.c.rate_limits).where(tenants.c.id == tenant_id)
            ).first()
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
            result = connection.execute(
                update(tenants).where(tenants.c.id == tenant_id).values(rate_limits=value or None)
            )
            if result.rowcount == 0:
                raise TenantNotFoundError(f"no tenant {tenant_id!r}")
        return dict(limits)

    def revoke_api_key(self, tenant_id: str, key_id: str) -> None:
        """Revoke one of the tenant's keys (idempotent). Raises :class:`InvalidApiKeyError` if
        the tenant has no such key."""
        with self._write() as connection:
            result = connection.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id, api_keys.c.tenant_id == tenant_id)
                .values(revoked_at=func.coalesce(api_keys.c.revoked_at, self._now()))
            )
            if result.rowcount == 0:
                raise InvalidApiKeyError(f"no API key {key_id!r} for this tenant")

    def list_api_keys(self, tenant_id: str) -> tuple[ApiKeyInfo, ...]:
        """The tenant's keys, oldest first, revoked ones included; never a key's hash or
        plaintext. Raises :class:`TenantNotFoundError`."""
        with self._read() as connection:
            require_tenant(connection, tenant_id)
            rows = connection.execute(
                select(*_KEY_COLUMNS)
                .where(api_keys.c.tenant_id == tenant_id)
                .order_by(api_keys.c.created_at, api_keys.c.id)
            ).all()
        return tuple(_key_info(row) for row in rows)

    def revoke_key(self, key_id: str) -> ApiKeyInfo:
        """Revoke the key with this id, whichever tenant owns it, and return it; revoking a
        revoked key changes nothing (its first ``revoked_at`` stays). From the commit on,
        :meth:`resolve_api_key` refuses it. Raises :class:`ApiKeyNotFoundError`."""
        with self._write() as connection:
            connection.execute(
                update(api_keys)
                .where(api_keys.c.id == key_id)
                .values(revoked_at=func.coalesce(api_keys.c.revoked_at, self._now()))
            )
            row = connection.execute(select(*_KEY_COLUMNS).where(api_keys.c.id == key_id)).first()
        if row is None:
            raise ApiKeyNotFoundError(f"no API key {key_id!r}")
        return _key_info(row)
