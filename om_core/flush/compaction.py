"""Fast compaction: render the memory already folded, keep the recent messages, no model call."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from om_core.errors import CapExceededError
from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import (
    CompactionEntry,
    FoldedMemory,
    ObservationalMemoryLedger,
    SessionEntry,
)
from om_core.ledger.projection import project_ledger, snapshot_of
from om_core.ledger.tokens import estimate_text_tokens
from om_core.policy.limits import MAX_FOLDED_PAYLOAD_BYTES
from om_core.read.render import render_observational_memory
from om_core.read.window import select_recent_message_entries
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.work_memory import leaf_memory
from om_core.settings import ObservationalMemorySettings, resolve_settings

STRATEGY_NAME = "observational-memory"


def folded_payload_bytes(memory: FoldedMemory) -> int:
    """Size of ``data.memory`` as compact UTF-8 JSON, the unit of the 512 KiB cap."""
    return len(json.dumps(memory.to_json_dict(), separators=(",", ":")).encode("utf-8"))


def create_folded_memory_details(
    ledger: ObservationalMemoryLedger,
    settings: ObservationalMemorySettings | None = None,
    *,
    max_bytes: int = MAX_FOLDED_PAYLOAD_BYTES,
) -> FoldedMemory:
    """The ``om.folded`` payload for a compaction entry.

    Normally the whole ledger (dropped records included). When the active pool exceeds
    ``context.observationsPoolMaxTokens`` it is a full fold (``fullFold: true``): dropped
    records are left out (their ids stay) and lowest-relevance observations are trimmed
    (listed as dropped) until the pool fits the token cap and the payload fits
    ``max_bytes`` (at most 512 KiB). Raises :class:`CapExceededError` when trimming every
    observation still does not fit.
    """
    resolved = settings or resolve_settings()
    max_bytes = min(max_bytes, MAX_FOLDED_PAYLOAD_BYTES)
    memory = snapshot_of(ledger)
    pool = sum(estimate_text_tokens(o.text) for o in ledger.active_observations)
    pool_cap = resolved.context.observations_pool_max_tokens
    if pool <= pool_cap and folded_payload_bytes(memory) <= max_bytes:
        return memory
    return _trimmed(ledger, pool_cap, max_bytes)


def _trimmed(ledger: ObservationalMemoryLedger, pool_cap: int, max_bytes: int) -> FoldedMemory:
    active = list(ledger.active_observations)
    # Cheapest to lose first: lowest relevance, and among equals the oldest.
    order = sorted(range(len(active)), key=lambda i: (active[i].relevance, i))
    keep = [True] * len(active)
    pool = sum(estimate_text_tokens(o.text) for o in active)
    size = _payload_size(ledger)
    for index in order:
        if pool <= pool_cap and size <= max_bytes:
            break
        keep[index] = False
        pool -= estimate_text_tokens(active[index].text)
        size -= len(json.dumps(active[index].to_json_dict(), separators=(",", ":"))) + 1
    kept = tuple(o for o, k in zip(active, keep, strict=True) if k)
    kept_ids = {o.id for o in kept}
    trimmed = tuple(o.id for o in active if o.id not in kept_ids)
    memory = FoldedMemory(
        full_fold=True,
        observations=kept,
        reflections=ledger.reflections,
        dropped_observation_ids=(*ledger.dropped_observation_ids, *trimmed),
        observation_covers_up_to_id=ledger.observation_covers_up_to_id,
        reflection_covers_up_to_id=ledger.reflection_covers_up_to_id,
        pending_reflection_observation_ids=tuple(
            i for i in ledger.pending_reflection_observation_ids if i in kept_ids
        ),
    )
    if folded_payload_bytes(memory) > max_bytes:
        raise CapExceededError(
            f"folded memory payload is {folded_payload_bytes(memory)} bytes after trimming "
            f"every observation; the cap is {max_bytes}"
        )
    return memory


def _payload_size(ledger: ObservationalMemoryLedger) -> int:
    """Upper bound of the trimmed payload's size before any observation is removed.

    It lists every active id as dropped already, so removing an observation only ever
    subtracts its record: the bound stays an upper bound while the loop runs.
    """
    active = ledger.active_observations
    draft = snapshot_of(ledger, full_fold=True).model_copy(
        update={
            "observations": active,
            "dropped_observation_ids": (
                *ledger.dropped_observation_ids,
                *(o.id for o in active),
            ),
        }
    )
    return folded_payload_bytes(draft)


@dataclass(frozen=True)
class CompactionResult:
    """A standard compaction: ``summary`` for the provider prefix, ``data`` for the entry."""

    summary: str
    data: CompactionEntry

    def to_entry(self, *, entry_id: str, session_id: str, parent_id: str | None) -> SessionEntry:
        """The compaction as a session entry (``kind="compaction"``)."""
        return SessionEntry(
            id=entry_id,
            session_id=session_id,
            parent_id=parent_id,
            kind="compaction",
            summary=self.summary,
            data=self.data.to_json_dict(),
        )


class ObservationalMemoryCompactionStrategy:
    """Compaction that renders existing memory as the summary; O(n), no provider call.

    Keeps the last ``keep_recent_entries`` messages (a tool call never separated from its
    results), summarizes everything before them, and stores the folded ledger in
    ``data.memory`` so later folds start from it.
    """

    def __init__(
        self,
        keep_recent_entries: int = 8,
        settings: ObservationalMemorySettings | None = None,
    ) -> None:
        if isinstance(keep_recent_entries, bool) or keep_recent_entries < 0:
            raise ValueError("keep_recent_entries must be a non-negative integer")
        self.keep_recent_entries = keep_recent_entries
        self.settings = settings or resolve_settings()

    def compact(
        self,
        entries: Sequence[SessionEntry],
        *,
        trigger: str = "manual",
        invalidated_ids: Iterable[str] = (),
        secrets: Iterable[str] = (),
        scope_map: WorkScopeMap | None = None,
        ledger: ObservationalMemoryLedger | None = None,
    ) -> CompactionResult:
        """Compact one current branch. Raises :class:`CapExceededError` (see
        :func:`create_folded_memory_details`) when the memory cannot fit its cap.

        With host work scopes the summary renders the current leaf's ``self+ancestors``
        projection, like the context block; ``data.memory`` still keeps every observation.
        ``ledger`` and ``scope_map`` default to the fold of ``entries``; a store that keeps
        them passes both with only the branch's tail as ``entries`` (enough to hold the
        recent window), so compacting never reads the history."""
        ledger = ledger if ledger is not None else fold_ledger(entries)
        kept = select_recent_message_entries(entries, self.keep_recent_entries)
        through = _through_entry_id(entries, kept)
        projection = project_ledger(ledger, invalidated_ids)
        reflections, observations, outline = leaf_memory(
            scope_map if scope_map is not None else fold_work_scope_map(entries),
            projection.reflections,
            projection.observations,
        )
        summary = render_observational_memory(reflections, observations, outline, secrets=secrets)
        return CompactionResult(
            summary=summary,
            data=CompactionEntry(
                through_entry_id=through,
                keep_entry_ids=tuple(e.id for e in kept),
                strategy=STRATEGY_NAME,
                trigger=trigger,
                memory=create_folded_memory_details(ledger, self.settings),
            ),
        )


def _through_entry_id(entries: Sequence[SessionEntry], kept: Sequence[SessionEntry]) -> str | None:
    """The last entry the summary covers: the one just before the first kept message."""
    if not kept:
        return entries[-1].id if entries else None
    first = kept[0].id
    index = next(i for i, e in enumerate(entries) if e.id == first)
    return entries[index - 1].id if index > 0 else None
