"""Entry factories shared by the store tests (plain helpers, not fixtures)."""

from __future__ import annotations

from typing import Any

from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    Message,
    Observation,
    ObservationsDropped,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
    SessionEntry,
)


def message(
    entry_id: str,
    session_id: str = "s1",
    text: str = "hello",
    *,
    role: str = "user",
    parent_id: str | None = None,
) -> SessionEntry:
    return SessionEntry.model_validate(
        {
            "id": entry_id,
            "sessionId": session_id,
            "parentId": parent_id,
            "kind": "message",
            "message": {"role": role, "content": text},
        }
    )


def custom(entry_id: str, session_id: str, data: dict[str, Any]) -> SessionEntry:
    """A ``custom`` entry carrying ``data``."""
    return SessionEntry(id=entry_id, session_id=session_id, kind="custom", data=data)


def observations(
    entry_id: str, sources: list[str], covers: str, session_id: str = "s1"
) -> tuple[SessionEntry, list[str]]:
    """An ``om.observations.recorded`` entry with one observation per source; returns its ids."""
    recorded = ObservationsRecorded(
        observations=tuple(
            Observation(id=create_memory_id(), text=f"fact from {s}", source_entry_ids=(s,))
            for s in sources
        ),
        covers_up_to_id=covers,
    )
    return (
        custom(entry_id, session_id, recorded.to_json_dict()),
        [o.id for o in recorded.observations],
    )


def reflections(
    entry_id: str, observation_ids: list[str], covers: str, session_id: str = "s1"
) -> SessionEntry:
    recorded = ReflectionsRecorded(
        reflections=(
            Reflection(
                id=create_memory_id(), text="a pattern", observation_ids=tuple(observation_ids)
            ),
        ),
        covers_up_to_id=covers,
    )
    return custom(entry_id, session_id, recorded.to_json_dict())


def dropped(entry_id: str, observation_ids: list[str], session_id: str = "s1") -> SessionEntry:
    record = ObservationsDropped(observation_ids=tuple(observation_ids))
    return custom(entry_id, session_id, record.to_json_dict())


def assistant(entry_id: str, session_id: str = "s1", text: str = "ok") -> SessionEntry:
    return SessionEntry(
        id=entry_id,
        session_id=session_id,
        kind="message",
        message=Message(role="assistant", content=text),
    )
