"""The request edge, identical on every store: text no store can keep (U+0000, lone
surrogates), non-finite numbers and over-deep JSON are a 422 naming the field before anything
is written; unknown keys are refused at every level of a request; the entries route redacts
known secrets like the other reads; a database that refuses a value anyway is a 422, not a 500.

Runs against a live API on SQLite and, when ``OM_TEST_DATABASE_URL`` is set, PostgreSQL (the
store that refuses these values itself).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import APIRouter
from sqlalchemy.exc import DataError

from om_api.schemas import (
    MAX_JSON_DEPTH,
    EntriesPage,
    EntryIn,
    EntryOut,
    PageItemOut,
    find_unstorable,
)
from om_api.schemas.base import parse_json_body
from om_api.server.errors import REFUSED_BY_DATABASE, classify, refused_by_database
from om_api.server.state import State
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.errors import StoreError, TenantNotFoundError
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.api.conftest import make_settings
from tests.api.seed import message
from tests.api.server import LiveApi, Published, serve
from tests.conftest import fresh_database, needs_postgres

BAD_TEXT = {"NUL": "\x00", "lone high surrogate": "\ud800", "lone low surrogate": "\udfff"}
"""Each is sent as a JSON escape (``"\\u0000"``, ``"\\ud800"``): the raw JSON text a client
sends, since neither can be encoded as UTF-8 bytes."""


def post_json(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    """POST ``body`` as JSON text with every non-ASCII character escaped, so a lone surrogate
    travels as ``\\ud800`` (``json.dumps`` writes what a JavaScript client would)."""
    text = json.dumps(body, ensure_ascii=True, allow_nan=True)
    return client.post(path, content=text.encode("ascii"), headers=JSON)


JSON = {"content-type": "application/json"}


@pytest.fixture
def session(backend_api: LiveApi) -> Iterator[tuple[httpx.Client, str]]:
    """A fresh tenant's client and an empty session ``s``."""
    _, client = backend_api.tenant()
    assert client.post("/v1/sessions", json={"id": "s"}).status_code == 201
    yield client, "s"
    client.close()


def assert_nothing_stored(client: httpx.Client, session_id: str = "s") -> None:
    assert client.get(f"/v1/sessions/{session_id}").json()["entry_count"] == 0
    page = client.get(f"/v1/sessions/{session_id}/entries")
    assert page.status_code == 200 and page.json()["entries"] == []


def assert_refused(answer: httpx.Response, path: str, reason: str, case: str) -> None:
    assert answer.status_code == 422, (case, answer.status_code, answer.text)
    body = answer.json()
    assert body["error"] == "invalid_input", case
    assert body["detail"].startswith(f"{path}: "), (case, body["detail"])
    assert reason in body["detail"], (case, body["detail"])
    # The refused value is never echoed (a lone surrogate could not even be encoded).
    assert "\\u0000" not in answer.text and "\\ud8" not in answer.text.lower(), case
    assert "\\udf" not in answer.text.lower(), case


# Every kind of field of an append: (case, entry holding ``bad``, the path the 422 names).
ENTRY_FIELDS: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("content", lambda bad: message("e1", "user", f"a{bad}b"), "message.content"),
    (
        "content part text",
        lambda bad: {
            "kind": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": f"x{bad}"}]},
        },
        "message.content[0].text",
    ),
    (
        "content part data",
        lambda bad: {
            "kind": "message",
            "message": {"role": "user", "content": [{"type": "image", "data": {"url": bad}}]},
        },
        "message.content[0].data.url",
    ),
    (
        "tool name",
        lambda bad: {
            "kind": "message",
            "message": {"role": "assistant", "tool_calls": [{"id": "c1", "name": f"t{bad}"}]},
        },
        "message.tool_calls[0].name",
    ),
    (
        "tool call id",
        lambda bad: {
            "kind": "message",
            "message": {"role": "assistant", "tool_calls": [{"id": bad, "name": "t"}]},
        },
        "message.tool_calls[0].id",
    ),
    (
        "tool call arguments value",
        lambda bad: {
            "kind": "message",
            "message": {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "t", "arguments": {"q": ["ok", bad]}}],
            },
        },
        "message.tool_calls[0].arguments.q[1]",
    ),
    (
        "tool call arguments key",
        lambda bad: {
            "kind": "message",
            "message": {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "t", "arguments": {"o": {f"k{bad}": 1}}}],
            },
        },
        "message.tool_calls[0].arguments.o",
    ),
    (
        "tool result ids",
        lambda bad: {
            "kind": "message",
            "message": {"role": "tool", "tool_call_id": "c1", "tool_name": bad, "content": "r"},
        },
        "message.tool_name",
    ),
    (
        "custom data value",
        lambda bad: {"kind": "custom", "data": {"type": "note", "items": [{"v": bad}]}},
        "data.items[0].v",
    ),
    ("custom data key", lambda bad: {"kind": "custom", "data": {f"k{bad}": 1}}, "data"),
    ("summary", lambda bad: {"kind": "note", "summary": f"s{bad}"}, "summary"),
    ("kind", lambda bad: {"kind": f"note{bad}"}, "kind"),
    ("entry id", lambda bad: message(f"e{bad}", "user", "x"), "id"),
    ("parent id", lambda bad: {**message("e1", "user", "x"), "parent_id": bad}, "parent_id"),
]


