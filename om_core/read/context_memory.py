"""The memory a context shows: which (:class:`MemorySelection`), and rendered beside a window of
recent messages (:class:`ContextMemory`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TypedDict

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import Observation, ObservationalMemoryLedger, SessionEntry
from om_core.ledger.projection import ObservationalMemoryProjection, project_ledger
from om_core.policy.limits import MAX_RENDERED_MEMORY_BYTES
from om_core.policy.redaction import normalize_secrets
from om_core.read.memory_fit import Policy
from om_core.read.render import MemoryPlan, ObservationLines, RenderedMemory
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


PLANS_KEPT = 8
"""Windows whose rendering plans a :class:`ContextMemory` keeps (a context uses one or two)."""


class ContextMemory:
    """The memory of one branch as a context renders it: folded once, projected per window.

    Built from the memory alone (the ledger, scope map, withheld ids, secrets and view), it
    is the reusable part of a context: beside a window of messages only the observations
    that window wholly shows are left out, so its rendering plan
    (:class:`~om_core.read.render.MemoryPlan`) is kept per such set and reused by every
    later window that leaves out the same ones (a message appended leaves out none).
    ``earlier``, a previous version of the same branch's memory, lends the rendered lines of
    the observations the two share, so a version that only added records costs what those
    records cost to render. Safe to share between threads: a plan computed twice at once is
    computed equal.
    """

    _lines: ObservationLines

    def __init__(
        self,
        entries: Sequence[SessionEntry],
        invalidated_ids: Iterable[str],
        secrets: Iterable[str],
        view: MemorySelection,
        earlier: ContextMemory | None = None,
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
        self._by_source: dict[str, list[Observation]] = {}
        # No source at all is wholly inside any window (as visible_observations has it).
        self._sourceless = frozenset(
            o.id for o in self._projection.observations if not o.source_entry_ids
        )
        for observation in self._projection.observations:
            for source in observation.source_entry_ids:
                self._by_source.setdefault(source, []).append(observation)
        prepared = earlier._lines if earlier is not None else None
        self._lines = ObservationLines(self._projection.observations, self.secrets, prepared)
        self._plans: dict[tuple[Policy, frozenset[str]], MemoryPlan] = {}
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Characters of its rendered lines (at least 1): what keeping it costs, roughly (the
        objects behind them hold a few times that)."""
        return max(1, self._lines.chars)

    def _hidden(self, window: Iterable[SessionEntry]) -> frozenset[str]:
        """Ids of the observations ``window`` shows whole (every source in it): those
        :func:`visible_observations` leaves out, found from the window's side."""
        window = list(window)
        # Mostly none: the window is the unobserved messages, which no observation cites yet.
        cited = [e.id for e in window if e.id in self._by_source]
        if not cited:
            return self._sourceless
        shown = {e.id for e in window}
        whole = {
            o.id
            for source in cited
            for o in self._by_source[source]
            if shown.issuperset(o.source_entry_ids)
        }
        return self._sourceless.union(whole)

    def _plan(self, window: Iterable[SessionEntry], policy: Policy) -> MemoryPlan:
        key = (policy, self._hidden(window))
        with self._lock:
            kept = self._plans.get(key)
        if kept is not None:
            return kept
        visible = tuple(o for o in self._projection.observations if o.id not in key[1])
        reflections, observations, outline = leaf_memory(
            self._scopes,
            self._projection.reflections,
            visible,
            from_=self._scope,
            include=self._include,
        )
        plan = MemoryPlan(reflections, observations, outline, self.secrets, policy, self._lines)
        with self._lock:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.pop(next(iter(self._plans)))
            return self._plans.setdefault(key, plan)

    def render(self, window: Iterable[SessionEntry], max_bytes: int | None = None) -> str:
        """Memory beside the messages ``window`` shows, cut to ``max_bytes``."""
        limit = MAX_RENDERED_MEMORY_BYTES if max_bytes is None else max_bytes
        return self._plan(window, "count").fitted(limit).text

    def render_reachable(
        self, window: Iterable[SessionEntry], max_bytes: int | None, page_from: str | None
    ) -> RenderedMemory:
        """As :meth:`render`, condensed (a reflection shown instead of the observations it
        covers) and what does not fit listed by recall id
        (:func:`~om_core.read.render.render_reachable_memory`)."""
        limit = MAX_RENDERED_MEMORY_BYTES if max_bytes is None else max_bytes
        return self._plan(window, "reachable").fitted(limit, page_from)
