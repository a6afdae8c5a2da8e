"""Projections of a branch's ledger: full (audit), active (what may be rendered), folded."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import (
    FoldedMemory,
    Observation,
    ObservationalMemoryLedger,
    Reflection,
    SessionEntry,
)


@dataclass(frozen=True)
class ObservationalMemoryProjection:
    """What a branch remembers.

    ``full`` is the whole folded ledger (dropped records included, for audit and recall);
    ``observations`` / ``reflections`` are the active ones that survive drops and invalidation;
    ``folded`` is the ledger in its compaction-snapshot form.
    """

    full: ObservationalMemoryLedger
    observations: tuple[Observation, ...]
    reflections: tuple[Reflection, ...]
    invalidated_observation_ids: frozenset[str]
    invalidated_reflection_ids: frozenset[str]

    @property
    def folded(self) -> FoldedMemory:
        return snapshot_of(self.full)


def snapshot_of(ledger: ObservationalMemoryLedger, *, full_fold: bool = False) -> FoldedMemory:
    """The ledger as a resumable ``om.folded`` snapshot."""
    return FoldedMemory(
        full_fold=full_fold,
        observations=ledger.observations,
        reflections=ledger.reflections,
        dropped_observation_ids=ledger.dropped_observation_ids,
        observation_covers_up_to_id=ledger.observation_covers_up_to_id,
        reflection_covers_up_to_id=ledger.reflection_covers_up_to_id,
        pending_reflection_observation_ids=ledger.pending_reflection_observation_ids,
    )


def invalidated_memory(
    ledger: ObservationalMemoryLedger, invalidated_ids: Iterable[str]
) -> tuple[frozenset[str], frozenset[str]]:
    """Observation and reflection ids withheld by a set of invalidated ids.

    An observation is withheld when its id or any of its sources is invalidated; a
    reflection when its id is, or when it rests on a withheld observation.
    """
    blocked = frozenset(invalidated_ids)
    if not blocked:
        return frozenset(), frozenset()
    observations = frozenset(
        o.id
        for o in ledger.observations
        if o.id in blocked or not blocked.isdisjoint(o.source_entry_ids)
    )
    reflections = frozenset(
        r.id
        for r in ledger.reflections
        if r.id in blocked
        or not blocked.isdisjoint(r.observation_ids)
        or not observations.isdisjoint(r.observation_ids)
    )
    return observations, reflections


def project_ledger(
    ledger: ObservationalMemoryLedger, invalidated_ids: Iterable[str] = ()
) -> ObservationalMemoryProjection:
    """Project an already folded ledger (see :func:`build_projection`)."""
    bad_observations, bad_reflections = invalidated_memory(ledger, invalidated_ids)
    return ObservationalMemoryProjection(
        full=ledger,
        observations=tuple(o for o in ledger.active_observations if o.id not in bad_observations),
        reflections=tuple(r for r in ledger.reflections if r.id not in bad_reflections),
        invalidated_observation_ids=bad_observations,
        invalidated_reflection_ids=bad_reflections,
    )


def build_projection(
    entries: Sequence[SessionEntry], invalidated_ids: Iterable[str] = ()
) -> ObservationalMemoryProjection:
    """Fold ``entries`` (one current branch) and project it.

    ``invalidated_ids`` (entry or memory ids) withhold observations whose id or sources
    match and reflections resting on them; the full ledger keeps them for audit.
    """
    return project_ledger(fold_ledger(entries), invalidated_ids)
