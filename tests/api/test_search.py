"""The search routes over HTTP, on each backend: the contract's shape, paging, every rule a
read obeys, and a reasoned 4xx for each bad query."""

from __future__ import annotations

import uuid

import httpx
import pytest

from om_api.client import InvalidRequest, OMClient
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT
from tests.api.seed import OBS2_ID, OBS_ID, REF_ID, message, seeded_session
from tests.api.server import LiveApi


def _prefix() -> str:
    return f"p{uuid.uuid4().hex[:8]}-"


def _ids(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {hit["id"] for hit in answer.json()["hits"]}


def test_session_search_answers_the_contract_shape(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    prefix = _prefix()
    seeded_session(client, "s", prefix)
    answer = client.get("/v1/sessions/s/search", params={"q": "blue-green deploys"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"hits", "next_cursor"}
    by_id = {hit["id"]: hit for hit in body["hits"]}
    assert {f"{prefix}{i}" for i in range(6)} | {OBS_ID, REF_ID} == set(by_id)
    hit = by_id[f"{prefix}0"]
    assert set(hit) == {"id", "session_id", "kind", "snippet", "score", "created_at", "source_ids"}
    assert hit["kind"] == "message" and hit["session_id"] == "s" and hit["source_ids"] is None
    assert "«blue»-«green»" in hit["snippet"] and hit["created_at"]
    assert by_id[OBS_ID]["kind"] == "observation"
    assert by_id[OBS_ID]["source_ids"] == [f"{prefix}0"]
    assert by_id[REF_ID]["source_ids"] == [OBS_ID, OBS2_ID]
    scores = [hit["score"] for hit in body["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_pages_chain_without_overlap(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    seeded_session(client, "s", _prefix(), messages=12)
    whole = client.get("/v1/sessions/s/search", params={"q": "slots", "limit": 100}).json()
    seen: list[str] = []
    params: dict[str, str | int] = {"q": "slots", "limit": 5}
    while True:
        page = client.get("/v1/sessions/s/search", params=params).json()
        seen.extend(hit["id"] for hit in page["hits"])
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == [hit["id"] for hit in whole["hits"]]
    assert len(seen) == len(set(seen)) == 12 + 2


def test_tenant_search_spans_sessions_and_never_another_tenant(backend_api: LiveApi) -> None:
    _, a = backend_api.tenant()
    _, b = backend_api.tenant()
    first, second = _prefix(), _prefix()
    seeded_session(a, "one", first, messages=2)
    seeded_session(a, "two", second, messages=2)
    hits = a.get("/v1/search", params={"q": "blue-green"}).json()["hits"]
    assert {hit["session_id"] for hit in hits} == {"one", "two"}
    assert b.get("/v1/search", params={"q": "blue-green"}).json() == {
        "hits": [],
        "next_cursor": None,
    }
    for path in ("/v1/sessions/one/search", "/v1/sessions/nowhere/search"):
        answer = b.get(path, params={"q": "blue-green"})
        assert answer.status_code == 404 and answer.json()["error"] == "not_found"


def test_tenant_search_narrowed_by_session_metadata(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    prefix = _prefix()
    for session, metadata in (
        ("alice", {"customer": "acme", "subject": "alice"}),
        ("bob", {"customer": "acme", "subject": "bob"}),
        ("carol", {"customer": "globex"}),
    ):
        answer = client.post("/v1/sessions", json={"id": session, "metadata": metadata})
        assert answer.status_code == 201, answer.text
        entries = [message(f"{prefix}{session}", "user", "the invoice is overdue")]
        answer = client.post(f"/v1/sessions/{session}/entries", json={"entries": entries})
        assert answer.status_code == 201, answer.text

    def sessions(*pairs: str) -> set[str]:
        answer = client.get("/v1/search", params={"q": "invoice", "metadata": list(pairs)})
        assert answer.status_code == 200, answer.text
        return {hit["session_id"] for hit in answer.json()["hits"]}

    assert sessions() == {"alice", "bob", "carol"}
    assert sessions("customer:acme") == {"alice", "bob"}
    assert sessions("customer:acme", "subject:bob") == {"bob"}
    assert sessions("customer:initech") == set()
    key = client.headers["Authorization"].removeprefix("Bearer ")
    with OMClient(backend_api.url, key) as om:
        found = om.search("invoice overdue", metadata={"subject": "alice"})
        assert [(h.session_id, h.id) for h in found.hits] == [("alice", f"{prefix}alice")]
        with pytest.raises(InvalidRequest, match="tenant-wide"):
            om.search("invoice", session_id="alice", metadata={"subject": "alice"})
        with pytest.raises(InvalidRequest, match="at most 8 key:value pairs"):
            om.search("invoice", metadata={f"k{n}": "v" for n in range(9)})


@pytest.mark.parametrize(
    ("pairs", "reason"),
    [
        (["customer"], "metadata pair 1 is not key:value"),
        (["a:b", "we ird:x"], "metadata pair 2: a key is"),
        (["k:a", "k:b"], "names a key given before"),
        (["k:" + "v" * 257], "at most 256 characters"),
        ([f"k{n}:v" for n in range(9)], "at most 8 key:value pairs"),
        (["k:a\x00b"], "holds NUL"),
    ],
)
def test_a_malformed_metadata_narrowing_is_422_with_a_reason(
    backend_api: LiveApi, pairs: list[str], reason: str
) -> None:
    _, client = backend_api.tenant()
    answer = client.get("/v1/search", params={"q": "invoice", "metadata": pairs})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid_input" and reason in answer.json()["detail"]


def test_revoked_entries_and_their_memory_are_never_hits(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    prefix = _prefix()
    seeded_session(client, "s", prefix)
    answer = client.post("/v1/sessions/s/revocations", json={"entry_ids": [f"{prefix}0"]})
    assert answer.status_code in (200, 201, 202), answer.text
    found = _ids(client.get("/v1/sessions/s/search", params={"q": "blue green slots"}))
    assert f"{prefix}0" not in found and f"{prefix}1" in found
    # The observation resting on the revoked message, and the reflection over it, are gone.
    assert OBS_ID not in found and REF_ID not in found
    assert OBS2_ID in found
    assert found == _ids(client.get("/v1/search", params={"q": "blue green slots"}))


def test_known_secrets_are_redacted_in_snippets(backend_api: LiveApi) -> None:
    _, client = backend_api.tenant()
    key = client.headers["Authorization"].removeprefix("Bearer ")
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    text = f"the kestrel key is {key} do not share"
    entry = message(f"{_prefix()}k", "user", text)
    assert client.post("/v1/sessions/s/entries", json={"entries": [entry]}).status_code == 201
    hits = client.get("/v1/sessions/s/search", params={"q": "kestrel"}).json()["hits"]
    assert len(hits) == 1
    assert key not in hits[0]["snippet"] and "[REDACTED]" in hits[0]["snippet"]
    # Searching for the secret itself finds nothing: no hit confirms where it was said.
    pieces = [word for word in key.replace("-", "_").split("_") if len(word) > 3]
    assert pieces
    for word in [*pieces, key]:
        assert client.get("/v1/search", params={"q": word}).json()["hits"] == []


@pytest.mark.parametrize(
    "q",
    ['"quoted', "NEAR(blue green)", "blu*", "body:blue", "(blue", "blue AND NOT green)", "\x00"],
)
def test_engine_operators_are_text_never_a_500(backend_api: LiveApi, q: str) -> None:
    _, client = backend_api.tenant()
    seeded_session(client, "s", _prefix(), messages=2)
    answer = client.get("/v1/sessions/s/search", params={"q": q})
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        assert answer.json()["error"] == "invalid_input"


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, "empty"),
        ({"q": ""}, "empty"),
        ({"q": "  "}, "empty"),
        ({"q": "?! ()"}, "no word"),
        ({"q": "x" * (MAX_QUERY_CHARS + 1)}, "characters long"),
        ({"q": "blue", "limit": 0}, "limit"),
        ({"q": "blue", "limit": MAX_SEARCH_LIMIT + 1}, "limit"),
        ({"q": "blue", "limit": "many"}, "limit"),
        ({"q": "blue", "cursor": "garbage!"}, "cursor"),
    ],
)
def test_bad_queries_are_422_with_a_reason(
    backend_api: LiveApi, params: dict[str, str | int], reason: str
) -> None:
    _, client = backend_api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    for path in ("/v1/sessions/s/search", "/v1/search"):
        answer = client.get(path, params=params)
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert body["error"] == "invalid_input" and reason in answer.text