def _reason(name: str) -> str:
    return "U+0000 (NUL)" if name == "NUL" else "a lone surrogate (U+D"


def test_unstorable_text_in_any_entry_field_is_a_422(
    session: tuple[httpx.Client, str],
) -> None:
    client, sid = session
    for bad_name, bad in BAD_TEXT.items():
        for case, build, path in ENTRY_FIELDS:
            # The bad entry second: the batch is refused whole, the good first entry too.
            entries = [message(f"ok-{uuid.uuid4().hex[:8]}", "user", "fine"), build(bad)]
            answer = post_json(client, f"/v1/sessions/{sid}/entries", {"entries": entries})
            label = f"{case} / {bad_name}"
            assert_refused(answer, f"body.entries[1].{path}", _reason(bad_name), label)
        # A key of the body itself (refused before the unknown-key check could echo it).
        answer = post_json(client, f"/v1/sessions/{sid}/entries", {"entries": [], f"x{bad}": 1})
        assert_refused(answer, "body", "an object key holds", f"body key / {bad_name}")
    assert_nothing_stored(client, sid)


def test_unstorable_text_in_sessions_scopes_and_admin_bodies_is_a_422(
    backend_api: LiveApi, session: tuple[httpx.Client, str]
) -> None:
    client, sid = session
    with backend_api.admin() as admin:
        for bad_name, bad in BAD_TEXT.items():
            reason = _reason(bad_name)
            new_id = f"n-{uuid.uuid4().hex[:8]}"
            metadata = {"agent": {"tags": ["a", f"b{bad}"]}}
            answer = post_json(client, "/v1/sessions", {"id": new_id, "metadata": metadata})
            assert_refused(answer, "body.metadata.agent.tags[1]", reason, f"metadata {bad_name}")
            answer = post_json(client, "/v1/sessions", {"id": new_id, "metadata": {bad: 1}})
            assert_refused(answer, "body.metadata", "an object key holds", bad_name)
            assert client.get(f"/v1/sessions/{new_id}").status_code == 404
            for field in ("label", "kind"):
                body = {"id": "task:x", field: f"v{bad}"}
                answer = post_json(client, f"/v1/sessions/{sid}/scopes", body)
                assert_refused(answer, f"body.{field}", reason, f"scope {field} {bad_name}")
            tenant_id = f"t-{uuid.uuid4().hex[:8]}"
            answer = post_json(admin, "/v1/admin/tenants", {"id": tenant_id, "name": bad})
            assert_refused(answer, "body.name", reason, f"tenant name {bad_name}")
            with pytest.raises(TenantNotFoundError):
                backend_api.accounts.get_tenant(tenant_id)
            assert admin.post("/v1/admin/tenants", json={"id": tenant_id}).status_code == 201
            answer = post_json(admin, f"/v1/admin/tenants/{tenant_id}/keys", {"label": bad})
            assert_refused(answer, "body.label", reason, f"key label {bad_name}")
    assert_nothing_stored(client, sid)


