"""Synthetic branches for benchmarks: messages, tool runs and memory records."""

from __future__ import annotations

from om_core.ids import create_memory_id
from om_core.models import (
    Message,
    Observation,
    ObservationsRecorded,
    SessionEntry,
    ToolCall,
)


def branch(n: int, session_id: str = "bench", *, memory_every: int = 50) -> list[SessionEntry]:
    """``n`` entries: user/assistant turns, tool calls with results, and an observations
    record (five observations) every ``memory_every`` entries."""
    entries: list[SessionEntry] = []
    parent: str | None = None
    for i in range(n):
        entry_id = f"{session_id}-e{i}"
        if i % memory_every == memory_every - 1:
            record = ObservationsRecorded(
                observations=tuple(
                    Observation(
                        id=create_memory_id(),
                        text=f"User asked about ticket {j} and it was resolved.",
                        source_entry_ids=(f"{session_id}-e{j}",),
                        relevance=(j % 10) / 10,
                    )
                    for j in range(i - 5, i)
                ),
                covers_up_to_id=parent,
            )
            entry = SessionEntry(
                id=entry_id,
                session_id=session_id,
                parent_id=parent,
                kind="custom",
                data=record.to_json_dict(),
            )
        else:
            entry = SessionEntry(
                id=entry_id,
                session_id=session_id,
                parent_id=parent,
                kind="message",
                message=_message(i),
            )
        entries.append(entry)
        parent = entry_id
    return entries


def _message(i: int) -> Message:
    kind = i % 4
    if kind == 0:
        return Message(role="user", content=f"Please check ticket {i} and tell me its status.")
    if kind == 1:
        return Message(
            role="assistant",
            tool_calls=(ToolCall(id=f"call{i}", name="ticket", arguments={"id": i}),),
        )
    if kind == 2:
        return Message(
            role="tool",
            content=f'{{"ticket": {i}, "status": "resolved"}}',
            tool_call_id=f"call{i - 1}",
            tool_name="ticket",
        )
    return Message(role="assistant", content=f"Ticket {i - 3} is resolved.")
