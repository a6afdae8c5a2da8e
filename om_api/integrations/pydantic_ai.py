"""Observational memory for pydantic-ai agents (the ``pydantic-ai`` extra).

Wiring::

    memory = ObservationalMemory(AsyncOMClient(url, api_key), session_id, max_tokens=8_000)
    agent = Agent(model, capabilities=[memory.capability()], toolsets=[memory.toolset()])
    result = await agent.run(prompt); await memory.record(result.new_messages())

Before every model request the history processor replaces the history that came from earlier
runs with the session's context: one request holding a ``CompactionPart`` with the memory block
(observations and reflections, each with an id ``client.recall`` resolves) and the messages
memory does not cover yet. The current run's messages follow it unchanged. After the run,
:meth:`ObservationalMemory.record` appends the run's messages and requests a flush, so the next
run, even a new one with empty history, starts from memory.
:meth:`ObservationalMemory.toolset` gives the agent ``search_memory`` and ``recall_memory``
(:mod:`~om_api.integrations.memory_tools`), to find a detail memory does not show and read the
exact messages behind a memory id.

pydantic-ai 2 removed ``Agent(history_processors=...)``; its replacement is the
``ProcessHistory`` capability that :meth:`ObservationalMemory.capability` returns. The memory
goes in a request-side ``CompactionPart``, which is pydantic-ai's convention for a summary that
replaces earlier messages: models receive it as framed user-voice text marked as historical
context, not in the system prompt, since memory is made from conversation and tool output.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    BinaryContent,
    CachePoint,
    CompactionPart,
    FileUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryFeedbackPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.toolsets import FunctionToolset

from om_api.client import AsyncOMClient
from om_api.integrations.memory_tools import AsyncMemoryTools
from om_api.integrations.recording import Recorded, SessionMemory
from om_api.schemas import (
    ContentPartWire,
    EntryIn,
    MessageWire,
    ToolCallWire,
)

__all__ = ["CONTEXT_ORIGIN", "ObservationalMemory", "Recorded", "to_entries"]

CONTEXT_ORIGIN = "observational-memory"
"""``CompactionPart.metadata["origin"]`` of the part holding the service's context."""


class ObservationalMemory(SessionMemory[AsyncOMClient]):
    """One om session as the memory of a pydantic-ai agent (``client``, ``session_id`` and the
    ``max_tokens`` budget as :class:`~om_api.integrations.recording.SessionMemory`'s).

    Every failure is the client's :class:`~om_api.client.OMClientError`, raised unchanged: in
    the history processor it fails the run (``NotFound`` for a session that was never created,
    ``InvalidRequest`` for a budget out of range, ``Unavailable`` once retries run out); from
    :meth:`record` it leaves the run's messages unrecorded or partly recorded, and calling
    ``record`` again with the same messages is safe.
    """

    def capability(self) -> ProcessHistory[Any]:
        """The capability to pass as ``Agent(capabilities=[...])``."""
        return ProcessHistory(self.process_history)

    def toolset(self) -> FunctionToolset[Any]:
        """``search_memory`` and ``recall_memory`` on this session, to pass as
        ``Agent(toolsets=[...])``: each answers in text, an API failure included (one line, so
        a missing detail never ends the run)."""
        named = AsyncMemoryTools(self.client, self.session_id).named()
        return FunctionToolset(
            [
                Tool(t.function, takes_ctx=False, name=t.name, description=t.description)
                for t in named
            ]
        )

    async def process_history(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        """The history for the next model request: the service's context (one read per model
        request, so a tool loop sees what the session holds now), then this run's messages.

        Messages of other runs (``run_id`` differs), this processor's context request of the
        previous step among them, are dropped: memory stands for them, so a run that was never
        recorded is not seen again. Kept from them are their
        system prompts (pydantic-ai adds an agent's system prompt only to a run without
        history) and the responses whose tool calls this run answers (a run resuming deferred
        tool calls): without its call, pydantic-ai drops a tool result as answering nothing.
        """
        run = ctx.run_id
        current = [m for m in messages if run is not None and m.run_id == run]
        earlier = [m for m in messages if run is None or m.run_id != run]
        answered = {
            p.tool_call_id
            for m in current
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        }
        calls = [
            m
            for m in earlier
            if isinstance(m, ModelResponse)
            and any(isinstance(p, ToolCallPart) and p.tool_call_id in answered for p in m.parts)
        ]
        carried: list[ModelRequestPart] = [
            p
            for m in earlier
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, SystemPromptPart)
        ]
        context = await self.client.context(self.session_id, max_tokens=self.max_tokens)
        text = context.as_text()
        if text:
            carried.append(CompactionPart(text, metadata={"origin": CONTEXT_ORIGIN}))
        return [*([ModelRequest(parts=carried)] if carried else []), *calls, *current]

    async def record(self, messages: Sequence[ModelMessage]) -> Recorded:
        """Append ``messages`` (usually ``result.new_messages()``) and request a flush.

        Entry ids are derived from the session, each message's ``run_id`` and its position in
        that run (:func:`to_entries`), so recording the same messages again, or a history that
        holds them, appends nothing twice. Wait for ``flush.job_id`` with
        ``client.wait_for_job`` when the next run must see the messages as observations; until
        then the context shows them as unobserved messages.
        """
        appended = await self.client.append(self.session_id, to_entries(self.session_id, messages))
        return Recorded(appended, await self.client.flush(self.session_id))