def test_non_finite_numbers_and_deep_json_are_a_422(session: tuple[httpx.Client, str]) -> None:
    client, sid = session
    url = f"/v1/sessions/{sid}/entries"
    for number in (float("nan"), float("inf"), float("-inf")):
        entry = {"kind": "custom", "data": {"score": [1, number]}}
        answer = post_json(client, url, {"entries": [entry]})
        assert_refused(answer, "body.entries[0].data.score[1]", "non-finite", str(number))
    # 1e400 parses as infinity in Python: refused too, not stored as null or "Infinity".
    text = '{"entries": [{"kind": "custom", "data": {"x": 1e400}}]}'
    answer = client.post(url, content=text, headers=JSON)
    assert_refused(answer, "body.entries[0].data.x", "non-finite", "1e400")
    # Body, entries list, entry, data: 4 levels; the value adds the rest.
    deep: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH - 3):
        deep = [deep]
    answer = post_json(client, url, {"entries": [{"kind": "custom", "data": {"v": deep}}]})
    assert answer.status_code == 422, answer.text
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in answer.json()["detail"]
    assert_nothing_stored(client, sid)
    # One level less is stored and read back whole, on every store.
    ok = {"kind": "custom", "data": {"v": deep[0]}}
    assert post_json(client, url, {"entries": [ok]}).status_code == 201
    assert client.get(url).json()["entries"][0]["data"] == {"v": deep[0]}


def test_storable_text_round_trips_on_every_store(session: tuple[httpx.Client, str]) -> None:
    client, sid = session
    # A surrogate pair (sent as \ud83d\ude00), other control characters, non-characters.
    text = "pair \U0001f600 ctl \x01\x1f\x7f nonchar \ufffe\uffff end"
    entries = [
        message("r1", "user", text),
        {"id": "r2", "kind": "custom", "data": {text: [text, {"k": text}]}},
    ]
    assert post_json(client, f"/v1/sessions/{sid}/entries", {"entries": entries}).status_code == 201
    stored = client.get(f"/v1/sessions/{sid}/entries").json()["entries"]
    assert stored[0]["message"]["content"] == text
    assert stored[1]["data"] == {text: [text, {"k": text}]}
    created = post_json(client, "/v1/sessions", {"id": "meta", "metadata": {"t": text}})
    assert created.status_code == 201 and created.json()["metadata"] == {"t": text}


def test_malformed_bytes_and_parameters_are_4xx(session: tuple[httpx.Client, str]) -> None:
    client, sid = session
    url = f"/v1/sessions/{sid}/entries"
    bodies = {
        "raw NUL byte in a string": b'{"entries": [{"kind": "note", "summary": "a\x00b"}]}',
        "UTF-8 encoded surrogate": b'{"entries": [{"kind": "note", "summary": "\xed\xa0\x80"}]}',
        "invalid UTF-8": b'{"entries": [{"kind": "note", "summary": "\xff\xfe"}]}',
        "lone surrogate as the body": b'"\\ud800"',
    }
    for case, raw in bodies.items():
        answer = client.post(url, content=raw, headers=JSON)
        assert 400 <= answer.status_code < 500, (case, answer.status_code, answer.text)
        assert answer.json()["detail"], case
    for bad in ("%00", "a%00b", "%ED%A0%80", "%ED%BF%BF"):
        for path in (
            f"/v1/sessions/{bad}",
            f"/v1/sessions/{sid}/entries?after={bad}",
            f"/v1/sessions/{sid}/messages?cursor={bad}",
            f"/v1/sessions/{sid}/context?scope={bad}",
            f"/v1/sessions/{sid}/memory/{bad}",
            f"/v1/jobs/{bad}",
        ):
            answer = client.get(path)
            assert answer.status_code == 422, (path, answer.status_code, answer.text)
        answer = client.post(f"/v1/sessions/{sid}/scopes/{bad}/enter")
        assert answer.status_code == 422, (bad, answer.text)
    assert_nothing_stored(client, sid)


# Unknown keys at every level --------------------------------------------------------------


def test_a_typo_in_a_nested_model_is_a_422(session: tuple[httpx.Client, str]) -> None:
    client, sid = session
    url = f"/v1/sessions/{sid}/entries"
    cases = {
        "message.contnet": {"kind": "message", "message": {"role": "user", "contnet": "hi"}},
        "message.content.parts[0].txt": {
            "kind": "message",
            "message": {"role": "user", "content": [{"type": "text", "txt": "hi"}]},
        },
        "message.tool_calls[0].argumnets": {
            "kind": "message",
            "message": {
                "role": "assistant",
                "tool_calls": [{"id": "c", "name": "t", "argumnets": {}}],
            },
        },
        "mesage": {"kind": "message", "mesage": {"role": "user", "content": "hi"}},
    }
    for path, entry in cases.items():
        answer = client.post(url, json={"entries": [entry]})
        assert answer.status_code == 422, (path, answer.text)
        detail = answer.json()["detail"]
        assert f"body.entries[0].{path}: Extra inputs are not permitted" in detail, detail
    assert_nothing_stored(client, sid)


