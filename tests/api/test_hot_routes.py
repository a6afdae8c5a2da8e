"""The hot layer (:mod:`om_api.server.hot_routes`) answers the three calls of a turn exactly as
the framework's routes do, and hands everything it would judge differently to them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from om_api.server import hot_routes
from om_api.server.hot_routes import hot_call
from om_api.server.key_cache import KeyCache
from om_workers.errors import StoreUnavailableError
from tests.api.server import LiveApi


def _scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}


@pytest.mark.parametrize(
    ("method", "path", "found"),
    [
        ("GET", "/v1/sessions/s1/context", ("context", "s1")),
        ("POST", "/v1/sessions/s1/entries", ("entries", "s1")),
        ("POST", "/v1/sessions/task:a.b-c_d/flush", ("flush", "task:a.b-c_d")),
        ("POST", "/v1/sessions/s1/context", None),  # another method
        ("GET", "/v1/sessions/s1/entries", None),  # the branch listing
        ("GET", "/v1/sessions/s1/context/", None),  # the framework's redirect
        ("GET", "/v1/sessions/../context", None),  # not a session id
        ("GET", "/v1/sessions/a b/context", None),
        ("GET", "/v2/sessions/s1/context", None),
        ("GET", "/v1/sessions/s1", None),
        ("POST", "/v1/sessions/s1/scopes", None),
    ],
)
def test_the_layer_takes_only_the_three_calls(
    method: str, path: str, found: tuple[str, str] | None
) -> None:
    assert hot_call(_scope(method, path)) == found


def test_a_mounted_app_is_left_to_the_framework() -> None:
    scope = _scope("GET", "/v1/sessions/s1/context") | {"root_path": "/om"}
    assert hot_call(scope) is None


def _turn(client: httpx.Client, session: str, prefix: str) -> list[httpx.Response]:
    """One agent turn with fixed entry ids: context, append, flush, then the context again."""
    entries = [
        {"id": f"{prefix}-u", "kind": "message", "message": {"role": "user", "content": "hi"}},
        {"id": f"{prefix}-a", "kind": "message", "message": {"role": "assistant", "content": "ok"}},
    ]
    return [
        client.get(f"/v1/sessions/{session}/context"),
        client.post(f"/v1/sessions/{session}/entries", json={"entries": entries}),
        client.post(f"/v1/sessions/{session}/flush", json={}),
        client.get(f"/v1/sessions/{session}/context", params={"max_tokens": 4000}),
        client.post(f"/v1/sessions/{session}/entries", json={"entries": entries}),
    ]


def _comparable(response: httpx.Response) -> tuple[int, str | None, Any]:
    body = response.json()
    if isinstance(body, dict):
        body.pop("job_id", None)  # a job of each tenant's own
    return response.status_code, response.headers.get("content-type"), body


def test_answers_are_the_frameworks_own(api: LiveApi, monkeypatch: pytest.MonkeyPatch) -> None:
    _, hot = api.tenant()
    _, framework = api.tenant()
    for client in (hot, framework):
        assert client.post("/v1/sessions", json={"id": "same"}).status_code == 201
    served = []
    admit = hot_routes.admit_key

    async def counted(*args: Any) -> str:
        served.append(args)
        return await admit(*args)

    monkeypatch.setattr(hot_routes, "admit_key", counted)
    hot_answers = _turn(hot, "same", "e")
    assert len(served) == len(hot_answers)  # the key was cached by the session's creation
    monkeypatch.setattr(hot_routes, "hot_call", lambda scope: None)
    framework_answers = _turn(framework, "same", "f")
    for mine, theirs in zip(hot_answers, framework_answers, strict=True):
        mine_body = json.dumps(_comparable(mine)).replace('"e-', '"x-')
        their_body = json.dumps(_comparable(theirs)).replace('"f-', '"x-')
        assert mine_body == their_body
        assert int(mine.headers["content-length"]) == len(mine.content)


def test_errors_raised_on_the_hot_path_answer_as_the_routes_do(api: LiveApi) -> None:
    _, client = api.tenant()
    client.get("/v1/sessions").raise_for_status()  # the key is now cached: the layer serves
    missing = client.get("/v1/sessions/nobody/context")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    assert missing.json()["request_id"] == missing.headers["x-request-id"]
    assert client.post("/v1/sessions/nobody/flush").status_code == 404
    unknown_parent = client.post(
        "/v1/sessions/nobody/entries",
        json={"entries": [{"kind": "message", "message": {"role": "user", "content": "x"}}]},
    )
    assert unknown_parent.status_code == 404


def _error(response: httpx.Response) -> tuple[int, str, str, Any]:
    body = response.json()
    return response.status_code, body["error"], body["detail"], body.get("errors")


BAD_APPENDS: list[dict[str, Any]] = [
    {"content": b"{not json", "headers": {"content-type": "application/json"}},
    {"content": b"[" * 50_000 + b"]" * 50_000, "headers": {"content-type": "application/json"}},
    {"content": b'{"entries": []}', "headers": {"content-type": "text/plain"}},
    {"json": {"entries": [{"kind": "message"}]}},
    {"json": {"entries": "x"}},
    {"json": {"entries": [{"kind": "message", "message": {"role": "user", "content": "\u0000"}}]}},
    {},
]
BAD_QUERIES: list[dict[str, str]] = [
    {"max_tokens": "10"},  # below the minimum
    {"max_tokens": "1e3"},
    {"include": "everything"},
    {"scope": "a/b"},
]


def test_bad_requests_get_the_routes_own_422(api: LiveApi, monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201

    def answers() -> list[tuple[int, str, str, Any]]:
        appends = [client.post("/v1/sessions/s/entries", **args) for args in BAD_APPENDS]
        reads = [client.get("/v1/sessions/s/context", params=query) for query in BAD_QUERIES]
        return [_error(answer) for answer in appends + reads]

    hot = answers()
    monkeypatch.setattr(hot_routes, "hot_call", lambda scope: None)
    assert hot == answers()
    assert {status for status, *_ in hot} == {400, 422}
    assert client.get("/v1/sessions/s").json()["entry_count"] == 0


def test_unknown_and_missing_keys_are_401_from_either_path(api: LiveApi) -> None:
    for headers in ({}, {"authorization": "Bearer om_nope"}, {"authorization": "Basic eDp5"}):
        answer = api.anonymous().get("/v1/sessions/s/context", headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"


def test_a_flush_body_may_be_empty_null_or_options(api: LiveApi) -> None:
    _, client = api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    client.get("/v1/sessions").raise_for_status()
    null = {"content": b"null", "headers": {"content-type": "application/json"}}
    for args in ({}, null, {"json": {"force": True}}):
        answer = client.post("/v1/sessions/s/flush", **args)
        assert answer.status_code == 202, answer.text
    bad = client.post("/v1/sessions/s/flush", json={"force": "often"})
    assert bad.status_code == 422


def test_a_store_failing_while_a_key_is_read_is_a_503_from_either_path(
    api: LiveApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = api.tenant()

    def unreachable(self: KeyCache, plaintext: str) -> tuple[str, str]:
        raise StoreUnavailableError("the database is restarting")

    monkeypatch.setattr(KeyCache, "cached", lambda self, plaintext: None)
    monkeypatch.setattr(KeyCache, "resolve", unreachable)
    hot = client.get("/v1/sessions/s/context")
    monkeypatch.setattr(hot_routes, "hot_call", lambda scope: None)
    framework = client.get("/v1/sessions/s/context")
    assert _error(hot) == _error(framework)
    assert hot.status_code == 503 and hot.headers["retry-after"] == framework.headers["retry-after"]
