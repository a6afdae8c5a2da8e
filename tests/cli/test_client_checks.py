"""The clients refuse every bad input they can see with their own ``InvalidRequest`` naming the
field, before sending anything: never a pydantic ``ValidationError``, a ``TypeError`` or a
request the server has to refuse. A transport that fails the test on any request proves
nothing was sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from om_api.client import AsyncOMClient, InvalidRequest, OMClient
from om_api.schemas import EntryIn, MessageWire

REFS = ["om:0123456789ab"]

# (what is wrong, the call, the field the message must name)
CASES: list[tuple[str, Callable[[Any], Any], str]] = [
    ("session id with a slash", lambda om: om.get_session("a/b"), "session_id"),
    ("session id '.'", lambda om: om.status("."), "session_id"),
    ("session id '..'", lambda om: om.context(".."), "session_id"),
    ("session id not a string", lambda om: om.view(42), "session_id"),
    ("empty session id", lambda om: om.create_session(""), "session_id"),
    ("new session id '..'", lambda om: om.create_session(".."), "session_id"),
    ("metadata not a mapping", lambda om: om.create_session("s", ["x"]), "metadata"),
    ("NUL in metadata", lambda om: om.create_session("s", {"a": "x\x00"}), "metadata.a"),
    (
        "role robot (dict)",
        lambda om: om.append("s", [{"role": "robot", "content": "hi"}]),
        "entries[0].message.role",
    ),
    (
        "role robot (second entry)",
        lambda om: om.append("s", [{"role": "user"}, {"role": "robot"}]),
        "entries[1].message.role",
    ),
    ("entries a string", lambda om: om.append("s", "hello"), "entries"),
    ("entries one dict", lambda om: om.append("s", {"role": "user"}), "entries"),
    ("entry a string", lambda om: om.append("s", ["hello"]), "entries[0]"),
    (
        "unknown entry key",
        lambda om: om.append("s", [{"kind": "note", "sumary": "x"}]),
        "entries[0].sumary",
    ),
    ("bad entry id", lambda om: om.append("s", [{"id": "a b", "kind": "note"}]), "entries[0].id"),
    ("bad memory id", lambda om: om.recall("s", "not-a-memory-id"), "memory_id"),
    ("bad job id", lambda om: om.job("a/b"), "job_id"),
    ("refs a string", lambda om: om.bind("s", "task", "om:0123456789ab"), "refs"),
    ("bad ref", lambda om: om.unbind("s", "task", ["nope"]), "refs[0]"),
    ("principals a string", lambda om: om.grant("s", "task", "peer"), "principals"),
    ("principals a dict", lambda om: om.revoke("s", "task", {"peer": 1}), "principals"),
    ("entry ids a string", lambda om: om.revoke_entries("s", "e1"), "entry_ids"),
    ("empty entry ids", lambda om: om.revoke_entries("s", []), "entry_ids"),
    ("scope id with a slash", lambda om: om.open_scope("s", "a/b"), "scope_id"),
    ("scope path id '..'", lambda om: om.enter_scope("s", ".."), "scope_id"),
    ("parent scope '.'", lambda om: om.open_scope("s", "t", parent_id="."), "parent_id"),
    ("long scope label", lambda om: om.open_scope("s", "t", label="x" * 600), "label"),
    ("scope query '/'", lambda om: om.context("s", scope="a/b"), "scope"),
    ("include", lambda om: om.context("s", include="everything"), "include"),
    ("max tokens too small", lambda om: om.context("s", max_tokens=1), "max_tokens"),
    ("max tokens a string", lambda om: om.context("s", max_tokens="9"), "max_tokens"),
    ("messages limit", lambda om: om.messages("s", "e1", limit=101), "limit"),
    ("messages cursor", lambda om: om.messages("s", "a b"), "cursor"),
    ("direction", lambda om: om.messages("s", "e1", direction="up"), "direction"),
    ("detail", lambda om: om.messages("s", "e1", detail="all"), "detail"),
    ("entries after", lambda om: om.entries("s", after="a/b"), "after"),
    ("entries limit", lambda om: om.entries("s", limit=0), "limit"),
    ("entries limit bool", lambda om: om.entries("s", limit=True), "limit"),
    ("sessions limit", lambda om: om.list_sessions(limit=500), "limit"),
    ("sessions since", lambda om: om.list_sessions(updated_since="yesterday"), "updated_since"),
    ("sessions cursor", lambda om: om.list_sessions(cursor=""), "cursor"),
    ("flush force", lambda om: om.flush("s", force="maybe"), "force"),
    ("compact keep", lambda om: om.compact("s", keep_recent_entries=-1), "keep_recent_entries"),
    ("tenant id", lambda om: om.create_tenant(".."), "tenant_id"),
    ("tenant of keys", lambda om: om.list_keys("a/b"), "tenant_id"),
    ("key label", lambda om: om.create_key("t", label="x" * 300), "label"),
    ("key id", lambda om: om.revoke_key("."), "key_id"),
]


def _no_requests(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"sent {request.method} {request.url} although the input is invalid")


def _assert_refused(error: InvalidRequest, field: str) -> None:
    message = str(error)
    assert message.startswith(f"{field}") or f"{field}:" in message, message
    assert error.detail == message and error.code == "invalid_input" and error.status is None


@pytest.mark.parametrize(("case", "call", "field"), CASES, ids=[c[0] for c in CASES])
def test_the_sync_client_refuses_bad_input_locally(
    case: str, call: Callable[[Any], Any], field: str
) -> None:
    with OMClient("http://om.invalid", "k", transport=httpx.MockTransport(_no_requests)) as om:
        try:
            call(om)
        except InvalidRequest as error:
            _assert_refused(error, field)
        except (ValidationError, TypeError, ValueError) as error:  # pragma: no cover
            pytest.fail(f"{case}: raw {type(error).__name__}: {error}")
        else:  # pragma: no cover
            pytest.fail(f"{case}: accepted")


def test_the_async_client_refuses_the_same_inputs() -> None:
    async def scenario() -> list[str]:
        transport = httpx.MockTransport(_no_requests)
        problems = []
        async with AsyncOMClient("http://om.invalid", "k", transport=transport) as om:
            for case, call, field in CASES:
                try:
                    await call(om)
                except InvalidRequest as error:
                    _assert_refused(error, field)
                except Exception as error:  # pragma: no cover
                    problems.append(f"{case}: {type(error).__name__}: {error}")
                else:  # pragma: no cover
                    problems.append(f"{case}: accepted")
        return problems

    assert asyncio.run(scenario()) == []


def test_good_input_is_sent_unchanged() -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        body = {"appended_ids": ["e1"], "duplicate_ids": [], "leaf_id": "e1"}
        return httpx.Response(201, json=body)

    with OMClient("http://om.invalid", "k", transport=httpx.MockTransport(answer)) as om:
        om.append(
            "..x",
            [
                {"role": "user", "content": "hi"},
                MessageWire(role="assistant", content="ok"),
                EntryIn(id="e1", kind="note", summary="s"),
            ],
        )
    assert sent[0].url.raw_path == b"/v1/sessions/..x/entries"
    entries = json.loads(sent[0].content)["entries"]
    assert [e["kind"] for e in entries] == ["message", "message", "note"]
    assert entries[0]["message"] == {
        "role": "user", "content": "hi", "tool_calls": [], "is_error": False,
    }  # fmt: skip
