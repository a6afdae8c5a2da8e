"""Webhook rules as tables: the retry schedule, the Standard Webhooks signature (checked by the
``standardwebhooks`` package a receiver uses, and refused once tampered with), secrets, and the
addresses a delivery may not reach."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from om_core.errors import InvalidInputError
from om_core.policy.webhooks import (
    event_payload,
    refused_address,
    retry_delay_s,
    secret_from_bytes,
    secret_key,
    sign,
    signed_headers,
)

SECRET = secret_from_bytes(bytes(range(32)))


@pytest.mark.parametrize(
    ("attempt", "draw", "expected"),
    [
        (1, 0.0, 2.0),
        (2, 0.0, 4.0),
        (3, 0.0, 8.0),
        (4, 0.0, 10.0),  # capped
        (5, 0.0, 10.0),
        (1, 0.5, 1.75),  # jitter shortens by up to a quarter
        (3, 0.99, 8.0 * (1 - 0.25 * 0.99)),
        (6, 0.0, None),  # the sixth attempt was the last
        (7, 0.0, None),
    ],
)
def test_the_retry_schedule_doubles_to_its_cap_and_stops(
    attempt: int, draw: float, expected: float | None
) -> None:
    got = retry_delay_s(attempt, max_attempts=6, base_s=2.0, cap_s=10.0, draw=draw)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(InvalidInputError):
        retry_delay_s(attempt, max_attempts=3, base_s=1, cap_s=1)


def test_a_signed_event_verifies_with_standardwebhooks() -> None:
    body = event_payload(
        "flush.succeeded",
        "2026-12-03T16:00:00Z",
        {"job_id": "j1", "session_id": "s1", "state": "succeeded", "counts": {"appended": 1}},
    )
    # The package checks the timestamp against its own clock (5 minutes' tolerance).
    now = int(time.time())
    headers = signed_headers(SECRET, "msg_1", now, body)
    assert Webhook(SECRET).verify(body, headers) == json.loads(body)
    assert headers["webhook-id"] == "msg_1" and headers["webhook-timestamp"] == str(now)


def test_a_tampered_event_or_signature_fails_verification() -> None:
    now = int(time.time())
    body = event_payload("flush.failed", "2026-12-03T16:00:00Z", {"job_id": "j1"})
    headers = signed_headers(SECRET, "msg_2", now, body)
    hook = Webhook(SECRET)
    with pytest.raises(WebhookVerificationError):
        hook.verify(body.replace(b"j1", b"j2"), headers)
    digest = bytearray(base64.b64decode(headers["webhook-signature"][3:]))
    digest[0] ^= 1
    tampered = {**headers, "webhook-signature": "v1," + base64.b64encode(bytes(digest)).decode()}
    with pytest.raises(WebhookVerificationError):
        hook.verify(body, tampered)
    with pytest.raises(WebhookVerificationError):
        hook.verify(body, {**headers, "webhook-id": "msg_3"})
    with pytest.raises(WebhookVerificationError):
        Webhook(secret_from_bytes(bytes(32))).verify(body, headers)


def test_the_signature_is_the_documented_hmac() -> None:
    body = b'{"a":1}'
    expected = hmac.new(bytes(range(32)), b"msg_9.42." + body, hashlib.sha256).digest()
    assert sign(SECRET, "msg_9", 42, body) == "v1," + base64.b64encode(expected).decode()


def test_the_payload_is_compact_sorted_json() -> None:
    body = event_payload("session.erased", "2026-12-03T16:00:00Z", {"session_id": "s", "a": 1})
    assert body == (
        b'{"data":{"a":1,"session_id":"s"},"timestamp":"2026-12-03T16:00:00Z",'
        b'"type":"session.erased"}'
    )


@pytest.mark.parametrize(
    "secret",
    [
        "not-a-secret",
        "whsec_***",
        "whsec_" + base64.b64encode(bytes(23)).decode(),  # one byte short
        "whsec_" + base64.b64encode(bytes(65)).decode(),  # one byte over
    ],
)
def test_a_malformed_secret_is_refused_without_quoting_it(secret: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        secret_key(secret)
    assert secret not in str(caught.value)


@pytest.mark.parametrize("size", [24, 64])
def test_secrets_at_the_size_bounds_are_accepted(size: int) -> None:
    assert secret_key(secret_from_bytes(bytes(size))) == bytes(size)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback address"),
        ("::1", "loopback address"),
        ("10.1.2.3", "private address"),
        ("172.16.0.1", "private address"),
        ("192.168.1.1", "private address"),
        ("169.254.169.254", "link-local address"),
        ("fe80::1", "link-local address"),
        ("fc00::1", "private address"),
        ("::ffff:127.0.0.1", "loopback address"),
        ("0.0.0.0", "private address"),
        ("224.0.0.1", "multicast address"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_private_loopback_and_link_local_addresses_are_refused(
    address: str, why: str | None
) -> None:
    assert refused_address(address) == why
