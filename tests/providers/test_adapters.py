"""Both adapters against a real local server speaking their wire format: the same tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from om_core.errors import WorkerProviderError
from om_core.flush.provider import Provider, ProviderRequest, ToolSpec
from om_core.flush.workers import run_observer
from om_core.ledger.models import Message
from om_core.policy.limits import WorkerLimits
from om_workers.errors import (
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderResponseError,
    ProviderServerError,
    ProviderTimeoutError,
)
from om_workers.providers import AnthropicProvider, OpenAICompatibleProvider
from om_workers.providers.http import JsonPoster
from om_workers.providers.retry import PROVIDER_RETRY_POLICY
from tests.core.builders import Branch
from tests.providers.wire_server import Recorded, Reply, WireServer, running

API_KEY = "sk-test-0123456789"
FAST = replace(PROVIDER_RETRY_POLICY, attempts=3, base_s=0.25, multiplier=2.0, jitter=0.0)


@dataclass
class Wire:
    """One wire format: how to build answers and read requests."""

    name: str
    make: Callable[[str, list[float], float], Provider]
    tool_answer: Callable[[list[tuple[str, str, Any]]], Any]
    text_answer: Callable[[str], Any]
    auth: Callable[[Recorded], str | None]
    path: str


def _poster(url: str, sleeps: list[float], timeout_s: float) -> JsonPoster:
    return JsonPoster(
        url,
        timeout_s=timeout_s,
        policy=FAST,
        secrets=[API_KEY],
        sleep=sleeps.append,
        draw=lambda: 0.0,
        now_epoch_s=lambda: 0.0,
    )


def _arguments(args: Any) -> str:
    """OpenAI sends arguments as a JSON string; a str here is sent as-is (maybe malformed)."""
    return args if isinstance(args, str) else json.dumps(args)


OPENAI = Wire(
    name="openai",
    make=lambda url, sleeps, t: OpenAICompatibleProvider(
        api_key=API_KEY, poster=_poster(url, sleeps, t)
    ),
    tool_answer=lambda calls: {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": _arguments(args),
                            },
                        }
                        for cid, name, args in calls
                    ],
                }
            }
        ]
    },
    text_answer=lambda text: {"choices": [{"message": {"role": "assistant", "content": text}}]},
    auth=lambda r: r.headers.get("authorization"),
    path="/chat/completions",
)

ANTHROPIC = Wire(
    name="anthropic",
    make=lambda url, sleeps, t: AnthropicProvider(api_key=API_KEY, poster=_poster(url, sleeps, t)),
    tool_answer=lambda calls: {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hmm"}]
        + [
            {"type": "tool_use", "id": cid, "name": name, "input": args}
            for cid, name, args in calls
        ],
        "stop_reason": "tool_use",
    },
    text_answer=lambda text: {"role": "assistant", "content": [{"type": "text", "text": text}]},
    auth=lambda r: r.headers.get("x-api-key"),
    path="/v1/messages",
)


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda w: w.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    value: Wire = request.param
    return value


@pytest.fixture
def server() -> Iterator[WireServer]:
    with running() as srv:
        yield srv


def make(wire: Wire, server: WireServer, timeout_s: float = 5.0) -> tuple[Provider, list[float]]:
    sleeps: list[float] = []
    return wire.make(server.url, sleeps, timeout_s), sleeps


SPEC = ToolSpec(name="record_observation", description="d", parameters={"type": "object"})


def request(model: str = "m", session: str = "s/1 with spaces") -> ProviderRequest:
    return ProviderRequest(
        messages=(Message(role="system", content="sys"), Message(role="user", content="hi")),
        tools=(SPEC,),
        model=model,
        correlation_id=f"om:{session}",
    )


def test_same_observer_conversation_over_the_wire(wire: Wire, server: WireServer) -> None:
    branch = Branch()
    branch.user("Remember the release is on Friday at noon")
    args = {"text": "Release is Friday noon", "sourceEntryIds": ["e1"], "relevance": 0.8}
    server.push(
        Reply(body=wire.tool_answer([("call_1", "record_observation", args)])),
        Reply(body=wire.text_answer("done")),
    )
    provider, sleeps = make(wire, server)
    record = run_observer(
        provider, branch.entries, session_id="s 1", model="model-x", limits=WorkerLimits()
    )
    assert [o.text for o in record.observations] == ["Release is Friday noon"]
    assert sleeps == []
    first, second = server.requests
    assert first.path == second.path == wire.path
    assert wire.auth(first) in (API_KEY, f"Bearer {API_KEY}")
    assert first.body["model"] == "model-x"
    tool_names = [t.get("name") or t["function"]["name"] for t in first.body["tools"]]
    assert tool_names == ["record_observation"]
    _check_replay(wire, second.body)


def _check_replay(wire: Wire, body: dict[str, Any]) -> None:
    """The second turn replays the assistant tool call before the matching tool result."""
    messages = body["messages"]
    if wire is OPENAI:
        roles = [m["role"] for m in messages]
        assert roles == ["system", "user", "assistant", "tool"]
        assert messages[2]["tool_calls"][0]["id"] == "call_1"
        assert messages[3]["tool_call_id"] == "call_1"
        assert body["prompt_cache_key"].startswith("om:s_1")
    else:
        assert body["system"].startswith("You are the observer")
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert messages[1]["content"][0]["type"] == "tool_use"
        assert messages[2]["content"][0]["tool_use_id"] == "call_1"
        assert body["metadata"]["user_id"].startswith("om:s_1")


def test_credential_on_request_wins(wire: Wire, server: WireServer) -> None:
    server.push(Reply(body=wire.text_answer("ok")))
    provider, _ = make(wire, server)
    explicit = request().model_copy(update={"credential": "other-key-42"})
    provider.generate(explicit)
    assert "other-key-42" in (wire.auth(server.requests[0]) or "")


def test_429_with_retry_after_is_honoured(wire: Wire, server: WireServer) -> None:
    server.push(
        Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "2"}),
        Reply(body=wire.tool_answer([("c1", "record_observation", {"text": "x"})])),
    )
    provider, sleeps = make(wire, server)
    message = provider.generate(request()).message
    assert sleeps == [2.0]
    assert message.tool_calls[0].arguments == {"text": "x"}


def test_429_every_time_gives_up_with_rate_limit_error(wire: Wire, server: WireServer) -> None:
    server.push(*[Reply(status=429, body={"error": "no"}) for _ in range(3)])
    provider, sleeps = make(wire, server)
    with pytest.raises(ProviderRateLimitError) as info:
        provider.generate(request())
    assert info.value.status == 429 and sleeps == [0.25, 0.5]


def test_500_is_retried_with_backoff_then_succeeds(wire: Wire, server: WireServer) -> None:
    server.push(Reply(status=500, body={"error": "boom"}), Reply(body=wire.text_answer("fine")))
    provider, sleeps = make(wire, server)
    assert provider.generate(request()).message.text == "fine"
    assert sleeps == [0.25] and len(server.requests) == 2


def test_persistent_500_raises_server_error_redacted(wire: Wire, server: WireServer) -> None:
    server.push(*[Reply(status=503, raw=f"upstream leaked {API_KEY}".encode()) for _ in range(3)])
    provider, _ = make(wire, server)
    with pytest.raises(ProviderServerError) as info:
        provider.generate(request())
    assert API_KEY not in str(info.value) and "[REDACTED]" in str(info.value)
    assert len(server.requests) == 3


def test_401_is_not_retried_and_is_redacted(wire: Wire, server: WireServer) -> None:
    server.push(Reply(status=401, body={"error": f"bad key {API_KEY}"}))
    provider, sleeps = make(wire, server)
    with pytest.raises(ProviderRequestError) as info:
        provider.generate(request())
    assert API_KEY not in str(info.value)
    assert sleeps == [] and len(server.requests) == 1


def test_timeouts_are_retried_then_raised(wire: Wire, server: WireServer) -> None:
    server.push(Reply(hang=True), Reply(hang=True), Reply(hang=True))
    provider, sleeps = make(wire, server, timeout_s=0.2)
    with pytest.raises(ProviderTimeoutError):
        provider.generate(request())
    assert len(sleeps) == 2


@pytest.mark.parametrize("kind", ["bad_json_args", "no_id", "args_not_object", "not_json"])
def test_malformed_answers_raise_response_error(wire: Wire, server: WireServer, kind: str) -> None:
    if kind == "not_json":
        server.push(Reply(raw=b"<html>gateway</html>"))
    elif kind == "no_id":
        server.push(Reply(body=wire.tool_answer([("", "record_observation", {})])))
    elif kind == "args_not_object":
        server.push(Reply(body=wire.tool_answer([("c1", "record_observation", [1, 2])])))
    elif wire is OPENAI:
        server.push(Reply(body=wire.tool_answer([("c1", "record_observation", "{not json")])))
    else:
        server.push(Reply(body={"content": "not a list"}))
    provider, _ = make(wire, server)
    with pytest.raises(ProviderResponseError):
        provider.generate(request())


def test_malformed_tool_call_fails_the_worker_run_closed(wire: Wire, server: WireServer) -> None:
    server.push(Reply(body=wire.tool_answer([("c1", "record_observation", [1])])))
    provider, _ = make(wire, server)
    branch = Branch()
    branch.user("Some fact worth keeping for later")
    with pytest.raises(WorkerProviderError, match="not a JSON object"):
        run_observer(provider, branch.entries, session_id="s", model="m", limits=WorkerLimits())


def test_connection_refused_is_a_transport_error(wire: Wire) -> None:
    with running() as srv:
        url = srv.url
    sleeps: list[float] = []
    provider = wire.make(url, sleeps, 1.0)
    with pytest.raises(Exception) as info:
        provider.generate(request())
    assert type(info.value).__name__ == "ProviderTransportError"
    assert len(sleeps) == 2


def test_thinking_level_and_options_map_to_the_wire(wire: Wire, server: WireServer) -> None:
    server.push(Reply(body=wire.text_answer("ok")))
    provider, _ = make(wire, server)
    req = request().model_copy(update={"options": {"thinkingLevel": "low", "temperature": 0}})
    provider.generate(req)
    body = server.requests[0].body
    assert body["temperature"] == 0
    if wire is OPENAI:
        assert body["reasoning_effort"] == "low"
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        assert body["max_tokens"] > 1024
