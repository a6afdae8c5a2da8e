"""Small builders for branches of session entries, shared by the core tests."""

from __future__ import annotations

from itertools import count
from typing import Any

from om_core.ledger.models import (
    Message,
    Observation,
    ObservationsDropped,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
    SessionEntry,
    ToolCall,
)

SESSION = "s1"


class Branch:
    """Appends entries to one linear branch, parent = previous entry."""

    def __init__(self, session_id: str = SESSION) -> None:
        self.session_id = session_id
        self.entries: list[SessionEntry] = []
        self._ids = count(1)

    def _add(self, **fields: Any) -> SessionEntry:
        entry_id = fields.pop("id", None) or f"e{next(self._ids)}"
        parent = self.entries[-1].id if self.entries else None
        entry = SessionEntry(id=entry_id, session_id=self.session_id, parent_id=parent, **fields)
        self.entries.append(entry)
        return entry

    def message(self, role: str, text: str = "", **extra: Any) -> SessionEntry:
        entry_id = extra.pop("id", None)
        return self._add(
            id=entry_id, kind="message", message=Message(role=role, content=text, **extra)
        )

    def user(self, text: str) -> SessionEntry:
        return self.message("user", text)

    def assistant(self, text: str) -> SessionEntry:
        return self.message("assistant", text)

    def call(self, call_id: str, name: str = "lookup", **arguments: Any) -> SessionEntry:
        return self.message(
            "assistant", "", tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),)
        )

    def result(self, call_id: str, text: str, name: str = "lookup") -> SessionEntry:
        return self.message("tool", text, tool_call_id=call_id, tool_name=name)

    def custom(self, data: dict[str, Any]) -> SessionEntry:
        return self._add(kind="custom", data=data)

    def observe(self, *observations: Observation, covers: str | None = None) -> SessionEntry:
        record = ObservationsRecorded(observations=observations, covers_up_to_id=covers)
        return self.custom(record.to_json_dict())

    def reflect(self, *reflections: Reflection, covers: str | None = None) -> SessionEntry:
        record = ReflectionsRecorded(reflections=reflections, covers_up_to_id=covers)
        return self.custom(record.to_json_dict())

    def drop(self, *ids: str, covers: str | None = None) -> SessionEntry:
        return self.custom(
            ObservationsDropped(observation_ids=ids, covers_up_to_id=covers).to_json_dict()
        )

    def compaction(self, summary: str, data: dict[str, Any]) -> SessionEntry:
        return self._add(kind="compaction", summary=summary, data=data)


def mid(n: int) -> str:
    """A deterministic memory id for test number ``n``."""
    return f"{n:012x}"


def obs(n: int, *sources: str, text: str | None = None, relevance: float = 0.5) -> Observation:
    return Observation(
        id=mid(n), text=text or f"fact {n}", source_entry_ids=sources, relevance=relevance
    )


def ref(n: int, *observation_ids: str, text: str | None = None) -> Reflection:
    return Reflection(id=mid(n), text=text or f"reflection {n}", observation_ids=observation_ids)
