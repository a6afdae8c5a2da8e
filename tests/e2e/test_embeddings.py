"""Embeddings over HTTP: the OpenAI-compatible adapter against a real local server, and a real
``celery worker`` that embeds a session after its flush (``om.embed``), from redacted text,
its key never in its log."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis
from pydantic import SecretStr
from sqlalchemy import func, select

from om_core.ledger.models import Message, SessionEntry
from om_workers.celery.app import enqueue_flush
from om_workers.config import Settings
from om_workers.embeddings import EmbeddingError, EmbeddingsUnavailableError
from om_workers.embeddings.local import LocalEmbedder
from om_workers.embeddings.openai import OpenAIEmbedder
from om_workers.embeddings.setup import build_embedder, embedding_secrets
from om_workers.errors import ConfigError
from om_workers.jobs.embed import run_embed_job
from om_workers.store import SqlStore
from om_workers.store.schema import search_vectors
from tests.e2e import embeddings_server
from tests.e2e.support import add_chat, wait_for
from tests.e2e.workers import StartWorker

KEY = "sk-embeddings-0123456789abcdef"
SECRET = "sk-provider-secret-0123456789"


def _vectors(store: SqlStore, source: int) -> int:
    statement = select(func.count()).where(search_vectors.c.source == source)
    with store.engine.connect() as connection:
        return int(connection.execute(statement).scalar_one())


def test_the_adapter_sends_the_key_as_a_header_and_answers_unit_vectors() -> None:
    with embeddings_server.running() as server:
        embedder = OpenAIEmbedder(base_url=server.url, model="bow", api_key=KEY)
        vectors = embedder.embed_documents(["the lease ends", "pasta for lunch"])
        query = embedder.embed_query("lease")
        embedder.close()
    assert len(vectors) == 2 and embedder.dimension == embeddings_server.DIMENSION
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)
    assert sum(a * b for a, b in zip(query, vectors[0], strict=True)) > sum(
        a * b for a, b in zip(query, vectors[1], strict=True)
    )
    assert server.auth == [f"Bearer {KEY}"] * 2 and embedder.name == "bow"


def test_a_failing_or_absent_endpoint_is_a_typed_error_without_the_key() -> None:
    with embeddings_server.running() as server:
        server.failing = True
        embedder = OpenAIEmbedder(base_url=server.url, model="bow", api_key=KEY)
        with pytest.raises(EmbeddingsUnavailableError) as down:
            embedder.embed_documents(["x"])
        wrong = OpenAIEmbedder(base_url=server.url + "/nope", model="bow", api_key=KEY)
        with pytest.raises(EmbeddingError) as refused:
            wrong.embed_query("x")
        url = server.url
    gone = OpenAIEmbedder(base_url=url, model="bow", api_key=KEY)
    with pytest.raises(EmbeddingsUnavailableError) as unreachable:
        gone.embed_query("x")
    for caught in (down, refused, unreachable):
        assert KEY not in str(caught.value)


def test_settings_pick_the_embedder_and_its_key_is_a_secret() -> None:
    assert build_embedder(Settings()) is None
    local = build_embedder(Settings(embeddings={"provider": "local"}))
    assert isinstance(local, LocalEmbedder)
    with pytest.raises(ConfigError):
        build_embedder(Settings(embeddings={"provider": "local", "model": "other"}))
    settings = Settings(embeddings={"provider": "openai", "api_key": SecretStr(KEY)})
    assert isinstance(build_embedder(settings), OpenAIEmbedder)
    assert embedding_secrets(settings) == (KEY,) and embedding_secrets(Settings()) == ()
    assert KEY not in repr(settings)


def test_the_embed_job_is_skipped_when_off_and_unavailable_when_the_endpoint_is_down(
    store: SqlStore, tenant: str
) -> None:
    store.create_session(tenant, "s")
    add_chat(store, tenant, "s", 2)
    assert run_embed_job(store, None, tenant, "s", batch_size=8).outcome == "skipped"
    with embeddings_server.running() as server:
        embedder = OpenAIEmbedder(base_url=server.url, model="bow", api_key=KEY)
        assert run_embed_job(store, embedder, tenant, "gone", batch_size=8).outcome == "skipped"
        server.failing = True
        assert run_embed_job(store, embedder, tenant, "s", batch_size=8).outcome == "unavailable"
        server.failing = False
        run = run_embed_job(store, embedder, tenant, "s", batch_size=3)
    assert (run.outcome, run.vectors) == ("succeeded", 4)


def test_a_worker_embeds_the_session_after_its_flush_from_redacted_text(
    app: Any, start_worker: StartWorker, store: SqlStore, client: redis.Redis, tenant: str
) -> None:
    store.create_session(tenant, "s")
    messages = add_chat(store, tenant, "s", 3)
    leak = SessionEntry(
        id="s-leak",
        session_id="s",
        parent_id=messages[-1],
        kind="message",
        message=Message(role="user", content=f"the provider key is {SECRET}"),
    )
    store.append_entries(tenant, "s", leak)
    with embeddings_server.running() as server:
        worker = start_worker(
            OM_EMBEDDINGS_PROVIDER="openai",
            OM_EMBEDDINGS_URL=server.url,
            OM_EMBEDDINGS_API_KEY=KEY,
            OM_EMBEDDINGS_MODEL="bow",
            OM_EMBEDDINGS_BATCH_SIZE="3",
            OM_PROVIDER_API_KEY=SECRET,
        )
        job = enqueue_flush(store, client, tenant, "s", force=True, app=app).job_id
        wait_for(lambda: store.get_job(tenant, job).state == "succeeded", 60, "the flush")
        wait_for(lambda: _vectors(store, 0) == 7, 60, "the message vectors", worker.tail)
        wait_for(lambda: _vectors(store, 1) >= 1, 60, "the memory vectors", worker.tail)
    assert all(SECRET not in text for text in server.inputs)
    assert "the provider key is [REDACTED]" in server.inputs
    assert KEY not in worker.log.read_text(errors="replace")
