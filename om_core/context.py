"""Context blocks for the next provider turn: memory, then the recent exact messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from om_core.ledger import fold_ledger
from om_core.models import ContextBlock, Observation, ObservationalMemoryLedger, SessionEntry
from om_core.projection import ObservationalMemoryProjection, project_ledger
from om_core.render import render_observational_memory
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeMemory, merge_shared_memory
from om_core.scopes.work_memory import Include, leaf_memory
from om_core.settings import ObservationalMemorySettings, resolve_settings
from om_core.window import render_recent_message_window, select_recent_message_entries

MEMORY_BLOCK_ID = "observational-memory"
RECENT_BLOCK_ID = "recent-messages"


def visible_observations(
    projection: ObservationalMemoryProjection, recent_ids: Iterable[str]
) -> tuple[Observation, ...]:
    """Active observations not wholly inside the recent window (those are shown verbatim)."""
    recent = frozenset(recent_ids)
    return tuple(o for o in projection.observations if not recent.issuperset(o.source_entry_ids))


def build_context_blocks(
    entries: Sequence[SessionEntry],
    settings: ObservationalMemorySettings | None = None,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
    *,
    ledger: ObservationalMemoryLedger | None = None,
    scope_map: WorkScopeMap | None = None,
    shared: Sequence[SharedScopeMemory] = (),
    scope: str | None = None,
    include: Include = "self+ancestors",
) -> tuple[ContextBlock, ContextBlock]:
    """Render the ``observational-memory`` and ``recent-messages`` blocks of one branch.

    ``entries`` is the current branch (at least from the latest snapshot on, and covering
    the recent window); pass ``ledger`` when it is already folded (a store keeps one) so
    nothing is folded again. Both blocks are always returned; their text may be empty.

    With host work scopes the memory block renders the current leaf's ``self+ancestors``
    projection (Scope Outline, Reflections, Observations). The scope map is folded from
    ``entries`` unless ``scope_map`` is given (a store that reads from a snapshot on must
    pass it: snapshots do not carry scope records). ``shared`` (from
    :func:`~om_core.scopes.shared.resolve_shared_scopes`) joins for rendering only.
    ``scope`` / ``include`` pick another view than the leaf's ``self+ancestors``; an unknown
    scope or mode raises the typed scope errors of
    :func:`~om_core.scopes.work_memory.project_work_memory`.
    """
    resolved = settings or resolve_settings()
    recent = select_recent_message_entries(
        entries,
        resolved.context.recent_messages,
        resolved.context.recent_message_max_tokens,
    )
    recent_text, recent_ids = render_recent_message_window(recent, secrets)
    memory, scopes = merge_shared_memory(
        ledger if ledger is not None else fold_ledger(entries),
        scope_map if scope_map is not None else fold_work_scope_map(entries),
        shared,
    )
    projection = project_ledger(memory, invalidated_ids)
    reflections, observations, outline = leaf_memory(
        scopes,
        projection.reflections,
        visible_observations(projection, recent_ids),
        from_=scope,
        include=include,
    )
    memory_text = render_observational_memory(reflections, observations, outline, secrets=secrets)
    return (
        ContextBlock(id=MEMORY_BLOCK_ID, text=memory_text),
        ContextBlock(id=RECENT_BLOCK_ID, text=recent_text, entry_ids=recent_ids),
    )
