"""The tool-only loop: every limit at its boundary, ordering, final turn, redaction."""

from __future__ import annotations

import json
from typing import Any

import pytest

from om_core.errors import (
    WorkerProtocolError,
    WorkerProviderError,
    WorkerRunError,
    WorkerTranscriptOverflowError,
)
from om_core.flush.provider import ProviderRequest, ProviderResponse, ScriptedProvider, ToolSpec
from om_core.flush.workers.tool_loop import (
    ToolError,
    ToolLoopResult,
    WorkerTool,
    message_bytes,
    run_tool_loop,
)
from om_core.ledger.models import Message, ToolCall
from om_core.policy.limits import WorkerLimits

SPEC = ToolSpec(name="echo", description="echo", parameters={"type": "object"})
SECRET = "s3cr3t-token"


def call(i: int, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{i}", name="echo", arguments=arguments)


def turn(*calls: ToolCall, text: str = "") -> Message:
    return Message(role="assistant", content=text, tool_calls=calls)


class Echo:
    def __init__(self, result: Any = None) -> None:
        self.seen: list[dict[str, Any]] = []
        self.result = result

    def __call__(self, arguments: dict[str, Any]) -> Any:
        self.seen.append(arguments)
        return self.result if self.result is not None else {"ok": True}


def run(
    script: list[Any], limits: WorkerLimits, handler: Echo | None = None, **kw: Any
) -> tuple[ToolLoopResult, ScriptedProvider, Echo]:
    provider = ScriptedProvider(script, then_stop=True)
    echo = handler or Echo()
    result = run_tool_loop(
        provider,
        system=kw.pop("system", "sys"),
        prompt=kw.pop("prompt", "prompt"),
        tools=[WorkerTool(SPEC, echo)],
        model="m",
        correlation_id="om:s",
        limits=limits,
        **kw,
    )
    return result, provider, echo


def test_turn_without_tool_call_ends_run_as_noop_and_text_is_ignored() -> None:
    result, provider, echo = run([turn(text="I think I am done")], WorkerLimits())
    assert (result.turns, result.tool_calls, echo.seen) == (1, 0, [])
    assert len(provider.requests) == 1
    assert [m.role for m in result.transcript] == ["system", "user"]


def test_max_turns_final_turn_calls_execute_and_no_further_turn() -> None:
    script = [turn(call(i, n=i)) for i in range(5)]
    result, provider, echo = run(script, WorkerLimits(max_turns=3))
    assert result.turns == 3
    assert len(provider.requests) == 3  # no fourth request after the final allowed turn
    assert [a["n"] for a in echo.seen] == [0, 1, 2]  # the final turn's call executed
    assert result.transcript[-1].role == "tool"  # ... and persisted


def test_calls_per_turn_at_cap_ok_one_past_fails_without_executing() -> None:
    limits = WorkerLimits(max_tool_calls_per_turn=2)
    result, _, echo = run([turn(call(0), call(1))], limits)
    assert result.tool_calls == 2 and len(echo.seen) == 2
    with pytest.raises(WorkerProtocolError, match="per turn"):
        run([turn(call(0), call(1), call(2))], limits, handler=(echo := Echo()))
    assert echo.seen == []


def test_calls_per_run_at_cap_ok_one_past_fails() -> None:
    limits = WorkerLimits(max_tool_calls=3)
    result, _, _ = run([turn(call(0), call(1)), turn(call(2))], limits)
    assert result.tool_calls == 3
    echo = Echo()
    with pytest.raises(WorkerProtocolError, match="max 3"):
        run([turn(call(0), call(1)), turn(call(2), call(3))], limits, handler=echo)
    assert len(echo.seen) == 2  # the overflowing turn executed nothing


def test_argument_bytes_boundary() -> None:
    overhead = len(json.dumps({"v": ""}, separators=(",", ":")))
    limits = WorkerLimits(max_argument_bytes=100)
    run([turn(call(0, v="x" * (100 - overhead)))], limits)
    echo = Echo()
    with pytest.raises(WorkerProtocolError, match="arguments of echo are 101 bytes"):
        run([turn(call(0, v="x" * (101 - overhead)))], limits, handler=echo)
    assert echo.seen == []


def test_redacted_arguments_are_measured_again() -> None:
    overhead = len(json.dumps({"v": ""}, separators=(",", ":")))
    limits = WorkerLimits(max_argument_bytes=overhead + len(SECRET))
    run([turn(call(0, v=SECRET))], limits)  # raw fits exactly
    with pytest.raises(WorkerProtocolError, match="redacted arguments"):
        run([turn(call(0, v=SECRET))], limits, secrets=[SECRET[:4]])  # marker grows it


def test_unknown_tool_fails_and_nothing_executes() -> None:
    echo = Echo()
    bad = ToolCall(id="x", name="rm_rf", arguments={})
    with pytest.raises(WorkerProtocolError, match="unknown tool"):
        run([turn(call(0), bad)], WorkerLimits(), handler=echo)
    assert echo.seen == []


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"v": _deep(70)}, "deeper"),
        ({"v": {1, 2}}, "non-JSON"),
        ({"v": float("nan")}, "non-finite"),
        ({"v": object()}, "non-JSON"),
    ],
)
def test_bad_arguments_fail_closed(arguments: dict[str, Any], match: str) -> None:
    bad = ToolCall.model_construct(id="c", name="echo", arguments=arguments)
    with pytest.raises(WorkerProtocolError, match=match):
        run([turn(bad)], WorkerLimits())


