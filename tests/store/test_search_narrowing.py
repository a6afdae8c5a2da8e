"""A tenant-wide search narrowed by session metadata, on SQLite and PostgreSQL: the tenant's
ranking restricted to the matching sessions, paged the same way, and nothing else found."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from store_factories import message, observations

from om_core.errors import InvalidSearchQueryError
from om_core.read.search import MAX_SEARCH_LIMIT, SearchHit
from om_core.read.search_narrowing import (
    MAX_NARROWED_SESSIONS,
    MAX_NARROWING_PAIRS,
    MAX_NARROWING_VALUE_CHARS,
    MetadataNarrowing,
    narrowable_pairs,
)
from om_workers.store import AccountStore, SqlStore, tombstone_scope
from om_workers.store.repositories import search_levelled, search_sqlite
from om_workers.store.schema import session_metadata_pairs, sessions

_SESSIONS: dict[str, dict[str, Any]] = {
    "alice-1": {"customer": "acme", "subject": "alice"},
    "bob-1": {"customer": "acme", "subject": "bob"},
    "acme-3": {"customer": "acme", "tier": 3},
    "globex": {"customer": "globex"},
    "none": {},
}


@pytest.fixture(autouse=True, params=["as-planned", "exhaustive", "session by session"])
def search_plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each search planned as usual (the matching sessions as one scope), with every message
    taken by combination of levels, and (SQLite) with each session searched alone, as in an
    index far larger than the set."""
    if request.param == "exhaustive":
        monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
        monkeypatch.setattr(search_levelled, "READ_ROWS", -1)
    if request.param == "session by session":
        monkeypatch.setattr(search_sqlite, "SET_ROWS_PER_SESSION", -1)


@pytest.fixture
def customers(store: SqlStore, tenant: str) -> SqlStore:
    """Five sessions of the tenant, each with its metadata and a few invoice messages."""
    for n, (session, metadata) in enumerate(_SESSIONS.items()):
        store.create_session(tenant, session, metadata=metadata)
        parent = None
        for k in range(4):
            words = "invoice " * (1 + (n + k) % 3) + f"overdue {session} turn {k}"
            entry = message(f"{session}-m{k}", session, words, parent_id=parent)
            store.append_entries(tenant, session, entry)
            parent = entry.id
    return store


def _narrowed(**pairs: str) -> MetadataNarrowing:
    return MetadataNarrowing(tuple(pairs.items()))


def _ranked(hits: tuple[SearchHit, ...]) -> list[tuple[str, str, float]]:
    return [(hit.session_id, hit.id, hit.score) for hit in hits]


def test_a_narrowed_search_is_the_tenants_ranking_of_the_matching_sessions(
    customers: SqlStore, tenant: str
) -> None:
    whole = customers.search(tenant, "invoice overdue", limit=MAX_SEARCH_LIMIT).hits
    acme = ("alice-1", "bob-1", "acme-3")
    expected = [hit for hit in _ranked(whole) if hit[0] in acme]
    narrowing = _narrowed(customer="acme")
    narrowed = customers.search(tenant, "invoice overdue", limit=100, narrowing=narrowing)
    assert _ranked(narrowed.hits) == expected
    assert len(expected) == 12 and narrowed.next_cursor is None
    paged: list[tuple[str, str, float]] = []
    cursor: str | None = None
    while True:
        page = customers.search(
            tenant, "invoice overdue", limit=3, cursor=cursor, narrowing=narrowing
        )
        assert len(page.hits) <= 3
        paged += _ranked(page.hits)
        if (cursor := page.next_cursor) is None:
            break
    assert paged == expected


def test_every_pair_must_hold_as_that_string(customers: SqlStore, tenant: str) -> None:
    def sessions(narrowing: MetadataNarrowing) -> set[str]:
        hits = customers.search(tenant, "invoice", limit=100, narrowing=narrowing).hits
        return {hit.session_id for hit in hits}

    assert sessions(_narrowed(customer="acme", subject="alice")) == {"alice-1"}
    assert sessions(_narrowed(customer="globex")) == {"globex"}
    # A number never matches its text, on either store; nor another case, nor a missing key.
    assert sessions(_narrowed(tier="3")) == set()
    assert sessions(_narrowed(customer="ACME")) == set()
    assert sessions(_narrowed(region="eu")) == set()


def test_another_tenants_and_an_erased_session_are_never_searched(
    customers: SqlStore, accounts: AccountStore, tenant: str
) -> None:
    other = accounts.create_tenant("other").id
    customers.create_session(other, "theirs", metadata={"customer": "acme"})
    customers.append_entries(other, "theirs", message("theirs-m0", "theirs", "invoice overdue"))
    acme = _narrowed(customer="acme")
    found = customers.search(tenant, "invoice", limit=100, narrowing=acme).hits
    assert {hit.session_id for hit in found} == {"alice-1", "bob-1", "acme-3"}
    assert _ranked(customers.search(other, "invoice", narrowing=acme).hits)[0][:2] == (
        "theirs",
        "theirs-m0",
    )
    bob = _pairs_of(customers, tenant, "bob-1")
    assert bob == [("customer", "acme"), ("subject", "bob")]
    customers.erasure.erase_session(tenant, "bob-1", None)  # hidden at once
    found = customers.search(tenant, "invoice", limit=100, narrowing=acme).hits
    assert {hit.session_id for hit in found} == {"alice-1", "acme-3"}
    # Its metadata pairs went with the hiding, before a worker deletes the session's rows.
    with customers.engine.connect() as connection:
        held = connection.execute(select(session_metadata_pairs.c.value)).scalars().all()
    assert "bob" not in held and "alice" in held


