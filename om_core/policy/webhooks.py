"""Webhooks as pure rules: the event types, the payload a delivery carries, its Standard
Webhooks signature, the retry schedule, and which addresses a delivery may reach.

A payload carries ids, states and counts only, never message text or an error message (those
may quote what a user wrote): a receiver that wants more reads it through the API with its key.
The signature follows the Standard Webhooks specification: ``webhook-signature`` is
``v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">``, keyed with the
base64-decoded part of a ``whsec_`` secret. Anything that does I/O (generating a secret,
resolving a host, sending) lives in ``om_workers``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
from collections.abc import Mapping
from typing import Final, Literal

from om_core.errors import InvalidInputError
from om_core.policy.backoff import RetryPolicy, next_delay_s

EventType = Literal["flush.succeeded", "flush.failed", "session.erased"]
EVENT_TYPES: Final[tuple[EventType, ...]] = ("flush.succeeded", "flush.failed", "session.erased")
SECRET_PREFIX: Final = "whsec_"
MIN_SECRET_BYTES: Final = 24
"""The shortest key a ``whsec_`` secret may hold (bytes after base64 decoding)."""
MAX_SECRET_BYTES: Final = 64


def event_payload(
    event_type: EventType, timestamp: str, data: Mapping[str, str | int | Mapping[str, int]]
) -> bytes:
    """The body of one event, as sent: ``{"type", "timestamp", "data"}``, compact JSON with
    sorted keys (the bytes that are signed and stored, so a retry sends the same bytes).
    ``timestamp`` is ISO 8601 UTC."""
    body = {"type": event_type, "timestamp": timestamp, "data": dict(data)}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret. Raises
    :class:`~om_core.errors.InvalidInputError` (never quoting the secret) when it lacks the
    prefix, is not base64, or decodes to fewer than :data:`MIN_SECRET_BYTES` or more than
    :data:`MAX_SECRET_BYTES` bytes."""
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidInputError(f"a webhook secret starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError("a webhook secret is whsec_ followed by base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidInputError(
            f"a webhook secret holds {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes"
        )
    return key


def secret_from_bytes(raw: bytes) -> str:
    """The ``whsec_`` form of random key bytes (the caller draws them)."""
    return SECRET_PREFIX + base64.b64encode(raw).decode()


def sign(secret: str, message_id: str, timestamp_s: int, body: bytes) -> str:
    """The ``webhook-signature`` header value of one attempt: ``v1,<base64 signature>``.
    ``timestamp_s`` is the ``webhook-timestamp`` (whole seconds since the epoch). Raises what
    :func:`secret_key` raises."""
    signed = f"{message_id}.{timestamp_s}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, message_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt, plus the JSON content type."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": sign(secret, message_id, timestamp_s, body),
    }


def retry_delay_s(
    attempt: int, *, max_attempts: int, base_s: float, cap_s: float, draw: float = 0.0
) -> float | None:
    """Seconds until the next attempt after failed attempt number ``attempt`` (1-based);
    ``None`` once ``max_attempts`` were used (the delivery is then ``failed``, until an admin
    redelivers it). Doubles from ``base_s`` up to ``cap_s``, shortened by up to a quarter
    through ``draw`` in ``[0, 1)`` so endpoints that failed together are not retried in step.
    Raises :class:`~om_core.errors.InvalidInputError` for out-of-range values."""
    policy = RetryPolicy(attempts=max_attempts, base_s=base_s, cap_s=cap_s, jitter=0.25)
    return next_delay_s(attempt, policy, draw)


def refused_address(address: str) -> str | None:
    """Why a delivery may not reach ``address`` (an IP address), or ``None`` when it is a
    public address: private, loopback, link-local (cloud metadata), multicast, reserved and
    unspecified addresses are refused, as are IPv6 forms that map onto them."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    checks = (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("unspecified", ip.is_unspecified),
    )
    for name, hit in checks:
        if hit:
            return f"{name} address"
    return None


__all__ = [
    "EVENT_TYPES",
    "SECRET_PREFIX",
    "EventType",
    "event_payload",
    "refused_address",
    "retry_delay_s",
    "secret_from_bytes",
    "secret_key",
    "sign",
    "signed_headers",
]
