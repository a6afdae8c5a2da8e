"""The OpenAI-compatible proxy over HTTP, on each store: the real ``openai`` SDK (sync,
async, streaming) and the OpenAI Agents SDK pointed at ``/v1/proxy`` by ``base_url`` alone,
in front of a real local OpenAI-compatible server (:mod:`tests.integrations.openai_server`)
that records what it received."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI, OpenAI

from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import SqlStore, upgrade
from tests.api.conftest import make_settings
from tests.api.server import LiveApi, Published, serve
from tests.conftest import BACKENDS, fresh_database
from tests.integrations.openai_server import ChatServer, UpstreamFailure, last_user_text

UPSTREAM_KEY = "sk-upstream-secret-0123456789abcdef"
MAX_MESSAGES = 40
SYSTEM = {"role": "system", "content": "You are terse."}


def reply(request: dict[str, Any]) -> str | dict[str, Any]:
    """Deterministic answers, scripted by the last user message."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return f"The weather is {messages[-1]['content']}."
    text = last_user_text(request)
    if text == "rate limit me":
        raise UpstreamFailure(429, {"error": {"message": "slow down", "type": "rate_limit"}})
    if text == "echo your key":
        raise UpstreamFailure(
            401, {"error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}"}}
        )
    if text.startswith("weather"):
        call = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
        return {
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
        }
    return f"Answer to: {text}"


class Proxied:
    """The upstream, the API in front of it, and a new tenant per call of :meth:`client`."""

    def __init__(self, upstream: ChatServer, live: LiveApi) -> None:
        self.upstream, self.live = upstream, live
        self.base_url = f"{live.url}/v1/proxy"

    def tenant(self) -> tuple[str, str, httpx.Client]:
        tenant_id, client = self.live.tenant()
        return tenant_id, str(client.headers["Authorization"]).removeprefix("Bearer "), client

    def sent(self, count: int = 1) -> list[list[dict[str, Any]]]:
        """The messages of the last ``count`` requests the upstream received."""
        return [r.body["messages"] for r in self.upstream.requests[-count:]]


def proxy_settings(database_url: str, redis_url: str, upstream_url: str) -> Settings:
    return make_settings(database_url, redis_url).model_copy(
        update={
            "proxy_upstream_url": upstream_url,
            "proxy_upstream_api_key": UPSTREAM_KEY,
            "proxy_max_messages": MAX_MESSAGES,
        }
    )


@pytest.fixture(scope="module", params=BACKENDS)
def proxied(
    request: pytest.FixtureRequest,
    api_redis_server: EmbeddedRedis,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Proxied]:
    with (
        ChatServer(reply, stream_pieces=4) as upstream,
        fresh_database(request.param, tmp_path_factory.mktemp("proxy")) as database_url,
    ):
        upstream_url = upstream.base_url
        upgrade(database_url)
        store = SqlStore.from_url(database_url)
        client = connect(api_redis_server.url)
        settings = proxy_settings(database_url, api_redis_server.url, upstream_url)
        try:
            with serve(settings, store, client, Published(), backend=request.param) as live:
                yield Proxied(upstream, live)
        finally:
            client.close()
            store.close()


def new_session() -> str:
    return f"px-{uuid.uuid4().hex[:12]}"


def messages_of(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/sessions/{session_id}/entries", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return [e["message"] for e in answer.json()["entries"] if e["kind"] == "message"]


def wait_for_messages(client: httpx.Client, session_id: str, count: int) -> list[dict[str, Any]]:
    # A streamed turn is recorded after the last chunk was sent: wait for it, without a margin
    # to assert on (the deadline only ends a hung test).
    deadline = time.monotonic() + 60
    while True:
        found = messages_of(client, session_id) if _exists(client, session_id) else []
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def flush_requested(proxied: Proxied, session_id: str) -> bool:
    # Requested once the answer is out: wait for it (the deadline only ends a hung test).
    deadline = time.monotonic() + 60
    while not any(call[1] == session_id for call in proxied.live.published.calls):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _exists(client: httpx.Client, session_id: str) -> bool:
    return client.get(f"/v1/sessions/{session_id}").status_code == 200


def test_sync_sdk_records_turns_once_and_trims_what_the_session_holds(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()
    sdk = OpenAI(base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session})
    history: list[Any] = [SYSTEM, {"role": "user", "content": "Our db is pg-staging-7."}]
    first = sdk.chat.completions.create(model="test-model", messages=history)
    assert first.choices[0].message.content == "Answer to: Our db is pg-staging-7."
    assert proxied.sent()[0] == history  # nothing held yet: forwarded as sent
    assert [m["role"] for m in messages_of(om, session)] == ["user", "assistant"]
    assert flush_requested(proxied, session)

    # A retry appends nothing twice.
    sdk.chat.completions.create(model="test-model", messages=history)
    assert len(messages_of(om, session)) == 2

    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Which port?"},
    ]
    raw = sdk.chat.completions.with_raw_response.create(model="test-model", messages=history)
    assert raw.headers["X-OM-Recorded"] == "true"
    sent = proxied.sent()[0]
    assert sent[0] == SYSTEM and sent[-1] == history[-1]
    assert history[1] not in sent and history[2] not in sent  # replaced by the blocks
    blocks = "\n".join(m["content"] for m in sent[1:-1])
    assert "pg-staging-7" in blocks and "Answer to: Our db" in blocks  # but in sight
    assert [m["content"] for m in messages_of(om, session)][-2:] == [
        "Which port?",
        "Answer to: Which port?",
    ]
    assert len(messages_of(om, session)) == 4


