"""SQLite's search plans give the whole query's ranking: scored by one statement, class by
class, or both (the cost model switching part-way), every page holds the same hits with the
same scores, to the bit, for a session and for a tenant."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest
from store_factories import message

from om_core.read.search import SearchHit
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store.repositories import search_sqlite
from om_workers.store.repositories.search_sqlite import SqliteKeys

# Word n is drawn with a chance falling as 1/n: a few words in most messages, most in few.
VOCABULARY = 400
MESSAGES = 1_500
# Each plan's (ROW_COST, SAMPLED_SESSIONS): the last estimates a tenant's rows from one of its
# sessions, so the big tenant may be taken for a small one (its token kept).
PLANS = {
    "one statement": (0.0, search_sqlite.SAMPLED_SESSIONS),
    "cost model": (search_sqlite.ROW_COST, search_sqlite.SAMPLED_SESSIONS),
    "by class": (math.inf, search_sqlite.SAMPLED_SESSIONS),
    "by class, one session sampled": (math.inf, 1),
}


def _word(rng: random.Random) -> str:
    return f"w{int(VOCABULARY ** rng.random())}"


def _fill(store: SqlStore, tenant: str, session: str, count: int, rng: random.Random) -> None:
    store.create_session(tenant, session)
    batch = []
    for n in range(count):
        text = " ".join(_word(rng) for _ in range(rng.randint(4, 30)))
        parent = batch[-1].id if batch else None
        batch.append(message(f"{session}-{n}", session, text, parent_id=parent))
    store.append_entries(tenant, session, batch)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SqlStore, str, str]]:
    """A tenant holding most of the index (three sessions, the first short) beside a small one
    using the same words, so a tenant-wide search of either takes each of its two tenancy
    filters, and the big one the other as well when its first session alone is sampled."""
    url = f"sqlite:///{tmp_path_factory.mktemp('plans') / 'plans.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    accounts = AccountStore(store.engine)
    big, small = accounts.create_tenant("big").id, accounts.create_tenant("small").id
    rng = random.Random(17)
    _fill(store, big, "z", MESSAGES // 20, rng)
    _fill(store, big, "a", MESSAGES, rng)
    _fill(store, big, "b", MESSAGES // 3, rng)
    _fill(store, small, "c", MESSAGES // 5, rng)
    yield store, big, small
    store.close()


def _queries() -> list[str]:
    rng = random.Random(23)
    short = [" ".join(_word(rng) for _ in range(3)) for _ in range(24)]
    # A rare word first, between and last: merged classes, and exact ones for the middle.
    placed = ["w250 w3 w1", "w3 w250 w1", "w1 w3 w250", "w2 w40 w9 w250"]
    return [*short, *(" ".join(_word(rng) for _ in range(7)) for _ in range(4)), "w1 w2", *placed]


def _pages(store: SqlStore, tenant: str, q: str, session: str | None) -> list[SearchHit]:
    hits: list[SearchHit] = []
    cursor: str | None = None
    for _ in range(3):
        page = store.search(tenant, q, session_id=session, limit=7, cursor=cursor)
        hits += page.hits
        if (cursor := page.next_cursor) is None:
            break
    return hits


@pytest.mark.parametrize("scope", ["a", None])
@pytest.mark.parametrize("q", _queries())
def test_every_plan_pages_the_same_hits_with_the_same_scores(
    corpus: tuple[SqlStore, str, str], monkeypatch: pytest.MonkeyPatch, q: str, scope: str | None
) -> None:
    store, big, small = corpus
    for tenant in (big, small):
        session = scope if tenant == big else ("c" if scope else None)
        found = {}
        for name, (cost, sampled) in PLANS.items():
            monkeypatch.setattr(search_sqlite, "ROW_COST", cost)
            monkeypatch.setattr(search_sqlite, "SAMPLED_SESSIONS", sampled)
            found[name] = [(h.id, h.session_id, h.score) for h in _pages(store, tenant, q, session)]
        for name in PLANS:
            assert found[name] == found["one statement"], name
        own = {"z", "a", "b"} if tenant == big else {"c"}
        assert {session_id for _, session_id, _ in found["one statement"]} <= own


def test_classes_beyond_reach_are_never_scored(
    corpus: tuple[SqlStore, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rare word beside two common ones: the rows holding the rare word fill the page far
    # above anything the common words alone can score, so their classes are left unscored.
    store, big, _ = corpus
    monkeypatch.setattr(search_sqlite, "ROW_COST", math.inf)
    matched: list[str] = []
    real = SqliteKeys._match

    def counting(self: SqliteKeys, expression: str) -> list[object]:
        matched.append(expression)
        return real(self, expression)  # type: ignore[return-value]

    monkeypatch.setattr(SqliteKeys, "_match", counting)
    hits = store.search(big, "w1 w3 w250", session_id="a", limit=3).hits
    assert len(hits) == 3
    assert all("w250" in expression for expression in matched)
    assert len(matched) < 7