def _pairs_of(store: SqlStore, tenant: str, session_id: str) -> list[tuple[str, str]]:
    """The index rows of a session's metadata pairs, in key order."""
    pairs = session_metadata_pairs
    statement = (
        select(pairs.c.key, pairs.c.value)
        .join(sessions, sessions.c.pk == pairs.c.session_pk)
        .where(sessions.c.tenant_id == tenant, sessions.c.id == session_id)
        .order_by(pairs.c.key)
    )
    with store.engine.connect() as connection:
        return [(row.key, row.value) for row in connection.execute(statement)]


def test_every_pair_a_narrowing_can_name_is_indexed_and_all_must_hold(
    store: SqlStore, tenant: str
) -> None:
    eight = {f"k{n}": f"v{n}" for n in range(MAX_NARROWING_PAIRS)}
    longest = "é" * MAX_NARROWING_VALUE_CHARS
    metadata: dict[str, Any] = {
        **eight,
        "long": longest,
        "too-long": longest + "é",
        "a key": "x",
        "n": 3,
        "nested": {"k0": "v0"},
    }
    store.create_session(tenant, "tagged", metadata=metadata)
    store.create_session(tenant, "seven", metadata={**eight, "k7": "other"})
    for session_id in ("tagged", "seven"):
        store.append_entries(
            tenant, session_id, message(f"{session_id}-m0", session_id, "invoice due")
        )
    assert _pairs_of(store, tenant, "tagged") == narrowable_pairs(metadata)
    assert len(_pairs_of(store, tenant, "tagged")) == MAX_NARROWING_PAIRS + 1

    def found(**pairs: str) -> list[str]:
        hits = store.search(tenant, "invoice", narrowing=_narrowed(**pairs)).hits
        return sorted(hit.session_id for hit in hits)

    assert found(**eight) == ["tagged"]
    assert found(**{**eight, "k7": "other"}) == ["seven"]
    assert found(k0="v0", k3="v3") == ["seven", "tagged"]
    assert found(long=longest) == ["tagged"]
    assert found(k0="v0", n="3") == []


def test_a_tombstoned_message_of_a_matching_session_is_never_found(
    customers: SqlStore, tenant: str
) -> None:
    acme = _narrowed(customer="acme")
    before = customers.search(tenant, "invoice overdue", limit=100, narrowing=acme).hits
    assert "bob-1-m2" in {hit.id for hit in before}
    customers.add_tombstones(tenant, tombstone_scope("bob-1"), ["bob-1-m2"])
    after = customers.search(tenant, "invoice overdue", limit=100, narrowing=acme).hits
    assert _ranked(after) == [hit for hit in _ranked(before) if hit[1] != "bob-1-m2"]


def test_memory_of_the_matching_sessions_only_is_found(customers: SqlStore, tenant: str) -> None:
    memory: dict[str, str] = {}
    for session in ("alice-1", "bob-1", "globex"):
        entry, ids = observations(f"{session}-obs", [f"{session}-m3"], f"{session}-m3", session)
        customers.append_memory(tenant, session, entry, customers.raise_epoch(tenant, session))
        memory[session] = ids[0]
    hits = customers.search(tenant, "fact", limit=100, narrowing=_narrowed(customer="acme")).hits
    assert {(hit.session_id, hit.id) for hit in hits} == {
        ("alice-1", memory["alice-1"]),
        ("bob-1", memory["bob-1"]),
    }


def test_the_matching_sessions_are_capped_at_the_boundary(store: SqlStore, tenant: str) -> None:
    for n in range(MAX_NARROWED_SESSIONS):
        store.create_session(tenant, f"t{n}", metadata={"team": "red"})
    store.append_entries(tenant, "t7", message("t7-m0", "t7", "quarterly invoice"))
    red = _narrowed(team="red")
    assert [hit.id for hit in store.search(tenant, "invoice", narrowing=red).hits] == ["t7-m0"]
    store.create_session(tenant, "one-more", metadata={"team": "red"})
    with pytest.raises(InvalidSearchQueryError, match="more than 100 sessions"):
        store.search(tenant, "invoice", narrowing=red)


def test_a_session_search_takes_no_narrowing(customers: SqlStore, tenant: str) -> None:
    with pytest.raises(InvalidSearchQueryError, match="tenant-wide search"):
        customers.search(tenant, "invoice", session_id="alice-1", narrowing=_narrowed(a="b"))
