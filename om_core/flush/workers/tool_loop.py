"""The tool-only worker loop, bounded by every worker limit (:mod:`om_core.policy.limits`).

One run: a system message and a delimited prompt go to the provider; each answer's tool calls
are validated as a whole (count, names, argument size/shape) before any of them executes or
enters the transcript; then each executes and its result is measured before and after
redaction. The transcript replays the assistant ``tool_call`` message before the matching
``tool`` results so call/result-pairing providers accept it. A turn without tool calls ends
the run; calls on the final allowed turn execute, and no further turn starts.

Any violation raises a :class:`~om_core.errors.WorkerRunError` subclass whose text is redacted
and bounded to ``max_error_bytes``; the caller records nothing for a failed run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

from om_core.errors import (
    InvalidInputError,
    ObservationalMemoryError,
    WorkerProtocolError,
    WorkerProviderError,
    WorkerRunError,
    WorkerTranscriptOverflowError,
)
from om_core.flush.provider import Provider, ProviderRequest, ToolSpec, correlation_id_for
from om_core.flush.workers.jsonvalue import bounded_error, dump_json, json_bytes
from om_core.flush.workers.protocol import system_message
from om_core.ledger.models import Message, ToolCall
from om_core.policy.limits import WorkerLimits
from om_core.policy.redaction import normalize_secrets, redact_value

ToolHandler = Callable[[dict[str, Any]], Any]


class ToolError(InvalidInputError):
    """Raised by a tool handler for an error the model may see and correct: the model's call
    is the input refused.

    The (redacted, bounded) message is replayed as the call's error payload; the run goes on.
    Any other exception from a handler fails the run.
    """


@dataclass(frozen=True)
class WorkerTool:
    """A registered worker tool: what the model sees, and the handler that executes it."""

    spec: ToolSpec
    handler: ToolHandler


@dataclass(frozen=True)
class ToolLoopResult:
    """What a finished run did: provider turns, executed calls, and the replayed transcript."""

    turns: int
    tool_calls: int
    transcript: tuple[Message, ...]


@dataclass
class _Run:
    """Mutable state of one run; lives only inside :func:`run_tool_loop`."""

    provider: Provider
    tools: dict[str, WorkerTool]
    model: str
    correlation_id: str
    limits: WorkerLimits
    secrets: tuple[str, ...]
    options: dict[str, Any]
    credential: str | None
    transcript: list[Message] = field(default_factory=list)
    transcript_bytes: int = 0
    calls: int = 0

    def fail(self, error: type[WorkerRunError], text: str) -> WorkerRunError:
        return error(bounded_error(text, self.secrets, self.limits.max_error_bytes))

    def append(self, message: Message) -> None:
        """Add a message unless it would push the transcript past ``max_message_bytes``."""
        size = message_bytes(message)
        if self.transcript_bytes + size > self.limits.max_message_bytes:
            raise self.fail(
                WorkerTranscriptOverflowError,
                f"worker transcript would reach {self.transcript_bytes + size} bytes "
                f"(max {self.limits.max_message_bytes})",
            )
        self.transcript.append(message)
        self.transcript_bytes += size


def message_bytes(message: Message) -> int:
    """Bytes a message adds to the transcript: its compact wire JSON in UTF-8."""
    return len(dump_json(message.to_json_dict()).encode("utf-8"))


def run_tool_loop(
    provider: Provider,
    *,
    system: str,
    prompt: str,
    tools: Sequence[WorkerTool],
    model: str,
    correlation_id: str,
    limits: WorkerLimits,
    secrets: Iterable[str] = (),
    options: dict[str, Any] | None = None,
    credential: str | None = None,
) -> ToolLoopResult:
    """Run one tool-only worker loop to its end and return what it did.

    ``system`` and ``prompt`` are redacted before they are sent. Raises a
    :class:`~om_core.errors.WorkerRunError` subclass (redacted, at most
    ``limits.max_error_bytes`` bytes of text) on any limit or protocol violation, or when the
    provider raises.
    """
    known = normalize_secrets(secrets)
    run = _Run(
        provider=provider,
        tools={tool.spec.name: tool for tool in tools},
        model=model,
        correlation_id=correlation_id,
        limits=limits,
        secrets=known + ((credential,) if credential else ()),
        options=dict(options or {}),
        credential=credential,
    )
    run.append(Message(role="system", content=redact_value(system, run.secrets)))
    run.append(Message(role="user", content=redact_value(prompt, run.secrets)))
    turns = 0
    while turns < limits.max_turns:
        turns += 1
        calls = _ask(run)
        if not calls:
            break
        replayed = _check_calls(run, calls)
        run.append(Message(role="assistant", tool_calls=replayed))
        for call in calls:
            _execute(run, call)
        run.calls += len(calls)
    return ToolLoopResult(turns=turns, tool_calls=run.calls, transcript=tuple(run.transcript))


class WorkerCall(TypedDict, total=False):
    """What every worker run (observer, reflector, dropper) takes besides its input, as
    keywords: the session it runs for (its correlation id is ``om:<session_id>``), the
    ``model`` and the ``limits``; ``secrets`` redacted from everything it sends and reports;
    ``instructions`` in place of the worker's built-in ones; provider ``options``; and the
    ``credential`` sent with each request."""

    session_id: Required[str]
    model: Required[str]
    limits: Required[WorkerLimits]
    secrets: Iterable[str]
    instructions: str | None
    options: Mapping[str, Any] | None
    credential: str | None


class WorkerRun:
    """One worker run as ``call`` describes it: the secrets it redacts (``call``'s, read once)
    and its system message (``call``'s instructions, else the worker's ``built_in`` ones, then
    the announced limits); :meth:`loop` runs it."""

    def __init__(self, provider: Provider, call: WorkerCall, built_in: str) -> None:
        self._provider = provider
        self._call = call
        self.secrets = tuple(call.get("secrets", ()))
        self.system = system_message(call.get("instructions") or built_in, call["limits"])

    def loop(self, prompt: str, tool: WorkerTool) -> ToolLoopResult:
        """:func:`run_tool_loop` over ``tool``, ``prompt`` the user message; fails as it does."""
        call = self._call
        return run_tool_loop(
            self._provider,
            system=self.system,
            prompt=prompt,
            tools=[tool],
            model=call["model"],
            correlation_id=correlation_id_for(call["session_id"]),
            limits=call["limits"],
            secrets=self.secrets,
            options=dict(call.get("options") or {}),
            credential=call.get("credential"),
        )


def _ask(run: _Run) -> tuple[ToolCall, ...]:
    request = ProviderRequest(
        messages=tuple(run.transcript),
        tools=tuple(tool.spec for tool in run.tools.values()),
        model=run.model,
        options=run.options,
        correlation_id=run.correlation_id,
        credential=run.credential,
    )
    try:
        response = run.provider.generate(request)
    except Exception as exc:  # any provider failure fails the run closed, reported redacted
        raise run.fail(WorkerProviderError, f"provider call failed: {exc}") from None
    message = getattr(response, "message", None)
    if not isinstance(message, Message) or message.role != "assistant":
        raise run.fail(WorkerProviderError, "provider answered without an assistant message")
    # Text and thinking are ignored: workers are tool-only.
    return message.tool_calls


def _check_calls(run: _Run, calls: tuple[ToolCall, ...]) -> tuple[ToolCall, ...]:
    """Validate a whole turn before any call executes or enters the transcript; the calls as
    the transcript replays them (arguments redacted)."""
    limits = run.limits
    if len(calls) > limits.max_tool_calls_per_turn:
        raise run.fail(
            WorkerProtocolError,
            f"turn made {len(calls)} tool calls (max {limits.max_tool_calls_per_turn} per turn)",
        )
    if run.calls + len(calls) > limits.max_tool_calls:
        raise run.fail(
            WorkerProtocolError,
            f"run would make {run.calls + len(calls)} tool calls (max {limits.max_tool_calls})",
        )
    replayed = []
    for call in calls:
        if call.name not in run.tools:
            raise run.fail(WorkerProtocolError, f"unknown tool {call.name!r}")
        _check_size(run, call.arguments, limits.max_argument_bytes, f"arguments of {call.name}")
        redacted = redact_value(call.arguments, run.secrets)
        if redacted is not call.arguments:  # without secrets nothing changed: measured above
            cap, what = limits.max_argument_bytes, f"redacted arguments of {call.name}"
            _check_size(run, redacted, cap, what)
        replayed.append(ToolCall(id=call.id, name=call.name, arguments=redacted))
    return tuple(replayed)


def _check_size(run: _Run, value: Any, cap: int, what: str) -> None:
    try:
        size = json_bytes(value, what=what)
    except WorkerProtocolError as exc:
        raise run.fail(WorkerProtocolError, str(exc)) from None
    if size > cap:
        raise run.fail(WorkerProtocolError, f"{what} are {size} bytes (max {cap})")


def _execute(run: _Run, call: ToolCall) -> None:
    """Run one call's handler, measure its result twice, and replay it as a tool message."""
    limits = run.limits
    is_error = False
    try:
        value = run.tools[call.name].handler(call.arguments)
    except ToolError as exc:
        is_error = True
        value = bounded_error(str(exc), run.secrets, limits.max_error_bytes)
    except ObservationalMemoryError as exc:
        kind = type(exc) if isinstance(exc, WorkerRunError) else WorkerRunError
        raise run.fail(kind, str(exc)) from None
    except Exception as exc:  # a crashing tool fails the run; its text is still redacted
        raise run.fail(WorkerRunError, f"tool {call.name} failed: {exc}") from None
    payload: dict[str, Any] = {"error": value} if is_error else {"value": value}
    # Full result before redaction: a tool may return more than the cap allows.
    _check_size(run, payload, limits.max_result_bytes, f"result of {call.name}")
    replayed = redact_value(payload, run.secrets)
    if replayed is not payload:
        # Again after redaction: the replacement marker can be longer than the secret.
        _check_size(run, replayed, limits.max_result_bytes, f"redacted result of {call.name}")
    run.append(
        Message(
            role="tool",
            content=dump_json(replayed),
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=is_error,
        )
    )