def test_streaming_passes_chunks_through_and_records_after_the_stream(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()
    sdk = OpenAI(base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session})
    history: list[Any] = [{"role": "user", "content": "Stream the deploy plan please."}]
    pieces = [
        chunk.choices[0].delta.content
        for chunk in sdk.chat.completions.create(model="test-model", messages=history, stream=True)
        if chunk.choices and chunk.choices[0].delta.content
    ]
    assert len(pieces) == 4  # the upstream's deltas, one by one
    assert "".join(pieces) == "Answer to: Stream the deploy plan please."
    recorded = wait_for_messages(om, session, 2)
    assert recorded[-1]["content"] == "".join(pieces)


def test_async_sdk_plain_and_streaming(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()

    async def run() -> tuple[str | None, str]:
        sdk = AsyncOpenAI(
            base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session}
        )
        history: list[Any] = [{"role": "user", "content": "first"}]
        plain = await sdk.chat.completions.create(model="test-model", messages=history)
        history += [
            {"role": "assistant", "content": plain.choices[0].message.content},
            {"role": "user", "content": "second"},
        ]
        stream = await sdk.chat.completions.create(
            model="test-model", messages=history, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await sdk.close()
        return plain.choices[0].message.content, text

    plain, streamed = asyncio.run(run())
    assert (plain, streamed) == ("Answer to: first", "Answer to: second")
    contents = [m["content"] for m in wait_for_messages(om, session, 4)]
    assert contents == ["first", "Answer to: first", "second", "Answer to: second"]


def test_streamed_tool_calls_are_recorded_and_kept_with_their_results(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()
    sdk = OpenAI(base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session})
    history: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    calls = [
        call
        for chunk in sdk.chat.completions.create(model="test-model", messages=history, stream=True)
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or ()
    ]
    assert [c.function.name for c in calls if c.function] == ["get_weather"]
    recorded = wait_for_messages(om, session, 2)
    assert recorded[-1]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
    ]
    call = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    answer = sdk.chat.completions.create(model="test-model", messages=history)
    assert answer.choices[0].message.content == "The weather is sunny."
    sent = proxied.sent()[0]
    assert history[0] not in sent  # held: in the recent block
    assert sent[-2:] == history[-2:]  # the tool result goes with its call
    assert [m["role"] for m in messages_of(om, session)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_upstream_errors_pass_through_and_record_nothing(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()
    sdk = OpenAI(
        base_url=proxied.base_url,
        api_key=key,
        default_headers={"X-OM-Session": session},
        max_retries=0,
    )
    with pytest.raises(openai.RateLimitError) as limited:
        sdk.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "rate limit me"}]
        )
    assert limited.value.status_code == 429
    assert limited.value.body == {"message": "slow down", "type": "rate_limit"}
    assert messages_of(om, session) == []
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "echo your key"}]
        )
    text = refused.value.response.text
    assert UPSTREAM_KEY not in text and "[REDACTED]" in text