def _request_schemas(openapi: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every object schema (with properties) reachable from a request body."""
    components = openapi["components"]["schemas"]
    seen: set[str] = set()
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name not in seen:
                    seen.add(name)
                    walk(components[name], name)
                return
            if "properties" in node:
                found.append((where, node))
            for value in node.values():
                walk(value, where)
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            walk(operation.get("requestBody", {}), f"{method} {path}")
    return found


def test_every_request_model_forbids_unknown_keys(backend_api: LiveApi) -> None:
    openapi = httpx.get(f"{backend_api.url}/openapi.json", timeout=30).json()
    schemas = _request_schemas(openapi)
    names = {where for where, _ in schemas}
    assert {"AppendEntriesRequest", "EntryIn", "MessageWire", "ToolCallWire"} <= names
    assert "ContentPartWire" in names and "OpenScopeRequest" in names
    lenient = [where for where, node in schemas if node.get("additionalProperties") is not False]
    assert lenient == []


def test_responses_stay_lenient_and_can_be_appended_back() -> None:
    stored = {
        "id": "e1",
        "session_id": "s",
        "kind": "message",
        "future_field": 1,
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": "hi", "future": True}],
            "tool_calls": [{"id": "c", "name": "t", "arguments": {}, "future": 2}],
            "future": "x",
        },
    }
    entry = EntryOut.model_validate(stored)
    assert (
        PageItemOut.model_validate(
            {"entry_id": "e1", "role": "assistant", "summary": "", "message": stored["message"]}
        ).message
        == entry.message
    )
    assert EntriesPage.model_validate({"entries": [stored], "next_cursor": None}).entries
    again = EntryIn(kind="message", message=entry.message)
    assert again.model_dump(mode="json", exclude_none=True)["message"] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "tool_calls": [{"id": "c", "name": "t", "arguments": {}}],
        "is_error": False,
    }


def test_find_unstorable_is_iterative_and_in_document_order() -> None:
    deep: Any = "\x00"
    for _ in range(5000):  # far past the recursion limit: no RecursionError
        deep = {"k": deep}
    found = find_unstorable(deep, max_depth=10_000)
    assert found is not None and len(found[0]) == 5000 and "U+0000" in found[1]
    assert find_unstorable({"a": "\x00", "b": "\ud800"}) == (
        ("a",),
        "text holds U+0000 (NUL), which cannot be stored",
    )
    assert find_unstorable({"ok": ["\U0001f600", 1.5, None, True]}) is None


# Redaction of the entries route -----------------------------------------------------------


def test_entries_route_redacts_known_secrets(session: tuple[httpx.Client, str]) -> None:
    client, sid = session
    key = str(client.headers["authorization"]).removeprefix("Bearer ")
    entries = [
        message("x1", "user", f"my key is {key}"),
        {
            "id": "x2",
            "kind": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": key}, {"type": "blob", "data": {key: key}}],
                "tool_calls": [{"id": "c1", "name": "login", "arguments": {"key": [key]}}],
            },
        },
        {
            "id": "x3",
            "kind": "message",
            "message": {"role": "tool", "tool_call_id": "c1", "tool_name": "login", "content": key},
        },
        {"id": "x4", "kind": "custom", "data": {"type": "note", key: {"nested": f"<{key}>"}}},
        {"id": "x5", "kind": "note", "summary": f"summary {key}"},
    ]
    assert client.post(f"/v1/sessions/{sid}/entries", json={"entries": entries}).status_code == 201
    page = client.get(f"/v1/sessions/{sid}/entries")
    assert page.status_code == 200
    assert key not in page.text and page.text.count("[REDACTED]") >= 9, page.text
    got = {e["id"]: e for e in page.json()["entries"]}
    assert got["x1"]["message"]["content"] == "my key is [REDACTED]"
    assert got["x2"]["message"]["tool_calls"][0]["arguments"] == {"key": ["[REDACTED]"]}
    assert got["x4"]["data"] == {"type": "note", "[REDACTED]": {"nested": "<[REDACTED]>"}}
    assert got["x5"]["summary"] == "summary [REDACTED]"
    # The same as /messages already answered.
    full = client.get(f"/v1/sessions/{sid}/messages", params={"cursor": "x1", "detail": "full"})
    assert full.status_code == 200 and key not in full.text
    # Session metadata too.
    created = client.post("/v1/sessions", json={"id": "m", "metadata": {"note": key}})
    assert created.status_code == 201 and key not in created.text
    assert client.get("/v1/sessions/m").json()["metadata"] == {"note": "[REDACTED]"}
    # A secret sent as an unknown key is not echoed by the 422 naming it.
    typo = {"kind": "message", "message": {"role": "user", key: "x"}}
    refused = client.post(f"/v1/sessions/{sid}/entries", json={"entries": [typo]})
    assert refused.status_code == 422 and key not in refused.text
    assert "body.entries[0].message.[REDACTED]: Extra inputs" in refused.json()["detail"]


# The second line of defence: a value the database refuses ---------------------------------


@pytest.fixture
def pg_database(tmp_path: Path) -> Iterator[tuple[str, SqlStore]]:
    with fresh_database("postgresql", tmp_path) as url:
        upgrade(url)
        store = SqlStore.from_url(url)
        yield url, store
        store.close()


@needs_postgres
def test_database_data_errors_classify_as_422(pg_database: tuple[str, SqlStore]) -> None:
    _, pg_store = pg_database
    pg_accounts = AccountStore(pg_store.engine)
    tenant_id = pg_accounts.create_tenant("acme").id
    refusals: list[Callable[[], object]] = [
        lambda: pg_accounts.create_tenant("nul", "a\x00b"),
        lambda: pg_store.create_session(tenant_id, "s1", metadata={"a": "\x00"}),
        lambda: pg_store.create_session(tenant_id, "s2", metadata={"a": "\ud800"}),
    ]
    for refuse in refusals:
        with pytest.raises(StoreError) as raised:
            refuse()
        assert refused_by_database(raised.value)
        assert classify(raised.value) == (422, "invalid_input")
    with pytest.raises(StoreError) as raised:
        pg_store.create_session(tenant_id, "s1", metadata={"a": "\x00"})
    assert isinstance(raised.value.__cause__, DataError)


@needs_postgres
def test_a_database_refusal_is_a_422_without_the_value(
    api_redis_server: EmbeddedRedis, pg_database: tuple[str, SqlStore]
) -> None:
    url, pg_store = pg_database
    # A route that skips the edge checks and hands the store a NUL, as a future field might.
    router = APIRouter()

    @router.post("/test/store-refuses")
    def store_refuses(state: State) -> None:
        state.accounts.create_tenant(f"t-{uuid.uuid4().hex[:8]}", "secret-ish \x00 value")

    client: redis.Redis = connect(api_redis_server.url)
    try:
        with serve(
            make_settings(url, api_redis_server.url),
            pg_store,
            client,
            Published(),
            routers=[router],
            backend="postgresql",
        ) as live:
            answer = httpx.post(f"{live.url}/test/store-refuses")
    finally:
        client.close()
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == "invalid_input"
    assert answer.json()["detail"] == REFUSED_BY_DATABASE
    assert "secret-ish" not in answer.text and "0x00" not in answer.text


PLAINLY_STORABLE_CASES = [
    ("plain object", b'{"entries": [{"kind": "note", "summary": "ok", "n": 1.5}]}', True),
    ("an escaped NUL", b'{"summary": "a\\u0000b"}', False),
    ("an escaped lone surrogate", b'{"summary": "\\ud800"}', False),
    ("any escape at all", b'{"summary": "caf\\u00e9"}', False),
    ("a UTF-8-encoded surrogate", b'{"summary": "\xed\xa0\x80"}', False),
    ("Hangul, storable, still walked", '{"summary": "\ud55c"}'.encode(), False),
    ("a float too large", b'{"x": 1e400}', False),
    ("NaN", b'{"x": NaN}', False),
    ("minus Infinity", b'{"x": -Infinity}', False),
    ("as many brackets as the depth cap", b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, False),
    ("one bracket fewer", b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1), True),
    ("UTF-16", '{"summary": "ok"}'.encode("utf-16-le"), False),
]


@pytest.mark.parametrize(
    ("body", "plain"),
    [c[1:] for c in PLAINLY_STORABLE_CASES],
    ids=[c[0] for c in PLAINLY_STORABLE_CASES],
)
def test_a_body_is_vouched_for_only_when_its_text_shows_nothing_unstorable(
    body: bytes, plain: bool
) -> None:
    value, vouched = parse_json_body(body)
    assert json.dumps(value) == json.dumps(json.loads(body))  # the same value as before
    assert vouched is plain
    if vouched:
        assert find_unstorable(value) is None
