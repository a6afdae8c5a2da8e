"""The search plans give the defined ranking on both stores: whether rows are scored from
their terms, by combination of levels, or both, with counts fresh, kept or (PostgreSQL)
estimated from the statistics, in batches of any size, every page holds the hits a
brute-force scoring of every row gives, with the same scores to the bit, for a session and
for a tenant."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql
from store_factories import custom, message

from om_core.read.search import SearchHit
from om_core.read.search_narrowing import MetadataNarrowing
from om_core.read.search_plan import MAX_SCORED_STEMS, PlanWord, score
from om_core.read.search_terms import idf, level_of, query_stems, stems
from om_workers.store import AccountStore, SqlStore, upgrade
from om_workers.store.repositories import search_counts, search_levelled, search_sqlite
from om_workers.store.repositories.search_counts import KEPT_COUNTS
from om_workers.store.repositories.search_levelled import KeyQuery, LevelledKeys
from om_workers.store.repositories.search_postgresql import PostgresIndex, statistics
from om_workers.store.repositories.search_sqlite import SqliteIndex
from tests.conftest import BACKENDS, fresh_database, needs_postgres

# Word n is drawn with a chance falling as 1/n: a few words in most messages, most in few.
VOCABULARY = 400
MESSAGES = 1_500
PAGE = 7
_SETS = "mixed, sets of rare words read where PostgreSQL's are, probed where SQLite's are"
_BY_SHARE = "row by row within half the index's rows, else mixed"
PLANS: dict[str, dict[str, float]] = {
    "row by row": {"SMALL_SCOPE": 10**9},
    "by combination": {"SMALL_SCOPE": -1, "small_share": 0, "READ_ROWS": -1},
    "mixed": {"SMALL_SCOPE": -1, "small_share": 0, "READ_ROWS": 300},
    _SETS: {
        "SMALL_SCOPE": -1,
        "small_share": 0,
        "READ_ROWS": 300,
        "SET_ROWS": 40,
        "reads_sets": -1,
    },
    "mixed, counts kept, batches of one": {
        "SMALL_SCOPE": -1,
        "small_share": 0,
        "READ_ROWS": 300,
        "KEPT_ROWS": 100,
        "FIRST_BATCH": 1,
        "MAX_BATCH": 2,
    },
    _BY_SHARE: {"SMALL_SCOPE": -1, "small_share": 0.5, "READ_ROWS": 300},
}
POSTGRESQL_PLANS = ("by combination", _SETS, "mixed, counts kept, batches of one", _BY_SHARE)
"""The plans PostgreSQL pages every query through. Its statements cost milliseconds, so the
scopes read row by row and "mixed" (the last plan without its batches of one) are left to
tests/store/test_search.py, whose every rule PostgreSQL checks as planned."""
SESSIONS = {"z": MESSAGES // 20, "a": MESSAGES, "b": MESSAGES // 3, "c": MESSAGES // 5}
IN_SET = ("z", "b")
"""The sessions of the big tenant a narrowing by ``set:zb`` finds."""


def _patch(patched: pytest.MonkeyPatch, settings: dict[str, float]) -> None:
    """Apply a plan's settings (``reads_sets``: each store reads sets where the other probes
    them; ``small_share``: both stores' share of the index scored row by row)."""
    for setting, value in settings.items():
        if setting == "reads_sets":
            patched.setattr(SqliteIndex, "reads_sets", True)
            patched.setattr(PostgresIndex, "reads_sets", False)
        elif setting == "small_share":
            patched.setattr(SqliteIndex, "small_share", value)
            patched.setattr(PostgresIndex, "small_share", value)
        else:
            module = search_counts if setting == "KEPT_ROWS" else search_levelled
            patched.setattr(module, setting, value)


def _plans(store: SqlStore) -> list[tuple[str, dict[str, float]]]:
    """The plans every query is paged through on ``store``."""
    if store.engine.dialect.name == "sqlite":
        return list(PLANS.items())
    return [(name, PLANS[name]) for name in POSTGRESQL_PLANS]


