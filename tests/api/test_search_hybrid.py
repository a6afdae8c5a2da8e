"""Hybrid search over HTTP, on each backend, with embeddings from a real local
OpenAI-compatible server: ``mode`` chooses, a
server without embeddings answers 422 for ``mode=hybrid``, a down endpoint 503, and every
rule a read obeys still holds. Lexical stays the default with embeddings on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis

from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.embeddings.openai import OpenAIEmbedder
from om_workers.jobs.embed import run_embed_job
from om_workers.store import SqlStore, upgrade
from tests.api.conftest import make_settings
from tests.api.seed import message
from tests.api.server import LiveApi, Published, serve
from tests.conftest import BACKENDS, fresh_database
from tests.e2e import embeddings_server
from tests.e2e.embeddings_server import EmbeddingsServer

KEY = "sk-embeddings-api-0123456789abcdef"


@pytest.fixture(scope="module")
def embedding_server() -> Iterator[EmbeddingsServer]:
    with embeddings_server.running() as server:
        yield server


@pytest.fixture(scope="module", params=BACKENDS)
def hybrid_api(
    request: pytest.FixtureRequest,
    api_redis_server: EmbeddedRedis,
    tmp_path_factory: pytest.TempPathFactory,
    embedding_server: EmbeddingsServer,
) -> Iterator[LiveApi]:
    """A live API whose embeddings are on (the local test server's ``bow`` model)."""
    with fresh_database(request.param, tmp_path_factory.mktemp("hybrid")) as database_url:
        upgrade(database_url)
        store = SqlStore.from_url(database_url)
        client: redis.Redis = connect(api_redis_server.url)
        settings = make_settings(database_url, api_redis_server.url).model_copy(
            update={
                "embeddings": {
                    "provider": "openai",
                    "url": embedding_server.url,
                    "api_key": KEY,
                    "model": "bow",
                }
            }
        )
        try:
            with serve(settings, store, client, Published(), backend=request.param) as live:
                yield live
        finally:
            client.close()
            store.close()


def _session(live: LiveApi, server: EmbeddingsServer, texts: list[str]) -> tuple[str, httpx.Client]:
    """A new tenant with session ``s`` holding ``texts``, embedded as the worker would."""
    tenant, client = live.tenant()
    prefix = f"h{uuid.uuid4().hex[:8]}-"
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    entries = [message(f"{prefix}{n}", "user", t) for n, t in enumerate(texts)]
    answer = client.post("/v1/sessions/s/entries", json={"entries": entries})
    assert answer.status_code == 201, answer.text
    embedder = OpenAIEmbedder(base_url=server.url, model="bow", api_key=KEY)
    assert run_embed_job(live.store, embedder, tenant, "s", batch_size=8).outcome == "succeeded"
    embedder.close()
    return prefix, client


def _ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [hit["id"] for hit in answer.json()["hits"]]


def test_hybrid_finds_what_lexical_does_not_and_lexical_stays_the_default(
    hybrid_api: LiveApi, embedding_server: EmbeddingsServer
) -> None:
    prefix, client = _session(
        hybrid_api, embedding_server, ["rent contract terminates April", "pasta lunch today"]
    )
    params = {"q": "Contract, rent?"}
    lexical = _ids(client.get("/v1/sessions/s/search", params={**params, "mode": "lexical"}))
    hybrid = _ids(client.get("/v1/sessions/s/search", params={**params, "mode": "hybrid"}))
    assert lexical == [f"{prefix}0"] == _ids(client.get("/v1/sessions/s/search", params=params))
    assert hybrid[0] == f"{prefix}0" and set(hybrid) == {f"{prefix}0", f"{prefix}1"}
    assert _ids(client.get("/v1/search", params={**params, "mode": "hybrid"}))[0] == f"{prefix}0"


def test_a_hybrid_search_narrowed_by_metadata_fuses_those_sessions_only(
    hybrid_api: LiveApi, embedding_server: EmbeddingsServer
) -> None:
    tenant, client = hybrid_api.tenant()
    prefix = f"h{uuid.uuid4().hex[:8]}-"
    embedder = OpenAIEmbedder(base_url=embedding_server.url, model="bow", api_key=KEY)
    for session, customer, texts in (
        ("a", "acme", ["rent contract terminates April"]),
        ("g", "globex", ["pasta lunch today", "the rent is due"]),
    ):
        answer = client.post(
            "/v1/sessions", json={"id": session, "metadata": {"customer": customer}}
        )
        assert answer.status_code == 201, answer.text
        entries = [message(f"{prefix}{session}{n}", "user", t) for n, t in enumerate(texts)]
        answer = client.post(f"/v1/sessions/{session}/entries", json={"entries": entries})
        assert answer.status_code == 201, answer.text
        outcome = run_embed_job(hybrid_api.store, embedder, tenant, session, batch_size=8)
        assert outcome.outcome == "succeeded"
    embedder.close()
    hybrid = {"q": "Contract, rent?", "mode": "hybrid"}
    assert set(_ids(client.get("/v1/search", params=hybrid))) == {
        f"{prefix}a0",
        f"{prefix}g0",
        f"{prefix}g1",
    }
    acme = _ids(client.get("/v1/search", params={**hybrid, "metadata": "customer:acme"}))
    assert acme == [f"{prefix}a0"]
    # The vector side is narrowed too: the lunch shares no word with the query.
    globex = _ids(client.get("/v1/search", params={**hybrid, "metadata": "customer:globex"}))
    assert globex[0] == f"{prefix}g1" and set(globex) == {f"{prefix}g0", f"{prefix}g1"}


def test_tombstoned_entries_and_other_tenants_stay_hidden_in_hybrid(
    hybrid_api: LiveApi, embedding_server: EmbeddingsServer
) -> None:
    prefix, client = _session(
        hybrid_api, embedding_server, ["the walrus said hello", "the walrus left"]
    )
    _, other = hybrid_api.tenant()
    assert other.get("/v1/sessions/s/search", params={"q": "walrus"}).status_code == 404
    assert _ids(other.get("/v1/search", params={"q": "walrus", "mode": "hybrid"})) == []
    answer = client.post("/v1/sessions/s/revocations", json={"entry_ids": [f"{prefix}0"]})
    assert answer.status_code == 200, answer.text
    hybrid = {"q": "walrus", "mode": "hybrid"}
    assert _ids(client.get("/v1/sessions/s/search", params=hybrid)) == [f"{prefix}1"]


def test_the_query_reaches_the_embedder_redacted_and_bad_input_is_a_422(
    hybrid_api: LiveApi, embedding_server: EmbeddingsServer
) -> None:
    _, client = _session(hybrid_api, embedding_server, ["nothing to see"])
    key = client.headers["authorization"].removeprefix("Bearer ")
    found = client.get("/v1/sessions/s/search", params={"q": f"find {key}", "mode": "hybrid"})
    assert found.status_code == 200
    assert all(key not in text for text in embedding_server.inputs)
    for params in ({"q": ""}, {"q": "***"}, {"q": "x", "mode": "vector"}, {"q": "a" * 501}):
        answer = client.get("/v1/sessions/s/search", params={"mode": "hybrid", **params})
        assert answer.status_code == 422, (params, answer.text)


def test_a_down_embeddings_endpoint_is_a_503_and_lexical_still_answers(
    hybrid_api: LiveApi, embedding_server: EmbeddingsServer
) -> None:
    prefix, client = _session(hybrid_api, embedding_server, ["the heron waits"])
    embedding_server.failing = True
    try:
        answer = client.get("/v1/sessions/s/search", params={"q": "heron", "mode": "hybrid"})
        assert answer.status_code == 503 and KEY not in answer.text
        lexical = client.get("/v1/sessions/s/search", params={"q": "heron", "mode": "lexical"})
        assert _ids(lexical) == [f"{prefix}0"]
    finally:
        embedding_server.failing = False


def test_a_server_without_embeddings_refuses_hybrid_with_a_reason(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    answer = client.get("/v1/sessions/s/search", params={"q": "x", "mode": "hybrid"})
    assert answer.status_code == 422 and "OM_EMBEDDINGS_PROVIDER" in answer.text
    assert client.get("/v1/sessions/s/search", params={"q": "x"}).status_code == 200
