"""Exact-id recall: the raw messages behind an observation or reflection."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from om_core.ledger.fold import fold_ledger, is_eligible_observation_source
from om_core.ledger.ids import parse_memory_ref
from om_core.ledger.models import (
    ContentPart,
    Frozen,
    Message,
    Observation,
    ObservationalMemoryLedger,
    SessionEntry,
)
from om_core.ledger.projection import invalidated_memory
from om_core.policy.redaction import normalize_secrets, redact, redact_value
from om_core.read.window import tool_units
from om_core.scopes.shared import SharedScopeMemory

RecallReason = Literal["not_found", "revoked"]


class RecallResult(Frozen):
    """What a memory id rests on. ``found`` is false for unknown and revoked ids.

    For a reflection, supporting observations come from the full ledger: dropped ones are
    listed in ``dropped_supporting_observation_ids`` and still contribute their sources;
    ids the ledger does not know are in ``missing_supporting_observation_ids``.
    """

    id: str
    kind: Literal["observation", "reflection"] | None = None
    found: bool
    reason: RecallReason | None = None
    text: str | None = None
    dropped: bool = False
    source_entry_ids: tuple[str, ...] = ()
    missing_source_entry_ids: tuple[str, ...] = ()
    sources: tuple[SessionEntry, ...] = ()
    supporting_observations: tuple[Observation, ...] = ()
    supporting_observation_ids: tuple[str, ...] = ()
    dropped_supporting_observation_ids: tuple[str, ...] = ()
    missing_supporting_observation_ids: tuple[str, ...] = ()


def recall_memory(
    entries: Sequence[SessionEntry],
    memory_id: str,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
    *,
    ledger: ObservationalMemoryLedger | None = None,
) -> RecallResult:
    """Recall ``memory_id`` (bare 12-hex, ``om:`` or ``reflection:``) on one current branch.

    Raises :class:`~om_core.errors.InvalidMemoryIdError` before any lookup for a malformed
    id. A withheld id answers ``found=False, reason="revoked"`` with no derived text.
    Known secrets are redacted from every returned string.
    """
    bare = parse_memory_ref(memory_id)
    keys = normalize_secrets(secrets)
    folded = ledger if ledger is not None else fold_ledger(entries)
    if bare not in folded.observations_by_id and bare not in folded.reflections_by_id:
        # A snapshot that trimmed its pool forgot the record; the replayed records did not.
        replayed = fold_ledger(entries, from_snapshot=False)
        if bare in replayed.observations_by_id:
            obs = replayed.observations_by_id[bare]
            folded = ObservationalMemoryLedger(
                observations=(*folded.observations, obs),
                reflections=folded.reflections,
                dropped_observation_ids=tuple(
                    dict.fromkeys((*folded.dropped_observation_ids, obs.id))
                ),
            )
    bad_observations, bad_reflections = invalidated_memory(folded, invalidated_ids)
    if bare in folded.observations_by_id:
        if bare in bad_observations:
            return RecallResult(id=bare, kind="observation", found=False, reason="revoked")
        return _recall_observation(entries, folded, bare, keys)
    if bare in folded.reflections_by_id:
        if bare in bad_reflections:
            return RecallResult(id=bare, kind="reflection", found=False, reason="revoked")
        return _recall_reflection(entries, folded, bare, keys)
    return RecallResult(id=bare, found=False, reason="not_found")


def _recall_observation(
    entries: Sequence[SessionEntry],
    ledger: ObservationalMemoryLedger,
    memory_id: str,
    secrets: tuple[str, ...],
) -> RecallResult:
    obs = ledger.observations_by_id[memory_id]
    sources, missing = source_messages(entries, obs.source_entry_ids)
    return RecallResult(
        id=memory_id,
        kind="observation",
        found=True,
        text=redact(obs.text, secrets),
        dropped=memory_id in ledger.dropped,
        source_entry_ids=obs.source_entry_ids,
        missing_source_entry_ids=missing,
        sources=tuple(redact_entry(e, secrets) for e in sources),
    )


def _recall_reflection(
    entries: Sequence[SessionEntry],
    ledger: ObservationalMemoryLedger,
    memory_id: str,
    secrets: tuple[str, ...],
) -> RecallResult:
    ref = ledger.reflections_by_id[memory_id]
    known = [
        ledger.observations_by_id[i] for i in ref.observation_ids if i in ledger.observations_by_id
    ]
    source_ids = tuple(dict.fromkeys(s for o in known for s in o.source_entry_ids))
    sources, missing = source_messages(entries, source_ids)
    return RecallResult(
        id=memory_id,
        kind="reflection",
        found=True,
        text=redact(ref.text, secrets),
        source_entry_ids=source_ids,
        missing_source_entry_ids=missing,
        sources=tuple(redact_entry(e, secrets) for e in sources),
        supporting_observations=tuple(
            o.model_copy(update={"text": redact(o.text, secrets)}) for o in known
        ),
        supporting_observation_ids=ref.observation_ids,
        dropped_supporting_observation_ids=tuple(o.id for o in known if o.id in ledger.dropped),
        missing_supporting_observation_ids=tuple(
            i for i in ref.observation_ids if i not in ledger.observations_by_id
        ),
    )


def source_messages(
    entries: Sequence[SessionEntry], source_ids: Iterable[str]
) -> tuple[list[SessionEntry], tuple[str, ...]]:
    """The branch messages behind ``source_ids`` in branch order, with tool pairs kept whole.

    A cited tool call brings its results, a cited result brings its call. Returns the
    messages and the cited ids that are not on the branch.
    """
    wanted = set(source_ids)
    messages = [e for e in entries if is_eligible_observation_source(e)]
    picked: set[str] = set()
    for unit in tool_units(messages):
        if any(e.id in wanted for e in unit):
            picked.update(e.id for e in unit)
    found = [e for e in messages if e.id in picked]
    on_branch = {e.id for e in messages}
    missing = tuple(i for i in dict.fromkeys(source_ids) if i not in on_branch)
    return found, missing


def redact_entry(entry: SessionEntry, secrets: tuple[str, ...]) -> SessionEntry:
    """A copy of ``entry`` whose message, data and summary carry no known secret.

    Only payloads are redacted, never the models' own field names, so the copy still
    validates whatever the secrets are.
    """
    if not secrets:
        return entry
    update: dict[str, object] = {}
    if entry.message is not None:
        update["message"] = redact_message(entry.message, secrets)
    if entry.data is not None:
        update["data"] = redact_value(entry.data, secrets)
    if entry.summary is not None:
        update["summary"] = redact(entry.summary, secrets)
    return entry.model_copy(update=update)


def redact_message(message: Message, secrets: tuple[str, ...]) -> Message:
    """A copy of ``message`` with text, parts, tool calls and tool name redacted."""
    content: str | tuple[ContentPart, ...]
    if isinstance(message.content, str):
        content = redact(message.content, secrets)
    else:
        content = tuple(
            part.model_copy(
                update={
                    "text": None if part.text is None else redact(part.text, secrets),
                    "data": None if part.data is None else redact_value(part.data, secrets),
                }
            )
            for part in message.content
        )
    calls = tuple(
        call.model_copy(
            update={
                "id": redact(call.id, secrets) or "redacted",
                "name": redact(call.name, secrets) or "redacted",
                "arguments": redact_value(call.arguments, secrets),
            }
        )
        for call in message.tool_calls
    )
    return message.model_copy(
        update={
            "content": content,
            "tool_calls": calls,
            "tool_call_id": None
            if message.tool_call_id is None
            else redact(message.tool_call_id, secrets),
            "tool_name": None if message.tool_name is None else redact(message.tool_name, secrets),
        }
    )


def recall_shared_memory(
    shared: Sequence[SharedScopeMemory],
    memory_id: str,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> RecallResult:
    """Exact-id recall of shared memory, on the one foreign branch that recorded it.

    Only ids bound to a resolved shared scope are found; sources resolve on that branch alone
    (entry lists are never concatenated). Answers ``found=False, reason="not_found"`` when no
    shared scope holds the id. Raises :class:`~om_core.errors.InvalidMemoryIdError` for a
    malformed id before any lookup.
    """
    bare = parse_memory_ref(memory_id)
    for memory in shared:
        for branch in memory.branches:
            if bare in branch.memory_ids:
                return recall_memory(branch.entries, bare, invalidated_ids, secrets)
    return RecallResult(id=bare, found=False, reason="not_found")
