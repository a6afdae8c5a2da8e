"""The memory a context shows: which (:class:`MemorySelection`), and rendered beside a window of
recent messages (:class:`ContextMemory`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypedDict

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import Observation, ObservationalMemoryLedger, Reflection, SessionEntry
from om_core.ledger.projection import ObservationalMemoryProjection, project_ledger
from om_core.policy.limits import MAX_RENDERED_MEMORY_BYTES
from om_core.policy.redaction import normalize_secrets
from om_core.read.render import RenderedMemory, render_observational_memory, render_reachable_memory
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeMemory, merge_shared_memory
from om_core.scopes.work_memory import Include, leaf_memory


def visible_observations(
    projection: ObservationalMemoryProjection, recent_ids: Iterable[str]
) -> tuple[Observation, ...]:
    """Active observations not wholly inside the recent window (those are shown verbatim)."""
    recent = frozenset(recent_ids)
    return tuple(o for o in projection.observations if not recent.issuperset(o.source_entry_ids))


class MemorySelection(TypedDict, total=False):
    """Which memory a context shows, as keywords of
    :func:`~om_core.read.context.build_context_blocks` and
    :func:`~om_core.read.context.build_context`.

    ``ledger`` is the branch already folded (a store keeps one), so nothing is folded again;
    without it ``entries`` are folded. ``scope_map`` is the work-scope map, folded from
    ``entries`` when not given (a store that reads from a snapshot on must pass it: snapshots
    do not carry scope records). ``shared`` (from
    :func:`~om_core.scopes.shared.resolve_shared_scopes`) joins for rendering only. With host
    work scopes memory is the current leaf's ``self+ancestors`` projection (Scope Outline,
    Reflections, Observations); ``scope`` / ``include`` pick another view, an unknown scope or
    mode raising the typed scope errors of
    :func:`~om_core.scopes.work_memory.project_work_memory`.
    """

    ledger: ObservationalMemoryLedger | None
    scope_map: WorkScopeMap | None
    shared: Sequence[SharedScopeMemory]
    scope: str | None
    include: Include


class ContextMemory:
    """The memory of one branch as a context renders it: folded once, projected per window."""

    def __init__(
        self,
        entries: Sequence[SessionEntry],
        invalidated_ids: Iterable[str],
        secrets: Iterable[str],
        view: MemorySelection,
    ) -> None:
        self.secrets = normalize_secrets(secrets)
        ledger = view.get("ledger")
        self.ledger = ledger if ledger is not None else fold_ledger(entries)
        scope_map = view.get("scope_map")
        self._memory, self._scopes = merge_shared_memory(
            self.ledger,
            scope_map if scope_map is not None else fold_work_scope_map(entries),
            view.get("shared", ()),
        )
        self._projection = project_ledger(self._memory, invalidated_ids)
        self._scope = view.get("scope")
        self._include = view.get("include", "self+ancestors")

    def _leaf(
        self, window: Iterable[SessionEntry]
    ) -> tuple[tuple[Reflection, ...], tuple[Observation, ...], tuple[str, ...] | None]:
        shown = {e.id for e in window}
        return leaf_memory(
            self._scopes,
            self._projection.reflections,
            visible_observations(self._projection, shown),
            from_=self._scope,
            include=self._include,
        )

    def render(self, window: Iterable[SessionEntry], max_bytes: int | None = None) -> str:
        """Memory beside the messages ``window`` shows, cut to ``max_bytes``."""
        reflections, observations, outline = self._leaf(window)
        limit = MAX_RENDERED_MEMORY_BYTES if max_bytes is None else max_bytes
        return render_observational_memory(
            reflections, observations, outline, secrets=self.secrets, max_bytes=limit
        )

    def render_reachable(
        self, window: Iterable[SessionEntry], max_bytes: int | None, page_from: str | None
    ) -> RenderedMemory:
        """As :meth:`render`, condensed (a reflection shown instead of the observations it
        covers) and what does not fit listed by recall id
        (:func:`~om_core.read.render.render_reachable_memory`)."""
        reflections, observations, outline = self._leaf(window)
        limit = MAX_RENDERED_MEMORY_BYTES if max_bytes is None else max_bytes
        return render_reachable_memory(
            reflections, observations, outline, self.secrets, max_bytes=limit, page_from=page_from
        )
