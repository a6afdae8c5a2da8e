"""Erasure on a workspace, pure part: which entries of a workspace must lose their content when
the child sessions whose messages it copied are erased, and what they become.

A workspace holds copies of its children's messages (:mod:`om_core.ledger.funnel`) and the
memory it derived from everything on its branch. Erasing a child must leave none of the
child's text on the workspace: not in the copies, and not in any observation, reflection or
compaction summary written after the first erased copy (any of them may quote or condense
it). Memory recorded before the first erased copy cannot cite it, so it stays.

The rule (:func:`entries_to_blank`): from the first erased copy on, every erased copy and every
memory record or compaction becomes an **erased placeholder** (:func:`erased_placeholder`): the
same id, parent and position, no content, ``data.type`` :data:`ERASED_TYPE`. The branch keeps
its shape (no entry is re-parented, no position renumbered), the fold ignores placeholders,
and the observation cursor falls back to the last memory record left, so the workspace's next
flush re-observes every message still there after it: the memory the erased copies' neighbours
lost is written again from what remains. Work-scope records and the host's own entries stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from om_core.ledger.models import (
    OBSERVATIONS_DROPPED,
    OBSERVATIONS_RECORDED,
    REFLECTIONS_RECORDED,
    SessionEntry,
)

ERASED_TYPE: Final = "om.erased"
"""``data.type`` of an erased placeholder; carries nothing else."""

_MEMORY_RECORD_TYPES: Final = frozenset(
    {OBSERVATIONS_RECORDED, REFLECTIONS_RECORDED, OBSERVATIONS_DROPPED}
)


def is_derived_memory(entry: SessionEntry) -> bool:
    """Whether the entry holds text derived from other entries: an observation, reflection or
    drop record, or a compaction (its summary and folded snapshot)."""
    if entry.kind == "compaction":
        return True
    return entry.kind == "custom" and (entry.data or {}).get("type") in _MEMORY_RECORD_TYPES


def entries_to_blank(entries: Sequence[SessionEntry], erased_ids: Iterable[str]) -> list[str]:
    """Ids of the workspace ``entries`` (in seq order) that become placeholders when the copies
    ``erased_ids`` are erased: those copies, and every derived-memory entry from the first of
    them on (see the module docstring). Empty when none of ``erased_ids`` is among them."""
    erased = set(erased_ids)
    blank: list[str] = []
    started = False
    for entry in entries:
        started = started or entry.id in erased
        if started and (entry.id in erased or is_derived_memory(entry)):
            blank.append(entry.id)
    return blank


def erased_placeholder(entry: SessionEntry) -> SessionEntry:
    """``entry`` without its content: the same id, session, parent and time, kind ``custom``,
    ``data`` only ``{"type": ERASED_TYPE}``."""
    return SessionEntry(
        id=entry.id,
        session_id=entry.session_id,
        parent_id=entry.parent_id,
        kind="custom",
        created_at=entry.created_at,
        data={"type": ERASED_TYPE},
    )