def _each_plan(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, pytest.MonkeyPatch]]:
    """Each plan of ``store`` in turn: its name and the patcher holding its settings, undone
    (and the counts the search kept dropped) before the next."""
    for name, settings in _plans(store):
        with monkeypatch.context() as patched:
            _patch(patched, settings)
            yield name, patched
        KEPT_COUNTS.clear()


def _word(rng: random.Random) -> str:
    return f"w{int(VOCABULARY ** rng.random())}"


@pytest.fixture(scope="module", params=BACKENDS)
def corpus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SqlStore, str, str, dict[str, list[str]]]]:
    """A tenant holding most of the index (sessions z, a and b) beside a small one (c) using
    the same words, so a tenant-wide search of either takes each tenancy filter; and every
    message's text, by session. On PostgreSQL, autovacuum leaves the tables unanalysed, so
    the counts are exact until a test analyses them."""
    with fresh_database(request.param, tmp_path_factory.mktemp("plans")) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        if store.engine.dialect.name == "postgresql":
            with store.engine.begin() as connection:
                for table in ("entries", "memory_items"):
                    connection.exec_driver_sql(
                        f"ALTER TABLE {table} SET (autovacuum_enabled = false)"
                    )
        yield from _filled(store)
        store.close()


def _filled(
    store: SqlStore,
) -> Iterator[tuple[SqlStore, str, str, dict[str, list[str]]]]:
    accounts = AccountStore(store.engine)
    big, small = accounts.create_tenant("big").id, accounts.create_tenant("small").id
    rng = random.Random(17)
    texts: dict[str, list[str]] = {}
    for session, count in SESSIONS.items():
        tenant = small if session == "c" else big
        store.create_session(tenant, session, metadata={"set": "zb"} if session in IN_SET else {})
        texts[session] = [
            " ".join(_word(rng) for _ in range(rng.randint(4, 30))) for _ in range(count)
        ]
        batch = []
        for n, text in enumerate(texts[session]):
            parent = batch[-1].id if batch else None
            batch.append(message(f"{session}-{n}", session, text, parent_id=parent))
        store.append_entries(tenant, session, batch)
    yield store, big, small, texts


def _expected(
    texts: dict[str, list[str]],
    q: str,
    sessions: list[str],
    weighed: tuple[int, dict[str, int]] | None = None,
) -> list[tuple[str, float]]:
    """The ranking by definition: every message of ``sessions`` scored on the query's stems of
    highest IDF over the whole index, best first, ties in row order; the IDFs from the rows
    counted, or from ``weighed`` (the index's rows and each stem's, as estimated)."""
    levels = {
        (s, n): {stem: level_of(c, len(found)) for stem, c in Counter(found).items()}
        for s, rows in texts.items()
        for n, found in ((n, stems(t)) for n, t in enumerate(rows))
    }
    documents: Counter[str] | dict[str, int] = Counter(
        stem for held in levels.values() for stem in held
    )
    rows = len(levels)
    if weighed is not None:
        rows, documents = weighed
    asked = [s for s in query_stems(q.split()) if documents.get(s)]
    best = sorted(asked, key=lambda s: -idf(rows, documents[s]))[:MAX_SCORED_STEMS]
    words = [PlanWord(s, idf(rows, documents[s]), ()) for s in asked if s in best]
    ranked = []
    for (session, n), held in levels.items():
        if session not in sessions:
            continue
        found = {i: held[w.stem] for i, w in enumerate(words) if w.stem in held}
        if found:
            place = (list(SESSIONS).index(session), n)
            ranked.append((-score(words, found), place, f"{session}-{n}"))
    return [(entry_id, -rank) for rank, _, entry_id in sorted(ranked)]


def _pages(
    store: SqlStore,
    tenant: str,
    q: str,
    session: str | None,
    narrowing: MetadataNarrowing | None = None,
) -> list[SearchHit]:
    hits: list[SearchHit] = []
    cursor: str | None = None
    for _ in range(3):
        page = store.search(
            tenant, q, session_id=session, limit=PAGE, cursor=cursor, narrowing=narrowing
        )
        hits += page.hits
        if (cursor := page.next_cursor) is None:
            break
    return hits


def _queries() -> list[str]:
    rng = random.Random(23)
    short = [" ".join(_word(rng) for _ in range(3)) for _ in range(16)]
    long = [" ".join(_word(rng) for _ in range(7)) for _ in range(4)]
    return [*short, *long, "w1 w2", "w1", "w250 w3 w1", "w2 w40 w9 w250", "w399 w398 nowhere"]


