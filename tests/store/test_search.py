"""Full-text search in the store, on SQLite and PostgreSQL: what is found, what never is, and
the queries refused."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy import text as sql
from store_factories import message

from om_core.errors import AmbiguousInputError, InvalidInputError, InvalidSearchQueryError
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    Observation,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
    SessionEntry,
)
from om_core.read.recall_tool import RecallMemoryTool
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, SearchHit
from om_workers.errors import SessionNotFoundError
from om_workers.store import AccountStore, SqlStore, tombstone_scope
from om_workers.store.repositories import search_levelled
from om_workers.store.schema import entries, memory_items, sessions
from om_workers.store.search_index import ReindexProgress, purge_deleted_terms, reindex


@pytest.fixture(autouse=True, params=["as-planned", "exhaustive"])
def search_plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule is checked twice: as each search is planned (on rows this few, every row
    scored from its terms), and with every message taken by combination of levels, as a
    large scope's common words are."""
    if request.param == "exhaustive":
        monkeypatch.setattr(search_levelled, "SMALL_SCOPE", -1)
        monkeypatch.setattr(search_levelled, "READ_ROWS", -1)


def _chat(store: SqlStore, tenant: str, session: str, *texts: str) -> list[str]:
    """Append a straight line of user messages; their ids."""
    ids: list[str] = []
    for n, text in enumerate(texts):
        entry_id = f"{session}-m{n}"
        parent = ids[-1] if ids else None
        store.append_entries(tenant, session, message(entry_id, session, text, parent_id=parent))
        ids.append(entry_id)
    return ids


def _observe(
    store: SqlStore, tenant: str, session: str, after: str, facts: dict[str, str]
) -> tuple[str, list[str]]:
    """Record one observation per ``text -> source id``; the record's id and the ids."""
    recorded = ObservationsRecorded(
        observations=tuple(
            Observation(id=create_memory_id(), text=text, source_entry_ids=(source,))
            for text, source in facts.items()
        ),
        covers_up_to_id=after,
    )
    entry = SessionEntry(
        id=f"{session}-obs-{after}",
        session_id=session,
        parent_id=after,
        kind="custom",
        data=recorded.to_json_dict(),
    )
    store.append_entries(tenant, session, entry)
    return entry.id, [o.id for o in recorded.observations]


def _reflect(
    store: SqlStore, tenant: str, session: str, after: str, text: str, observation_ids: list[str]
) -> str:
    reflection = Reflection(
        id=create_memory_id(), text=text, observation_ids=tuple(observation_ids)
    )
    recorded = ReflectionsRecorded(reflections=(reflection,), covers_up_to_id=after)
    entry = SessionEntry(
        id=f"{session}-ref-{after}",
        session_id=session,
        parent_id=after,
        kind="custom",
        data=recorded.to_json_dict(),
    )
    store.append_entries(tenant, session, entry)
    return reflection.id


def _ids(hits: tuple[SearchHit, ...]) -> list[str]:
    return [h.id for h in hits]


def test_messages_match_any_term_best_first_with_marked_snippets(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    ids = _chat(
        store,
        tenant,
        session_id,
        "We talked about the weather.",
        "The lease on the flat ends in March.",
        "Leasing a car is another matter.",
    )
    page = store.search(tenant, "lease March", session_id=session_id)
    assert _ids(page.hits)[0] == ids[1]
    assert set(_ids(page.hits)) == {ids[1], ids[2]}
    best = page.hits[0]
    assert best.kind == "message" and best.session_id == session_id
    assert best.snippet == "The «lease» on the flat ends in «March»."
    assert best.score > page.hits[1].score > 0
    assert best.created_at is not None and best.source_ids is None
    assert page.next_cursor is None


def test_text_parts_and_tool_output_are_indexed(store: SqlStore, tenant: str) -> None:
    store.create_session(tenant, "t")
    parts = SessionEntry.model_validate(
        {
            "id": "p",
            "sessionId": "t",
            "kind": "message",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "first part"},
                    {"type": "text", "text": "zebra"},
                ],
            },
        }
    )
    tool = SessionEntry.model_validate(
        {
            "id": "q",
            "sessionId": "t",
            "parentId": "p",
            "kind": "message",
            "message": {"role": "tool", "content": "giraffe output", "toolCallId": "c1"},
        }
    )
    store.append_entries(tenant, "t", [parts, tool])
    assert _ids(store.search(tenant, "zebra", session_id="t").hits) == ["p"]
    assert _ids(store.search(tenant, "giraffe", session_id="t").hits) == ["q"]


