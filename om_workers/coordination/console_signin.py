"""Web-console sign-ins in Redis, shared by every API replica.

A sign-in is an opaque random cookie value; Redis holds, under the value's SHA-256
(:func:`om_workers.coordination.keys.console_signin_key`), who signed in (a tenant and the id of
the API key used, or the admin) and the sign-in's form token. The API key itself is never stored:
each page checks the key id against the store, so a revoked key ends its console sign-ins too.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import cast

import redis

from om_workers.coordination import keys
from om_workers.coordination.connection import translate_errors

TOKEN_BYTES = 32
"""Random bytes in a sign-in cookie (and in its form token)."""


@dataclass(frozen=True, slots=True)
class ConsoleSignIn:
    """Who a console cookie signed in: ``admin`` (every tenant) or ``tenant_id`` through the
    API key ``key_id``; ``form_token`` guards the sign-in's POST forms."""

    admin: bool
    tenant_id: str | None
    key_id: str | None
    form_token: str


def _text(value: object) -> str:
    # Clients made with decode_responses answer str, others bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


class ConsoleSignIns:
    """Creates, reads and ends console sign-ins; each lives ``ttl_s`` seconds from creation.

    Every method raises :class:`~om_workers.errors.RedisUnavailableError` (or another
    :class:`~om_workers.errors.CoordinationError`) when Redis fails.
    """

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        if ttl_s < 1:
            raise ValueError(f"ttl_s must be >= 1, got {ttl_s}")
        self._client = client
        self._ttl_s = ttl_s

    def create(self, *, admin: bool, tenant_id: str | None, key_id: str | None) -> str:
        """Record a sign-in; answers the cookie value (random, URL-safe)."""
        cookie = secrets.token_urlsafe(TOKEN_BYTES)
        name = keys.console_signin_key(_digest(cookie))
        with translate_errors("create a console sign-in"):
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(
                name,
                mapping={
                    "admin": "1" if admin else "0",
                    "tenant": tenant_id or "",
                    "key": key_id or "",
                    "form": secrets.token_urlsafe(TOKEN_BYTES),
                },
            )
            pipe.expire(name, self._ttl_s)
            pipe.execute()
        return cookie

    def get(self, cookie: str) -> ConsoleSignIn | None:
        """The sign-in of a cookie value; ``None`` when unknown or expired."""
        with translate_errors("read a console sign-in"):
            raw = self._client.hgetall(keys.console_signin_key(_digest(cookie)))
        if not raw:
            return None
        found = {_text(k): _text(v) for k, v in cast(dict[object, object], raw).items()}
        return ConsoleSignIn(
            admin=found.get("admin") == "1",
            tenant_id=found.get("tenant") or None,
            key_id=found.get("key") or None,
            form_token=found.get("form", ""),
        )

    def end(self, cookie: str) -> None:
        """Forget a sign-in (signing out); an unknown cookie changes nothing."""
        with translate_errors("end a console sign-in"):
            self._client.delete(keys.console_signin_key(_digest(cookie)))