def test_upstream_gets_its_key_and_the_model_and_never_our_key(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    answer = om.post(
        "/v1/proxy/chat/completions",
        headers={"X-OM-Session": new_session()},
        json={
            "model": "my-model",
            "temperature": 0.2,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert answer.status_code == 200, answer.text
    body = proxied.upstream.requests[-1].body
    assert body["model"] == "my-model" and body["temperature"] == 0.2
    assert key not in json.dumps(body)


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, {"model": "m", "messages": [{"role": "user", "content": "x"}]}, 422),
        (
            {"X-OM-Session": "a/b"},
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
            422,
        ),
        ({"X-OM-Session": "s"}, {"messages": [{"role": "user", "content": "x"}]}, 422),
        ({"X-OM-Session": "s"}, {"model": "m", "messages": []}, 422),
        (
            {"X-OM-Session": "s"},
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            422,
        ),
        ({"X-OM-Session": "s"}, {"model": "m", "messages": "hello"}, 422),
        (
            {"X-OM-Session": "s"},
            {"model": "m", "stream": "yes", "messages": [{"role": "user"}]},
            422,
        ),
    ],
)
def test_bad_requests_are_refused_with_a_reason(
    proxied: Proxied, headers: dict[str, str], body: dict[str, Any], status: int
) -> None:
    _, _, om = proxied.tenant()
    before = len(proxied.upstream.requests)
    answer = om.post("/v1/proxy/chat/completions", headers=headers, json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["detail"]
    assert len(proxied.upstream.requests) == before


def test_message_cap_and_authentication(proxied: Proxied) -> None:
    _, _, om = proxied.tenant()
    at_cap = [{"role": "user", "content": f"m{n}"} for n in range(MAX_MESSAGES)]
    url, headers = "/v1/proxy/chat/completions", {"X-OM-Session": new_session()}
    assert om.post(url, headers=headers, json={"model": "m", "messages": at_cap}).status_code == 200
    over = [*at_cap, {"role": "user", "content": "one more"}]
    refused = om.post(url, headers=headers, json={"model": "m", "messages": over})
    assert refused.status_code == 422 and "OM_PROXY_MAX_MESSAGES" in refused.json()["detail"]
    with proxied.live.anonymous() as anonymous:
        body = {"model": "m", "messages": at_cap[:1]}
        assert anonymous.post(url, headers=headers, json=body).status_code == 401


def test_another_tenant_never_sees_the_session(proxied: Proxied) -> None:
    _, key_a, om_a = proxied.tenant()
    _, key_b, om_b = proxied.tenant()
    session = new_session()
    for key in (key_a, key_b):
        sdk = OpenAI(
            base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session}
        )
        said = "secret plan A" if key == key_a else "hello from B"
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": said}])
    assert "secret plan A" not in json.dumps(proxied.sent()[0])
    assert [m["content"] for m in messages_of(om_b, session)] == [
        "hello from B",
        "Answer to: hello from B",
    ]
    assert messages_of(om_a, session)[0]["content"] == "secret plan A"


def test_agents_sdk_through_the_proxy(proxied: Proxied) -> None:
    set_tracing_disabled(True)
    _, key, om = proxied.tenant()
    session = new_session()

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny" if city == "Paris" else "rainy"

    async def run() -> str:
        client = AsyncOpenAI(
            base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session}
        )
        agent = Agent(
            name="weather",
            instructions="Answer about the weather.",
            model=OpenAIChatCompletionsModel(model="test-model", openai_client=client),
            tools=[get_weather],
        )
        result = await Runner.run(agent, "weather in Paris?")
        await client.close()
        return str(result.final_output)

    assert asyncio.run(run()) == "The weather is sunny."
    roles = [m["role"] for m in messages_of(om, session)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    second = proxied.sent()[0]
    assert {"role": "user", "content": "weather in Paris?"} not in second  # trimmed


def test_unreachable_or_missing_upstream(
    api_redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> None:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('proxy-down') / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    client = connect(api_redis_server.url)
    with ChatServer(reply) as closed:
        dead_url = closed.base_url  # the port is free once the server stopped
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for settings, status in (
        (proxy_settings(database_url, api_redis_server.url, dead_url), 502),
        (make_settings(database_url, api_redis_server.url), 404),
    ):
        with serve(settings, store, client, Published()) as live:
            _, om = live.tenant()
            answer = om.post(
                "/v1/proxy/chat/completions", headers={"X-OM-Session": "s1"}, json=body
            )
            assert answer.status_code == status, answer.text
            assert answer.json()["detail"] and UPSTREAM_KEY not in answer.text
    client.close()
    store.close()


def test_new_turns_follow_what_a_flush_appended(proxied: Proxied) -> None:
    _, key, om = proxied.tenant()
    session = new_session()
    sdk = OpenAI(base_url=proxied.base_url, api_key=key, default_headers={"X-OM-Session": session})
    history: list[Any] = [{"role": "user", "content": "remember pg-staging-7"}]
    first = sdk.chat.completions.create(model="m", messages=history)
    record = {"id": f"rec-{session}", "kind": "custom", "data": {"type": "test.record"}}
    appended = om.post(f"/v1/sessions/{session}/entries", json={"entries": [record]})
    assert appended.status_code == 201, appended.text  # stands for a flush's memory records
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "and then?"},
    ]
    sdk.chat.completions.create(model="m", messages=history)
    assert history[0] not in proxied.sent()[0]  # still trimmed
    branch = om.get(f"/v1/sessions/{session}/entries", params={"limit": 100}).json()["entries"]
    assert [e["id"] for e in branch].index(record["id"]) == 2  # kept on the branch
    assert [e["kind"] for e in branch] == ["message", "message", "custom", "message", "message"]
