"""Synthetic branches for benchmarks: messages, tool runs and memory records."""

from __future__ import annotations

from typing import Any

from om_core.flush.workers.dropper import drop_lowest_relevance, observation_tokens
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    Message,
    Observation,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
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


# A long session the service has consolidated -------------------------------------------------

_PROJECTS = ("atlas", "borealis", "cobalt", "delta", "ember", "fjord", "granite", "harbor")
_STATUSES = ("resolved", "open", "blocked", "waiting on customer")


def chat_message(n: int, call_id: str) -> Message:
    """Message ``n`` of an agent chat about tickets (a cycle of four: user, tool call, tool
    result, answer), a few hundred characters each; ``call_id`` pairs the call and its result."""
    ticket = 1_000 + n // 4
    project = _PROJECTS[(n // 4) % len(_PROJECTS)]
    status = _STATUSES[(n // 4) % len(_STATUSES)]
    kind = n % 4
    if kind == 0:
        return Message(
            role="user",
            content=(
                f"Please look at ticket {ticket} in project {project}: the nightly export for "
                f"customer c-{ticket % 97} failed again with a timeout after the schema change. "
                "Can you check what happened and whether we need a fix before Friday's deadline?"
            ),
        )
    if kind == 1:
        return Message(
            role="assistant",
            content="Checking the ticket and the export logs.",
            tool_calls=(
                ToolCall(
                    id=call_id,
                    name="ticket",
                    arguments={"id": ticket, "project": project, "include": ["logs", "history"]},
                ),
            ),
        )
    if kind == 2:
        logs = ", ".join(
            f'"02:{m:02d} export batch {m} of customer c-{ticket % 97} took {m * 7 % 60} s"'
            for m in range(6)
        )
        return Message(
            role="tool",
            content=(
                f'{{"ticket": {ticket}, "project": "{project}", "status": "{status}", '
                f'"owner": "dev-{ticket % 13}", "logs": [{logs}]}}'
            ),
            tool_call_id=call_id,
            tool_name="ticket",
        )
    return Message(
        role="assistant",
        content=(
            f"Ticket {ticket} is {status}: the export for customer c-{ticket % 97} timed out "
            "because the new index was still building. I re-ran it and it finished in 41 s; no "
            "code change is needed, but index builds should move out of the export window."
        ),
    )


def new_messages(session_id: str, tag: str, count: int = 40) -> list[SessionEntry]:
    """``count`` chat messages whose content is the same for every ``tag`` (only the entry and
    tool-call ids differ, all of one length): the same new work for every flush."""
    return [
        SessionEntry(
            id=f"{session_id}-{tag}-m{j:03d}",
            session_id=session_id,
            kind="message",
            message=chat_message(j, f"{tag}-c{(j - j % 4) + 1:03d}"),
        )
        for j in range(count)
    ]


def consolidated_history(
    n: int,
    session_id: str,
    *,
    batch: int = 40,
    observations_per_record: int = 5,
    reflect_every: int = 10,
    pool_max_tokens: int = 20_000,
    pool_target_tokens: int = 10_000,
) -> list[SessionEntry]:
    """About ``n`` entries (whole cycles, at least ``n``) of a session the service has kept up
    with: every ``batch`` chat messages an ``om.observations.recorded`` record (observations
    citing messages of the batch, ``coversUpToId`` its last message); every ``reflect_every``
    records an ``om.reflections.recorded`` record citing the observations since the last one;
    and an ``om.observations.dropped`` record (lowest relevance first, down to
    ``pool_target_tokens``) whenever the active pool passed ``pool_max_tokens``, as the dropper
    keeps it. The history ends with the pool at most at ``pool_target_tokens`` (as just after
    a dropper pass), so later flushes have room before the dropper runs again."""
    entries: list[SessionEntry] = []
    active: dict[str, Observation] = {}
    pending: list[str] = []
    records = 0

    def add(
        kind: str, *, message: Message | None = None, data: dict[str, Any] | None = None
    ) -> str:
        entry_id = f"{session_id}-e{len(entries)}"
        entries.append(
            SessionEntry(id=entry_id, session_id=session_id, kind=kind, message=message, data=data)
        )
        return entry_id

    def drop_to_target() -> None:
        record = drop_lowest_relevance(tuple(active.values()), pool_target_tokens)
        if record is not None:
            add("custom", data=record.to_json_dict())
            for oid in record.observation_ids:
                del active[oid]

    m = 0  # messages so far: the chat's running index
    while len(entries) < n:
        batch_ids = [
            add("message", message=chat_message(i, f"c{i - i % 4 + 1}"))
            for i in range(m, m + batch)
        ]
        m += batch
        observations: list[Observation] = []
        for k in range(observations_per_record):
            cited = batch_ids[k * 7 % batch : k * 7 % batch + 3]
            ticket = 1_000 + (m - batch + k * 7) // 4
            observations.append(
                Observation(
                    id=create_memory_id(),
                    text=(
                        f"Ticket {ticket}: the nightly export of customer c-{ticket % 97} timed "
                        "out while an index was building; re-run fixed it, no code change."
                    ),
                    source_entry_ids=tuple(cited),
                    relevance=((records * 7 + k * 3) % 10) / 10,
                )
            )
        add(
            "custom",
            data=ObservationsRecorded(
                observations=tuple(observations), covers_up_to_id=batch_ids[-1]
            ).to_json_dict(),
        )
        records += 1
        active.update((o.id, o) for o in observations)
        pending.extend(o.id for o in observations)
        if records % reflect_every == 0:
            window = [oid for oid in pending if oid in active]
            if window:
                reflections = tuple(
                    Reflection(
                        id=create_memory_id(),
                        text=(
                            f"Exports keep timing out while indexes build ({len(group)} "
                            "tickets); moving index builds out of the export window fixes it."
                        ),
                        observation_ids=tuple(group),
                    )
                    for group in (window[: len(window) // 2], window[len(window) // 2 :])
                    if group
                )
                add(
                    "custom",
                    data=ReflectionsRecorded(
                        reflections=reflections, covers_up_to_id=entries[-1].id
                    ).to_json_dict(),
                )
            pending.clear()
        if observation_tokens(active.values()) > pool_max_tokens:
            drop_to_target()
    drop_to_target()
    return entries
