"""The ledger fold: memory records on a branch -> observations, reflections, drops, coverage.

The fold is a pure left fold in branch order. A compaction entry whose ``data.memory`` is a
resumable snapshot replaces the state at that point, so folding may start from the latest one
and read only later entries; ``from_snapshot=False`` replays the records alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from om_core.ledger.models import (
    OBSERVATIONS_DROPPED,
    OBSERVATIONS_RECORDED,
    REFLECTIONS_RECORDED,
    FoldedMemory,
    Observation,
    ObservationalMemoryLedger,
    ObservationsDropped,
    ObservationsRecorded,
    Reflection,
    ReflectionsRecorded,
    SessionEntry,
)

Record = ObservationsRecorded | ReflectionsRecorded | ObservationsDropped
_T = TypeVar("_T", Observation, Reflection)
_RECORD_MODELS: dict[str, type[Record]] = {
    OBSERVATIONS_RECORDED: ObservationsRecorded,
    REFLECTIONS_RECORDED: ReflectionsRecorded,
    OBSERVATIONS_DROPPED: ObservationsDropped,
}


def parse_record(entry: SessionEntry) -> Record | None:
    """The memory record a custom entry carries, or ``None``.

    A malformed ``om.*`` payload is treated as no record at all: memory is only what validates.
    """
    return entry.record(_RECORD_MODELS)


def parse_snapshot(entry: SessionEntry) -> FoldedMemory | None:
    """The ``om.folded`` snapshot in a compaction entry's ``data.memory``, or ``None``."""
    if entry.kind != "compaction" or not isinstance(entry.data, dict):
        return None
    memory: Any = entry.data.get("memory")
    if not isinstance(memory, dict) or memory.get("type") != "om.folded":
        return None
    try:
        return FoldedMemory.model_validate(memory)
    except ValidationError:
        return None


@dataclass
class _Fold:
    """Mutable accumulator, so that a fold over n entries costs O(n)."""

    observations: dict[str, Observation] = field(default_factory=dict)
    reflections: dict[str, Reflection] = field(default_factory=dict)
    dropped: dict[str, None] = field(default_factory=dict)
    pending: dict[str, None] = field(default_factory=dict)
    observation_cursor: str | None = None
    reflection_cursor: str | None = None

    @classmethod
    def start(cls, ledger: ObservationalMemoryLedger) -> _Fold:
        return cls(
            observations={o.id: o for o in ledger.observations},
            reflections={r.id: r for r in ledger.reflections},
            dropped=dict.fromkeys(ledger.dropped_observation_ids),
            pending=dict.fromkeys(ledger.pending_reflection_observation_ids),
            observation_cursor=ledger.observation_covers_up_to_id,
            reflection_cursor=ledger.reflection_covers_up_to_id,
        )

    def apply(self, record: Record) -> None:
        if isinstance(record, ObservationsRecorded):
            for obs in record.observations:
                # First writer wins: ids are unique, a replayed record changes nothing.
                if obs.id not in self.observations:
                    self.observations[obs.id] = obs
                    self.pending[obs.id] = None
            if record.covers_up_to_id is not None:
                self.observation_cursor = record.covers_up_to_id
        elif isinstance(record, ReflectionsRecorded):
            for ref in record.reflections:
                self.reflections.setdefault(ref.id, ref)
            self.pending.clear()
            if record.covers_up_to_id is not None:
                self.reflection_cursor = record.covers_up_to_id
        else:
            for oid in record.observation_ids:
                if oid in self.observations:
                    self.dropped[oid] = None
                    self.pending.pop(oid, None)

    def finish(self) -> ObservationalMemoryLedger:
        return ObservationalMemoryLedger(
            observations=tuple(self.observations.values()),
            reflections=tuple(self.reflections.values()),
            dropped_observation_ids=tuple(self.dropped),
            observation_covers_up_to_id=self.observation_cursor,
            reflection_covers_up_to_id=self.reflection_cursor,
            pending_reflection_observation_ids=tuple(self.pending),
        )


def ledger_from_snapshot(snapshot: FoldedMemory) -> ObservationalMemoryLedger:
    """The ledger a resumable ``om.folded`` snapshot describes."""
    return ObservationalMemoryLedger(
        observations=snapshot.observations,
        reflections=snapshot.reflections,
        dropped_observation_ids=snapshot.dropped_observation_ids,
        observation_covers_up_to_id=snapshot.observation_covers_up_to_id,
        reflection_covers_up_to_id=snapshot.reflection_covers_up_to_id,
        pending_reflection_observation_ids=snapshot.pending_reflection_observation_ids or (),
    )