def to_entries(session_id: str, messages: Sequence[ModelMessage]) -> list[EntryIn]:
    """``messages`` as message entries with stable ids, in order.

    A request becomes one entry per user prompt, tool return and retry feedback; a response one
    assistant entry with its text and tool calls. System prompts, compaction summaries (this
    module's context among them) and thinking are not conversation and are left out. An id is
    a hash of the session, the message's ``run_id`` (its serialized form when it has none) and
    the entry's position among that run's entries: entry ids are unique per tenant, and a
    hash always fits the id pattern.
    """
    positions: Counter[str] = Counter()
    entries: list[EntryIn] = []
    for message in messages:
        run = message.run_id or ModelMessagesTypeAdapter.dump_json([message]).decode()
        for wire in _wire_messages(message):
            key = f"{session_id}\x00{run}\x00{positions[run]}"
            positions[run] += 1
            entry_id = "pai-" + hashlib.sha256(key.encode()).hexdigest()[:32]
            entries.append(EntryIn(id=entry_id, kind="message", message=wire))
    return entries


def _wire_messages(message: ModelMessage) -> list[MessageWire]:
    if isinstance(message, ModelResponse):
        text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
        calls = [
            ToolCallWire(id=p.tool_call_id, name=p.tool_name, arguments=p.args_as_dict())
            for p in message.parts
            if isinstance(p, ToolCallPart)
        ]
        return (
            [MessageWire(role="assistant", content=text, tool_calls=calls)] if text or calls else []
        )
    wires: list[MessageWire] = []
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            wires.append(MessageWire(role="user", content=_user_content(part.content)))
        elif isinstance(part, ToolReturnPart):
            wires.append(
                MessageWire(
                    role="tool",
                    content=part.model_response_str(wrap_if_error=False),
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    is_error=part.outcome in ERROR_OUTCOMES,
                )
            )
        elif isinstance(part, RetryFeedbackPart):
            wires.append(MessageWire(role="user", content=part.model_response()))
    return wires


def _user_content(content: str | Sequence[UserContent]) -> str | list[ContentPartWire]:
    if isinstance(content, str):
        return content
    parts: list[ContentPartWire] = []
    for item in content:
        if isinstance(item, str):
            parts.append(ContentPartWire(type="text", text=item))
        elif isinstance(item, TextContent):
            parts.append(ContentPartWire(type="text", text=item.content))
        elif isinstance(item, FileUrl):
            parts.append(ContentPartWire(type=item.kind, data={"url": item.url}))
        elif isinstance(item, BinaryContent):
            # The bytes stay out of the session: memory is text, and they may be large.
            parts.append(ContentPartWire(type=item.kind, data={"media_type": item.media_type}))
        elif not isinstance(item, CachePoint):
            parts.append(ContentPartWire(type=item.kind))
    return parts