@pytest.mark.parametrize("scope", ["a", None])
@pytest.mark.parametrize("q", _queries())
def test_every_plan_pages_the_defined_ranking(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    q: str,
    scope: str | None,
) -> None:
    store, big, small, texts = corpus
    for tenant in (big, small):
        session = scope if tenant == big else ("c" if scope else None)
        own = ["z", "a", "b"] if tenant == big else ["c"]
        expected = _expected(texts, q, [session] if session else own)[: 3 * PAGE]
        for name, _ in _each_plan(store, monkeypatch):
            # SQLite a second time, with the counts it keeps (PostgreSQL keeps none).
            for _ in range(2 if store.engine.dialect.name == "sqlite" else 1):
                found = [(h.id, h.score) for h in _pages(store, tenant, q, session)]
                assert found == expected, name


@pytest.mark.parametrize("q", _queries())
def test_every_plan_pages_the_defined_ranking_of_a_set_of_sessions(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    q: str,
) -> None:
    # SQLite searches a set both ways: as one scope, and a session at a time (keys merged).
    store, big, _, texts = corpus
    narrowing = MetadataNarrowing((("set", "zb"),))
    expected = _expected(texts, q, list(IN_SET))[: 3 * PAGE]
    readings = (10**9, -1) if store.engine.dialect.name == "sqlite" else (None,)
    for name, patched in _each_plan(store, monkeypatch):
        for rows_per_session in readings:
            if rows_per_session is not None:
                patched.setattr(search_sqlite, "SET_ROWS_PER_SESSION", rows_per_session)
            found = [(h.id, h.score) for h in _pages(store, big, q, None, narrowing)]
            assert found == expected, (name, rows_per_session)


@pytest.mark.parametrize(("per_session", "one_scope"), [(475, True), (474, False)])
def test_sqlite_takes_a_set_as_one_scope_up_to_its_rows_per_session(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    per_session: int,
    one_scope: bool,
) -> None:
    # The index holds 2,375 messages: five sessions take it as one scope at exactly 475 rows
    # a session, not at 474. PostgreSQL always takes a set.
    store, _, _, texts = corpus
    assert sum(map(len, texts.values())) == 2_375
    monkeypatch.setattr(search_sqlite, "SET_ROWS_PER_SESSION", per_session)
    with store.engine.connect() as connection:
        if store.engine.dialect.name == "sqlite":
            assert SqliteIndex.takes_sessions(connection, 5) is one_scope
        else:
            assert PostgresIndex.takes_sessions(connection, 5)