def latest_snapshot_index(entries: Sequence[SessionEntry]) -> int | None:
    """Index of the last compaction entry with a resumable snapshot, scanning from the end."""
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if entry.kind == "compaction":
            snapshot = parse_snapshot(entry)
            if snapshot is not None and snapshot.resumable:
                return index
    return None


def fold_ledger(
    entries: Sequence[SessionEntry],
    *,
    initial: ObservationalMemoryLedger | None = None,
    from_snapshot: bool = True,
) -> ObservationalMemoryLedger:
    """Fold a branch's memory records into an :class:`ObservationalMemoryLedger`.

    ``initial`` resumes a fold a store kept (``entries`` are then only the later ones).
    With ``from_snapshot`` the fold starts at the latest resumable compaction snapshot.
    Malformed records are ignored; the fold never raises for entry content.
    """
    start = 0
    state = _Fold.start(initial) if initial is not None else _Fold()
    if from_snapshot:
        index = latest_snapshot_index(entries)
        if index is not None:
            snapshot = parse_snapshot(entries[index])
            assert snapshot is not None
            state = _Fold.start(ledger_from_snapshot(snapshot))
            start = index + 1
    for position in range(start, len(entries)):
        record = parse_record(entries[position])
        if record is not None:
            state.apply(record)
    return state.finish()


def merge_ledgers(ledgers: Iterable[ObservationalMemoryLedger]) -> ObservationalMemoryLedger:
    """Id-keyed union of ledgers folded from separate branches (never their raw entries).

    The result is independent of the order of ``ledgers`` and merging a ledger with itself
    changes nothing: items are ordered by id, and an id dropped in any ledger is dropped.
    Coverage cursors are positional per branch, so the merged ledger carries none.
    """
    observations: dict[str, Observation] = {}
    reflections: dict[str, Reflection] = {}
    dropped: set[str] = set()
    for ledger in ledgers:
        for obs in ledger.observations:
            observations[obs.id] = _pick(observations.get(obs.id), obs)
        for ref in ledger.reflections:
            reflections[ref.id] = _pick(reflections.get(ref.id), ref)
        dropped.update(ledger.dropped_observation_ids)
    return ObservationalMemoryLedger(
        observations=tuple(observations[k] for k in sorted(observations)),
        reflections=tuple(reflections[k] for k in sorted(reflections)),
        dropped_observation_ids=tuple(sorted(dropped & observations.keys())),
    )


def _pick(current: _T | None, candidate: _T) -> _T:
    """Deterministic choice between two records with one id (ids should never collide)."""
    if current is None:
        return candidate
    a = current.model_dump_json()
    b = candidate.model_dump_json()
    return current if a <= b else candidate


def is_eligible_observation_source(entry: SessionEntry) -> bool:
    """True for ``message`` entries of role user, assistant or tool
    (:attr:`SessionEntry.is_eligible_observation_source`)."""
    return entry.is_eligible_observation_source


def eligible_observation_sources(entries: Iterable[SessionEntry]) -> list[SessionEntry]:
    """The entries an observer may read and cite, in branch order."""
    return [e for e in entries if is_eligible_observation_source(e)]


def unscanned_entries(
    entries: Sequence[SessionEntry], ledger: ObservationalMemoryLedger
) -> list[SessionEntry]:
    """Entries after the observation coverage cursor (all of them when there is none).

    A cursor that is not on the branch (the branch was forked before it) means nothing on
    this branch was scanned.
    """
    cursor = ledger.observation_covers_up_to_id
    if cursor is None:
        return list(entries)
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].id == cursor:
            return list(entries[index + 1 :])
    return list(entries)


def observations_uncovered_by_reflection(
    ledger: ObservationalMemoryLedger,
) -> tuple[Observation, ...]:
    """Active observations recorded after the last ``om.reflections.recorded`` entry."""
    by_id = ledger.observations_by_id
    dropped = ledger.dropped
    return tuple(
        by_id[oid]
        for oid in ledger.pending_reflection_observation_ids
        if oid in by_id and oid not in dropped
    )
