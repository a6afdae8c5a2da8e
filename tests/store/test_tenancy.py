"""Tenancy and keys: another tenant's session does not exist; keys are stored hashed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select
from store_factories import message

from om_workers.errors import (
    ApiKeyNotFoundError,
    FlushJobNotFoundError,
    InvalidApiKeyError,
    SessionExistsError,
    SessionNotFoundError,
    TenantExistsError,
    TenantNotFoundError,
)
from om_workers.store import AccountStore, SqlMemoryUnitOfWork, SqlStore
from om_workers.store.accounts import hash_api_key
from om_workers.store.schema import api_keys


def test_another_tenants_session_is_not_found(
    store: SqlStore, accounts: AccountStore, tenant: str, session_id: str
) -> None:
    store.append_entries(tenant, session_id, message("a"))
    run = store.create_job(tenant, session_id)
    accounts.create_tenant("intruder")
    calls: list[Callable[[], Any]] = [
        lambda: store.get_session("intruder", session_id),
        lambda: store.read_branch("intruder", session_id),
        lambda: store.read_page("intruder", session_id),
        lambda: store.read_tail("intruder", session_id, 5),
        lambda: store.read_context_state("intruder", session_id),
        lambda: store.append_entries("intruder", session_id, message("b")),
        lambda: store.append_memory("intruder", session_id, message("b"), 0),
        lambda: store.raise_epoch("intruder", session_id),
        lambda: store.fork("intruder", session_id, "a"),
        lambda: store.create_job("intruder", session_id),
        lambda: SqlMemoryUnitOfWork(store, "intruder", session_id).entries(),
    ]
    for call in calls:
        with pytest.raises(SessionNotFoundError) as caught:
            call()
        # Word for word what a missing session says: nothing confirms that it exists.
        assert str(caught.value) == f"no session {session_id!r}"
    with pytest.raises(FlushJobNotFoundError):
        store.get_job("intruder", run.id)
    # The intruder may use the same session id for its own session.
    store.create_session("intruder", session_id)
    assert store.read_branch("intruder", session_id) == ()
    assert [e.id for e in store.read_branch(tenant, session_id)] == ["a"]
    assert store.get_session(tenant, session_id).epoch == 0


def test_api_keys_resolve_to_their_tenant_and_only_a_hash_is_stored(
    store: SqlStore, accounts: AccountStore, tenant: str
) -> None:
    created = accounts.create_api_key(tenant, label="ci")
    assert created.plaintext.startswith("om_")
    assert accounts.resolve_api_key(created.plaintext) == tenant
    with store.engine.connect() as connection:
        stored = connection.execute(select(api_keys.c.key_hash)).scalars().all()
    assert stored == [hash_api_key(created.plaintext)]
    assert created.plaintext not in stored[0]
    for bad in ("", "om_nope", created.plaintext + "x", "x" * 10_000):
        with pytest.raises(InvalidApiKeyError):
            accounts.resolve_api_key(bad)
    accounts.revoke_api_key(tenant, created.key_id)
    accounts.revoke_api_key(tenant, created.key_id)
    with pytest.raises(InvalidApiKeyError):
        accounts.resolve_api_key(created.plaintext)
    with pytest.raises(InvalidApiKeyError):
        accounts.revoke_api_key("someone-else", created.key_id)


def test_tenants_and_sessions_are_created_once(
    store: SqlStore, accounts: AccountStore, tenant: str
) -> None:
    with pytest.raises(TenantExistsError):
        accounts.create_tenant(tenant)
    with pytest.raises(TenantNotFoundError):
        store.create_session("nobody", "s")
    with pytest.raises(TenantNotFoundError):
        accounts.create_api_key("nobody")
    info = store.create_session(tenant, metadata={"agent": "a1"})
    assert info.metadata == {"agent": "a1"} and info.created_at.tzinfo is not None
    with pytest.raises(SessionExistsError):
        store.create_session(tenant, info.id)
    assert accounts.get_tenant(tenant).id == tenant


def test_keys_are_listed_without_secrets_and_revoked_by_id(
    accounts: AccountStore, tenant: str
) -> None:
    first = accounts.create_api_key(tenant, label="ci")
    second = accounts.create_api_key(tenant, label="laptop")
    accounts.create_tenant("neighbour")
    theirs = accounts.create_api_key("neighbour")
    listed = accounts.list_api_keys(tenant)
    assert [k.key_id for k in listed] == [first.key_id, second.key_id]
    assert [k.label for k in listed] == ["ci", "laptop"]
    for info, created in zip(listed, (first, second), strict=True):
        assert created.plaintext.startswith(info.prefix) and info.prefix == f"om_{info.key_id}_"
        assert info.revoked_at is None and info.tenant_id == tenant
        # Nothing listed lets anyone use the key or tell its hash.
        assert created.plaintext not in repr(info) and hash_api_key(created.plaintext) not in repr(
            info
        )
    revoked = accounts.revoke_key(first.key_id)
    assert revoked.revoked_at is not None and revoked.key_id == first.key_id
    with pytest.raises(InvalidApiKeyError):
        accounts.resolve_api_key(first.plaintext)
    # Again: no change, the first revocation time stays.
    assert accounts.revoke_key(first.key_id).revoked_at == revoked.revoked_at
    assert accounts.resolve_api_key(second.plaintext) == tenant
    assert accounts.resolve_api_key(theirs.plaintext) == "neighbour"
    assert [k.revoked_at is not None for k in accounts.list_api_keys(tenant)] == [True, False]
    with pytest.raises(ApiKeyNotFoundError):
        accounts.revoke_key("0000000000000000")
    with pytest.raises(TenantNotFoundError):
        accounts.list_api_keys("nobody")