def test_memory_hits_name_their_sources(store: SqlStore, tenant: str, session_id: str) -> None:
    ids = _chat(store, tenant, session_id, "my landlord is Mrs Okafor", "rent is due monthly")
    record, observation_ids = _observe(
        store, tenant, session_id, ids[1], {"User's landlord is Okafor": ids[0]}
    )
    reflection_id = _reflect(
        store, tenant, session_id, record, "Okafor matters to the user", observation_ids
    )
    hits = store.search(tenant, "okafor", session_id=session_id).hits
    by_id = {h.id: h for h in hits}
    assert set(by_id) == {ids[0], observation_ids[0], reflection_id}
    assert by_id[observation_ids[0]].kind == "observation"
    assert by_id[observation_ids[0]].source_ids == (ids[0],)
    assert by_id[reflection_id].kind == "reflection"
    assert by_id[reflection_id].source_ids == tuple(observation_ids)


def test_pages_follow_a_stable_order_without_overlap(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    texts = [f"apple number {n} " + "filler " * (n % 5) for n in range(23)]
    ids = _chat(store, tenant, session_id, *texts)
    whole = store.search(tenant, "apple", session_id=session_id, limit=MAX_SEARCH_LIMIT)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = store.search(tenant, "apple", session_id=session_id, limit=4, cursor=cursor)
        assert len(page.hits) <= 4
        seen.extend(_ids(page.hits))
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == _ids(whole.hits)
    assert sorted(seen) == sorted(ids)


def test_another_tenants_data_is_never_found(
    store: SqlStore, accounts: AccountStore, tenant: str, session_id: str
) -> None:
    _chat(store, tenant, session_id, "secret plans about the harbour")
    other = accounts.create_tenant("other").id
    store.create_session(other, session_id)
    assert store.search(other, "harbour").hits == ()
    assert store.search(other, "harbour", session_id=session_id).hits == ()
    with pytest.raises(SessionNotFoundError):
        store.search(other, "harbour", session_id="nobody")
    assert len(store.search(tenant, "harbour").hits) == 1


def test_words_in_most_messages_weigh_little(store: SqlStore, tenant: str, session_id: str) -> None:
    ids = _chat(store, tenant, session_id, *[f"common words {n}" for n in range(5)], "rare one")
    hits = store.search(tenant, "common rare", session_id=session_id).hits
    # Every word matches; "common", in 5 of 6 messages, weighs less than "rare" (SQLite's IDF;
    # PostgreSQL's ts_rank has none, so there only matching counts).
    assert set(_ids(hits)) == set(ids)
    if store.engine.dialect.name == "sqlite":
        assert _ids(hits)[0] == ids[-1]
        assert hits[0].score > 2 * hits[1].score
    # A query of common words alone, or with words no message has, still finds them.
    assert len(store.search(tenant, "common words", session_id=session_id).hits) == 5
    assert len(store.search(tenant, "common nowhere", session_id=session_id).hits) == 5


def test_tenant_wide_search_covers_every_session(store: SqlStore, tenant: str) -> None:
    for name in ("a", "b"):
        store.create_session(tenant, name)
        _chat(store, tenant, name, f"penguin in session {name}")
    hits = store.search(tenant, "penguin").hits
    assert sorted(h.session_id for h in hits) == ["a", "b"]
    assert [h.session_id for h in store.search(tenant, "penguin", session_id="a").hits] == ["a"]


def test_a_batch_of_several_insert_statements_is_stored_and_indexed_whole(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    # More rows than one multi-row insert statement takes: each statement's rows are indexed.
    count = 2_345
    batch: list[SessionEntry] = []
    for n in range(count):
        text = "walrus" if n in (0, 999, 1_000, count - 1) else f"filler {n}"
        parent = batch[-1].id if batch else None
        batch.append(message(f"b{n}", session_id, text, parent_id=parent))
    store.append_entries(tenant, session_id, batch)
    with store.engine.connect() as connection:
        seqs = connection.execute(select(entries.c.seq).order_by(entries.c.seq)).scalars().all()
    assert seqs == list(range(1, count + 1))
    hits = store.search(tenant, "walrus", session_id=session_id).hits
    assert sorted(h.id for h in hits) == ["b0", "b1000", "b2344", "b999"]
    assert [h.id for h in store.search(tenant, "filler 1500", session_id=session_id).hits][:1] == [
        "b1500"
    ]


@pytest.mark.parametrize("scope", ["session", "tenant"])
def test_pages_scored_from_the_rare_words_first_equal_the_full_ranking(
    store: SqlStore, tenant: str, session_id: str, scope: str
) -> None:
    # 5 of 300 messages hold the rare word: a small page is scored from those rows alone;
    # a page of 100 is not (it cannot be filled by them) and scores every match.
    batch: list[SessionEntry] = []
    for n in range(300):
        text = "osprey common" if n % 60 == 7 else "common" if n % 4 == 0 else f"filler {n}"
        text += " common" * (n % 3) if text.startswith("common") else ""
        parent = batch[-1].id if batch else None
        batch.append(message(f"r{n}", session_id, text, parent_id=parent))
    store.append_entries(tenant, session_id, batch)
    within = session_id if scope == "session" else None
    whole = store.search(tenant, "common osprey", session_id=within, limit=100).hits
    paged: list[SearchHit] = []
    cursor: str | None = None
    while True:
        page = store.search(tenant, "common osprey", session_id=within, limit=3, cursor=cursor)
        paged += page.hits
        if (cursor := page.next_cursor) is None:
            break
    assert [(h.id, h.score) for h in paged] == [(h.id, h.score) for h in whole]
    assert {h.id for h in whole[:5]} == {f"r{n}" for n in range(7, 300, 60)}
    assert len(whole) == 80


def test_tombstoned_entries_and_the_memory_they_support_are_never_found(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    ids = _chat(store, tenant, session_id, "the walrus said hello", "the walrus left")
    record, observation_ids = _observe(
        store, tenant, session_id, ids[1], {"walrus greeted": ids[0], "walrus went": ids[1]}
    )
    reflection_id = _reflect(
        store, tenant, session_id, record, "walrus comes and goes", observation_ids[:1]
    )
    store.add_tombstones(tenant, tombstone_scope(session_id), [ids[0]])
    found = set(_ids(store.search(tenant, "walrus", session_id=session_id).hits))
    assert found == {ids[1], observation_ids[1]}
    assert reflection_id not in found
    assert set(_ids(store.search(tenant, "walrus").hits)) == found


def test_secrets_are_redacted_and_never_matched(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    ids = _chat(store, tenant, session_id, "my key is sk-live-12345 keep it", "sk-live-12345 alone")
    secrets = ["sk-live-12345"]
    hits = store.search(tenant, "key 12345", session_id=session_id, secrets=secrets).hits
    assert _ids(hits) == [ids[0]]
    assert "12345" not in hits[0].snippet and "[REDACTED]" in hits[0].snippet
    assert store.search(tenant, "12345", session_id=session_id, secrets=secrets).hits == ()


def test_erased_rows_leave_the_index_with_them(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    ids = _chat(store, tenant, session_id, "the otter swims", "nothing here")
    _observe(store, tenant, session_id, ids[1], {"an otter swims": ids[0]})
    assert len(store.search(tenant, "otter").hits) == 2
    with store.engine.begin() as connection:
        pk = connection.execute(select(sessions.c.pk).where(sessions.c.id == session_id))
        session_pk = pk.scalar_one()
        connection.execute(delete(memory_items).where(memory_items.c.session_pk == session_pk))
        connection.execute(delete(entries).where(entries.c.session_pk == session_pk))
    assert store.search(tenant, "otter").hits == ()
    store.create_session(tenant, "again")
    _chat(store, tenant, "again", "an otter again")
    assert _ids(store.search(tenant, "otter").hits) == ["again-m0"]


def test_an_edited_payload_is_reindexed(store: SqlStore, tenant: str, session_id: str) -> None:
    ids = _chat(store, tenant, session_id, "the heron waits")
    edited = message(ids[0], session_id, "the egret waits").to_json_dict()
    with store.engine.begin() as connection:
        connection.execute(update(entries).where(entries.c.id == ids[0]).values(payload=edited))
    assert store.search(tenant, "heron").hits == ()
    assert _ids(store.search(tenant, "egret").hits) == ids


def test_reindex_rebuilds_the_same_answers(store: SqlStore, tenant: str, session_id: str) -> None:
    ids = _chat(store, tenant, session_id, "the badger digs", "the badger sleeps")
    _observe(store, tenant, session_id, ids[1], {"badger digs and sleeps": ids[0]})
    before = store.search(tenant, "badger digs")
    steps: list[ReindexProgress] = []
    reindex(store.engine, steps.append)
    assert steps and steps[-1].done == steps[-1].total
    after = store.search(tenant, "badger digs")
    assert [(h.id, h.score) for h in after.hits] == [(h.id, h.score) for h in before.hits]


@pytest.mark.parametrize(
    "q",
    [
        '"unbalanced',
        "NEAR(badger fox)",
        "bad* OR fox",
        "body:badger",
        "(badger",
        "badger AND NOT fox)",
        "^badger - + {x}",
        "'; DROP TABLE entries; --",
    ],
)
def test_engine_operators_are_text(store: SqlStore, tenant: str, session_id: str, q: str) -> None:
    ids = _chat(store, tenant, session_id, "a badger met a fox", "just a drop of rain")
    hits = store.search(tenant, q, session_id=session_id).hits
    assert set(_ids(hits)) <= set(ids)
    assert len(store.search(tenant, "badger", session_id=session_id).hits) == 1


@pytest.mark.parametrize(
    ("q", "limit", "cursor", "reason"),
    [
        ("", 10, None, "empty"),
        ("   ", 10, None, "empty"),
        (None, 10, None, "empty"),
        ("?! ... ()", 10, None, "no word"),
        ("x" * (MAX_QUERY_CHARS + 1), 10, None, "characters long"),
        ("badger", 0, None, "limit"),
        ("badger", MAX_SEARCH_LIMIT + 1, None, "limit"),
        ("badger", 10, "not-a-cursor", "cursor"),
        ("badger", 10, "WyJuYW4iLCAwLCAxXQ", "cursor"),
    ],
)
def test_bad_queries_are_refused_with_a_reason(
    store: SqlStore,
    tenant: str,
    session_id: str,
    q: str | None,
    limit: int,
    cursor: str | None,
    reason: str,
) -> None:
    with pytest.raises(InvalidSearchQueryError, match=reason):
        store.search(tenant, q, session_id=session_id, limit=limit, cursor=cursor)


def test_the_recall_tools_query_mode_searches_then_recalls_by_id(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    ids = _chat(store, tenant, session_id, "the pelican is named Gus", "weather is fine")
    _, observation_ids = _observe(
        store, tenant, session_id, ids[1], {"User's pelican is Gus": ids[0]}
    )
    tool = RecallMemoryTool(
        get_entries=lambda sid: store.read_branch(tenant, sid),
        search=lambda sid, q, limit: store.search(tenant, q, session_id=sid, limit=limit),
    )
    assert "query" in tool.definition["parameters"]["properties"]
    found = tool(session_id, {"query": "pelican", "limit": 5})
    by_id = {hit["id"]: hit for hit in found["hits"]}
    assert set(by_id) == {ids[0], observation_ids[0]}
    assert by_id[observation_ids[0]]["sourceIds"] == [ids[0]]
    recalled = tool(session_id, {"id": observation_ids[0]})
    assert recalled["found"] is True and recalled["sourceEntryIds"] == [ids[0]]
    with pytest.raises(InvalidSearchQueryError):
        tool(session_id, {"query": "  "})
    with pytest.raises(AmbiguousInputError):
        tool(session_id, {"query": "pelican", "direction": "forward"})
    with pytest.raises(AmbiguousInputError):
        tool(session_id, {"query": "pelican", "id": observation_ids[0]})
    with pytest.raises(InvalidInputError):
        RecallMemoryTool(get_entries=lambda sid: ())(session_id, {"query": "pelican"})


def _index_bytes(store: SqlStore) -> bytes:
    """Every block of the FTS5 indexes, as stored."""
    with store.engine.connect() as connection:
        blocks = [
            bytes(row[0])
            for table in ("entries_fts_data", "memory_fts_data")
            for row in connection.execute(sql(f"SELECT block FROM {table}"))
            if row[0] is not None
        ]
    return b"".join(blocks)


def test_an_erased_word_leaves_the_index_bytes_after_the_purge(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    if store.engine.dialect.name != "sqlite":
        pytest.skip("FTS5 segments are SQLite's; PostgreSQL's GIN entries go with VACUUM")
    # One token, no stem to strip, and the only word of its kind: stored whole in a segment.
    word = "qqxzanaryword91"
    _chat(store, tenant, session_id, f"{word} said once", "the words after")
    assert word.encode() in _index_bytes(store)
    with store.engine.begin() as connection:
        pk = connection.execute(select(sessions.c.pk).where(sessions.c.id == session_id))
        connection.execute(delete(entries).where(entries.c.session_pk == pk.scalar_one()))
    # The delete hides it from every search, but its bytes stay in the old segment ...
    assert store.search(tenant, word).hits == ()
    assert word.encode() in _index_bytes(store)
    # ... until the purge an erasure runs merges the segments.
    purge_deleted_terms(store.engine)
    assert word.encode() not in _index_bytes(store)


def test_a_session_being_erased_is_not_found_before_its_job_runs(
    store: SqlStore, tenant: str, session_id: str
) -> None:
    _chat(store, tenant, session_id, "the otter swims")
    _observe(store, tenant, session_id, f"{session_id}-m0", {"an otter swims": f"{session_id}-m0"})
    store.create_session(tenant, "kept")
    _chat(store, tenant, "kept", "another otter")
    assert len(store.search(tenant, "otter").hits) == 3
    store.erasure.erase_session(tenant, session_id, None)  # hidden at once, rows still there
    assert _ids(store.search(tenant, "otter").hits) == ["kept-m0"]
    with pytest.raises(SessionNotFoundError):
        store.search(tenant, "otter", session_id=session_id)