def test_cyclic_arguments_and_results_fail_closed() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    bad = ToolCall.model_construct(id="c", name="echo", arguments=cyclic)
    with pytest.raises(WorkerProtocolError, match="cyclic"):
        run([turn(bad)], WorkerLimits())
    with pytest.raises(WorkerProtocolError, match="cyclic"):
        run([turn(call(0))], WorkerLimits(), handler=Echo(result=[cyclic]))


def test_result_bytes_boundary_and_non_json_result() -> None:
    overhead = len(json.dumps({"value": ""}, separators=(",", ":")))
    limits = WorkerLimits(max_result_bytes=100)
    run([turn(call(0))], limits, handler=Echo(result="x" * (100 - overhead)))
    with pytest.raises(WorkerProtocolError, match="result of echo are 101 bytes"):
        run([turn(call(0))], limits, handler=Echo(result="x" * (101 - overhead)))
    with pytest.raises(WorkerProtocolError, match="non-JSON"):
        run([turn(call(0))], limits, handler=Echo(result={"when": object()}))


def test_redacted_result_is_measured_again() -> None:
    overhead = len(json.dumps({"value": ""}, separators=(",", ":")))
    limits = WorkerLimits(max_result_bytes=overhead + 4)
    run([turn(call(0))], limits, handler=Echo(result="abcd"))
    with pytest.raises(WorkerProtocolError, match="redacted result"):
        run([turn(call(0))], limits, handler=Echo(result="abcd"), secrets=["bc"])


def _start_bytes(system: str = "sys", prompt: str = "prompt") -> int:
    return message_bytes(Message(role="system", content=system)) + message_bytes(
        Message(role="user", content=prompt)
    )


def test_transcript_bytes_boundary_before_first_call() -> None:
    cap = _start_bytes()
    run([turn()], WorkerLimits(max_message_bytes=cap))
    provider = ScriptedProvider([], then_stop=True)
    with pytest.raises(WorkerTranscriptOverflowError):
        run_tool_loop(
            provider,
            system="sys",
            prompt="prompt",
            tools=[WorkerTool(SPEC, Echo())],
            model="m",
            correlation_id="om:s",
            limits=WorkerLimits(max_message_bytes=cap - 1),
        )
    assert provider.requests == []  # failed before joining beyond the cap


def test_transcript_overflow_keeps_excess_call_out() -> None:
    assistant = Message(role="assistant", tool_calls=(call(0),))
    cap = _start_bytes() + message_bytes(assistant)
    echo = Echo()
    with pytest.raises(WorkerTranscriptOverflowError):
        run([turn(call(0))], WorkerLimits(max_message_bytes=cap - 1), handler=echo)
    assert echo.seen == []
    # At the cap, the call enters; its result then overflows and fails the run.
    with pytest.raises(WorkerTranscriptOverflowError):
        run([turn(call(0))], WorkerLimits(max_message_bytes=cap))