def test_sqlite_sizes_a_scope_by_its_sessions_entries(tmp_path: Path) -> None:
    # A session's size for the plan is its entry count, as PostgreSQL's; a tenant's is its
    # live sessions' sum (an erased session's entries are not searched).
    with fresh_database("sqlite", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        try:
            tenant = AccountStore(store.engine).create_tenant("t").id
            for session, count in (("s", 3), ("one", 1), ("gone", 2)):
                store.create_session(tenant, session)
                words = [message(f"{session}{n}", session, f"w{n} lease") for n in range(count)]
                store.append_entries(tenant, session, words)
            store.append_entries(tenant, "s", [custom("c", "s", {"type": "note"})])
            store.erasure.erase_session(tenant, "gone", None)
            with store.engine.connect() as connection:
                live = sql("SELECT id, pk FROM sessions WHERE erased_at IS NULL")
                sizes = {
                    session: SqliteIndex(connection, KeyQuery(tenant, pk, None, 5)).scope_rows()
                    for session, pk in connection.execute(live)
                }
                KEPT_COUNTS.clear()
                tenant_size = SqliteIndex(connection, KeyQuery(tenant, None, None, 5)).scope_rows()
        finally:
            store.close()
    assert sizes == {"s": 4, "one": 1}
    assert tenant_size == 5


@pytest.mark.parametrize("kept_rows", [1, 10**9])
def test_a_tenants_kept_estimate_plans_but_never_changes_the_hits(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    kept_rows: int,
) -> None:
    # The tenant's rows are estimated once and kept; a kept estimate however wrong (the big
    # tenant taken for one row, or for a billion) chooses another plan, never other hits.
    store, big, _, texts = corpus
    monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
    monkeypatch.setattr(search_counts, "KEPT_ROWS", 100)
    expected = _expected(texts, "w2 w9 w40", ["z", "a", "b"])[: 3 * PAGE]
    KEPT_COUNTS.clear()
    assert [(h.id, h.score) for h in _pages(store, big, "w2 w9 w40", None)] == expected
    estimate = KEPT_COUNTS.tenant_rows(store.engine, big)
    assert estimate is not None and estimate >= 100
    KEPT_COUNTS.keep_tenant_rows(store.engine, big, kept_rows)
    assert [(h.id, h.score) for h in _pages(store, big, "w2 w9 w40", None)] == expected
    assert KEPT_COUNTS.tenant_rows(store.engine, big) == kept_rows
    KEPT_COUNTS.clear()


@needs_postgres
def test_postgresql_weighs_by_its_statistics_once_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Analysed, PostgreSQL weighs each stem by the statistics' estimate of its rows; the
    # pages of every plan are the ranking those estimates define.
    with fresh_database("postgresql", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        try:
            _, big, _, texts = next(_filled(store))
            with store.engine.begin() as connection:
                connection.exec_driver_sql("ANALYZE entries")
                KEPT_COUNTS.clear()
                seen = statistics(connection, "entries")
            assert seen is not None and seen.rows == sum(map(len, texts.values()))
            for q in ("w1 w2 w40", "w3 w250 w9 w17", "w399 w398 nowhere"):
                documents = {stem: seen.counted(stem).documents for stem in query_stems(q.split())}
                expected = _expected(texts, q, ["z", "a", "b"], (seen.rows, documents))
                for name, settings in PLANS.items():
                    with monkeypatch.context() as patched:
                        _patch(patched, settings)
                        found = [(h.id, h.score) for h in _pages(store, big, q, None)]
                        assert found == expected[: 3 * PAGE], (q, name)
        finally:
            KEPT_COUNTS.clear()
            store.close()


@needs_postgres
def test_postgresql_levels_a_lexeme_as_python_does(tmp_path: Path) -> None:
    # The generated column's levels are level_of's, to the bit: every count of a lexeme in
    # every text length up to 250 words.
    pairs = [(c, w) for w in range(1, 251) for c in range(1, min(w, 40) + 1)]
    vectors = []
    for count, words in pairs:
        held = ",".join(map(str, range(1, count + 1)))
        rest = ",".join(map(str, range(count + 1, words + 1)))
        vectors.append(f"'a':{held}" + (f" 'b':{rest}" if rest else ""))
    with fresh_database("postgresql", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        try:
            with store.engine.connect() as connection:
                found = connection.execute(
                    sql(
                        "SELECT om_levelled_terms(CAST(v AS tsvector))::text "
                        "FROM unnest(CAST(:vectors AS text[])) WITH ORDINALITY AS t(v, n) "
                        "ORDER BY n"
                    ),
                    {"vectors": vectors},
                ).scalars()
                levels = [int(text.split("'a_")[1][0]) for text in found]
        finally:
            store.close()
    assert levels == [level_of(count, words) for count, words in pairs]


def _combinations_asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, the size of each statement of combinations a search asks."""
    asked: list[int] = []
    real = LevelledKeys._combined

    def counting(self: LevelledKeys, *args: Any) -> Any:
        asked.append(len(args[2]))
        return real(self, *args)

    monkeypatch.setattr(LevelledKeys, "_combined", counting)
    return asked


def _small_store(folder: Path) -> tuple[SqlStore, str]:
    url = f"sqlite:///{folder / 'small.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    return store, AccountStore(store.engine).create_tenant("t").id


def test_combinations_beyond_reach_are_never_asked(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rare word beside two common ones: the rows holding the rare word (read one by one)
    # fill the page far above anything the common words alone can score, so no combination
    # is asked; the common words alone are taken by combination, in one statement.
    store, big, _, texts = corpus
    monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
    asked = _combinations_asked(monkeypatch)
    hits = store.search(big, "w1 w3 w250", session_id="a", limit=3).hits
    assert [(h.id, h.score) for h in hits] == _expected(texts, "w1 w3 w250", ["a"])[:3]
    assert asked == []
    monkeypatch.setattr(search_levelled, "READ_ROWS", -1)
    store.search(big, "w1 w3", session_id="a", limit=3)
    assert len(asked) == 1


@pytest.mark.parametrize("share", [0.0, 0.9])
def test_a_scope_within_the_index_share_is_scored_row_by_row(
    corpus: tuple[SqlStore, str, str, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    share: float,
) -> None:
    # Session a holds 1,500 of the index's 2,375 messages: beyond any SMALL_SCOPE here, but
    # within 90 % of the index, so its rows are read and scored one by one, no combination
    # asked; with no share, everything is taken by combination. The hits are the same.
    store, big, _, texts = corpus
    _patch(monkeypatch, {"SMALL_SCOPE": -1, "READ_ROWS": -1, "small_share": share})
    asked = _combinations_asked(monkeypatch)
    hits = store.search(big, "w1 w3 w9", session_id="a", limit=PAGE).hits
    assert [(h.id, h.score) for h in hits] == _expected(texts, "w1 w3 w9", ["a"])[:PAGE]
    assert (asked == []) is (share > 0)


def test_levels_the_scope_lacks_are_never_combined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session about something else: the query's words, common elsewhere in the index, are
    # probed in the session first, and no combination of them is asked there.
    store, tenant = _small_store(tmp_path)
    for session, words in (("elsewhere", "w1 w2 w3"), ("topic", "lease march rent")):
        store.create_session(tenant, session)
        batch = [message(f"{session}-{n}", session, words) for n in range(40)]
        store.append_entries(tenant, session, batch)
    monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
    monkeypatch.setattr(search_levelled, "READ_ROWS", -1)
    asked = _combinations_asked(monkeypatch)
    assert store.search(tenant, "w1 w2 w3", session_id="topic").hits == ()
    assert asked == []
    assert len(store.search(tenant, "w1 w2 w3", session_id="elsewhere", limit=5).hits) == 5
    assert len(asked) == 1
    store.close()


def test_a_combination_tied_with_rows_read_one_by_one_still_takes_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "aa" and "bb" are in two messages each, alone: four rows of one score. "aa"'s rows are
    # read one by one and fill the keys a page of one asks (two: one more tells a next page
    # exists); "bb"'s come by combination, at the same score, and the first of them is the
    # first row: the combination must still be asked.
    store, tenant = _small_store(tmp_path)
    store.create_session(tenant, "s")
    texts = ["bb", "aa", "aa", "bb"]
    batch = [message(f"s-{n}", "s", text) for n, text in enumerate(texts)]
    store.append_entries(tenant, "s", batch)
    monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
    monkeypatch.setattr(search_levelled, "READ_ROWS", 2)
    pages = [store.search(tenant, "aa bb", session_id="s", limit=1)]
    while (cursor := pages[-1].next_cursor) is not None:
        pages.append(store.search(tenant, "aa bb", session_id="s", limit=1, cursor=cursor))
    assert [hit.id for page in pages for hit in page.hits] == ["s-0", "s-1", "s-2", "s-3"]
    assert len({hit.score for page in pages for hit in page.hits}) == 1
    store.close()


def test_a_query_searches_its_rarest_stems_up_to_the_cap(tmp_path: Path) -> None:
    # Five words, the first in one message, the second in two, ... the fifth in five: a
    # query of all five searches the four rarest; with the fifth alone it is found again.
    store, tenant = _small_store(tmp_path)
    store.create_session(tenant, "s")
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    texts = [word for n, word in enumerate(words) for _ in range(n + 1)]
    store.append_entries(
        tenant, "s", [message(f"s-{n}", "s", text) for n, text in enumerate(texts)]
    )
    assert MAX_SCORED_STEMS == 4

    def found(q: str) -> set[str]:
        return {texts[int(h.id.split("-")[1])] for h in store.search(tenant, q, limit=50).hits}

    assert found(" ".join(words[:4])) == set(words[:4])
    assert found(" ".join(words)) == set(words[:4])
    assert found("echo") == {"echo"}
    store.close()
