"""Key names (one module, one prefix, unambiguous) and the poison-message delivery counter."""

from __future__ import annotations

import pytest
import redis

from om_workers.coordination import keys
from om_workers.coordination.redelivery import forget_deliveries, record_delivery
from om_workers.coordination.timing import redelivery_exhausted


def test_every_key_is_under_the_prefix() -> None:
    names = [
        keys.pending_key("t", "s"),
        keys.lock_key("t", "s"),
        keys.deliveries_key("j"),
    ]
    assert names == ["om:pending:t:s", "om:lock:t:s", "om:deliveries:j"]


def test_ids_with_separators_never_share_a_key() -> None:
    assert keys.lock_key("a:b", "c") != keys.lock_key("a", "b:c")
    assert keys.lock_key("a%3Ab", "c") != keys.lock_key("a:b", "c")
    assert keys.pending_key("a:b", "c") == "om:pending:a%3Ab:c"


def test_empty_ids_are_refused() -> None:
    with pytest.raises(ValueError):
        keys.lock_key("", "s")
    with pytest.raises(ValueError):
        keys.deliveries_key("")


def test_deliveries_are_counted_until_the_limit(client: redis.Redis) -> None:
    counts = [record_delivery(client, "job-1") for _ in range(4)]
    assert counts == [1, 2, 3, 4]
    assert [redelivery_exhausted(n, max_deliveries=3) for n in counts] == [
        False,
        False,
        False,
        True,
    ]
    assert record_delivery(client, "job-2") == 1
    ttl = client.ttl(keys.deliveries_key("job-1"))
    assert 0 < ttl <= keys.DELIVERIES_TTL_S
    forget_deliveries(client, "job-1")
    assert record_delivery(client, "job-1") == 1


@pytest.mark.parametrize(
    ("tenant", "session"), [("t", "s"), ("a:b", "c"), ("a%3A", "b%25:"), ("%253A", ":%:")]
)
def test_pending_keys_parse_back(tenant: str, session: str) -> None:
    assert keys.parse_pending_key(keys.pending_key(tenant, session)) == (
        tenant,
        session,
    )


@pytest.mark.parametrize(
    "key", ["om:lock:t:s", "om:pending:t", "om:pending:t:s:x", "om:pending::s"]
)
def test_other_keys_do_not_parse_as_pending(key: str) -> None:
    with pytest.raises(ValueError):
        keys.parse_pending_key(key)