def test_transcript_replays_calls_before_results_in_order() -> None:
    script = [turn(call(0, n=0), call(1, n=1)), turn(call(2, n=2))]
    _, provider, _ = run(script, WorkerLimits())
    second = provider.requests[1].messages
    assert [m.role for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert [c.id for c in second[2].tool_calls] == ["c0", "c1"]
    assert [m.tool_call_id for m in second[3:]] == ["c0", "c1"]
    third = provider.requests[2].messages
    assert [m.role for m in third[5:]] == ["assistant", "tool"]


def test_tool_error_is_replayed_redacted_and_bounded() -> None:
    def failing(arguments: dict[str, Any]) -> Any:
        raise ToolError(f"bad key {SECRET} " + "x" * 5000)

    provider = ScriptedProvider([turn(call(0))], then_stop=True)
    run_tool_loop(
        provider,
        system="s",
        prompt="p",
        tools=[WorkerTool(SPEC, failing)],
        model="m",
        correlation_id="om:s",
        limits=WorkerLimits(max_error_bytes=64),
        secrets=[SECRET],
    )
    replay = provider.requests[1].messages[-1]
    assert replay.is_error and SECRET not in replay.text
    assert len(json.loads(replay.text)["error"].encode()) <= 64


def test_error_bytes_boundary_and_redaction_of_provider_failures() -> None:
    boom = RuntimeError(f"upstream said {SECRET}: " + "y" * 4000)
    with pytest.raises(WorkerProviderError) as info:
        run([boom], WorkerLimits(max_error_bytes=200), secrets=[SECRET])
    text = str(info.value)
    assert SECRET not in text and "[REDACTED]" in text
    assert len(text.encode()) <= 200
    short = RuntimeError("x")
    with pytest.raises(WorkerProviderError) as info:
        run([short], WorkerLimits(max_error_bytes=200))
    assert str(info.value) == "provider call failed: x"


def test_crashing_tool_fails_run_with_redacted_error() -> None:
    def crash(arguments: dict[str, Any]) -> Any:
        raise KeyError(SECRET)

    with pytest.raises(WorkerRunError) as info:
        run_tool_loop(
            ScriptedProvider([turn(call(0))]),
            system="s",
            prompt="p",
            tools=[WorkerTool(SPEC, crash)],
            model="m",
            correlation_id="om:s",
            limits=WorkerLimits(),
            secrets=[SECRET],
        )
    assert SECRET not in str(info.value)


def test_non_assistant_answer_fails() -> None:
    with pytest.raises(WorkerProviderError):
        run([ProviderResponse(message=Message(role="user", content="hi"))], WorkerLimits())


def test_everything_replayed_is_redacted() -> None:
    def leaky(arguments: dict[str, Any]) -> Any:
        return {"echo": arguments["v"], "extra": SECRET}

    provider = ScriptedProvider([turn(call(0, v=f"has {SECRET}"))], then_stop=True)
    run_tool_loop(
        provider,
        system=f"system {SECRET}",
        prompt=f"prompt {SECRET}",
        tools=[WorkerTool(SPEC, leaky)],
        model="m",
        correlation_id="om:s",
        limits=WorkerLimits(),
        secrets=[SECRET],
        credential="cred-value-123",
    )
    for request in provider.requests:
        dumped = json.dumps([m.to_json_dict() for m in request.messages])
        assert SECRET not in dumped
    assert provider.requests[0].credential == "cred-value-123"
    assert "cred-value-123" not in repr(provider.requests[0])


def test_requests_carry_model_tools_and_correlation_id() -> None:
    _, provider, _ = run([turn()], WorkerLimits(), options={"temperature": 0})
    request: ProviderRequest = provider.requests[0]
    assert (request.model, request.correlation_id) == ("m", "om:s")
    assert [t.name for t in request.tools] == ["echo"]
    assert request.options == {"temperature": 0}
