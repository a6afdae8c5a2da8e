"""Key names: one module, one prefix, unambiguous."""

from __future__ import annotations

import pytest

from om_workers.coordination import keys


def test_every_key_is_under_the_prefix() -> None:
    names = [
        keys.pending_key("t", "s"),
        keys.lock_key("t", "s"),
    ]
    assert names == ["om:pending:t:s", "om:lock:t:s"]


def test_ids_with_separators_never_share_a_key() -> None:
    assert keys.lock_key("a:b", "c") != keys.lock_key("a", "b:c")
    assert keys.lock_key("a%3Ab", "c") != keys.lock_key("a:b", "c")
    assert keys.pending_key("a:b", "c") == "om:pending:a%3Ab:c"


def test_empty_ids_are_refused() -> None:
    with pytest.raises(ValueError):
        keys.lock_key("", "s")
    with pytest.raises(ValueError):
        keys.pending_key("t", "")


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
