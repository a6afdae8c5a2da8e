"""Build a small session over the API: messages, then one observation and one reflection
recorded as custom entries (what a worker would append), so reads have memory to show."""

from __future__ import annotations

from typing import Any

import httpx

OBS_ID = "0000000000a1"
OBS2_ID = "0000000000a2"
REF_ID = "0000000000b1"


def message(entry_id: str, role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": entry_id, "kind": "message", "message": {"role": role, "content": text, **extra}}


def conversation(count: int = 6, prefix: str = "m") -> list[dict[str, Any]]:
    roles = ("user", "assistant")
    return [
        message(f"{prefix}{i}", roles[i % 2], f"turn {i}: the deploy uses blue-green slots")
        for i in range(count)
    ]


def memory_entries(prefix: str) -> list[dict[str, Any]]:
    first, second = f"{prefix}0", f"{prefix}1"
    observed = {
        "type": "om.observations.recorded",
        "observations": [
            {
                "id": OBS_ID,
                "text": "User deploys with blue-green slots.",
                "sourceEntryIds": [first],
            },
            {"id": OBS2_ID, "text": "Assistant confirmed the slots.", "sourceEntryIds": [second]},
        ],
        "coversUpToId": second,
    }
    reflected = {
        "type": "om.reflections.recorded",
        "reflections": [
            {"id": REF_ID, "text": "Deploys are blue-green.", "observationIds": [OBS_ID, OBS2_ID]}
        ],
    }
    return [
        {"id": f"{prefix}-obs", "kind": "custom", "data": observed},
        {"id": f"{prefix}-ref", "kind": "custom", "data": reflected},
    ]


def seeded_session(client: httpx.Client, session_id: str, prefix: str, messages: int = 6) -> None:
    """Create ``session_id`` with ``messages`` messages (ids ``{prefix}0`` ...), then two
    observations (on the first two messages) and a reflection over them.

    Entry ids are unique across the whole store, so every test passes its own ``prefix``."""
    assert client.post("/v1/sessions", json={"id": session_id}).status_code == 201
    answer = client.post(
        f"/v1/sessions/{session_id}/entries",
        json={"entries": [*conversation(messages, prefix), *memory_entries(prefix)]},
    )
    assert answer.status_code == 201, answer.text
