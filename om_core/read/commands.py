"""``om:status`` and ``om:view``: what a session remembers, counted and shown."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from om_core.ledger.fold import fold_ledger
from om_core.ledger.models import Frozen, ObservationalMemoryLedger, SessionEntry
from om_core.ledger.projection import project_ledger
from om_core.ledger.tokens import estimate_text_tokens
from om_core.read.context_memory import visible_observations
from om_core.read.render import render_observational_memory
from om_core.read.window import select_recent_message_entries
from om_core.scopes.index import WorkScopeMap, fold_work_scope_map
from om_core.scopes.shared import SharedScopeMemory, merge_shared_memory
from om_core.settings import ObservationalMemorySettings, resolve_settings

VIEW_USAGE = "Usage: /om:view [full]"


class MemoryStatus(Frozen):
    """Counts of one session's memory; token figures use :func:`estimate_text_tokens`."""

    recorded_observations: int
    dropped_observations: int
    active_observations: int
    visible_observations: int
    recorded_reflections: int
    visible_reflections: int
    active_pool_tokens: int
    visible_pool_tokens: int
    pool_max_tokens: int
    in_flight: bool = False
    last_error: str | None = None

    def render(self) -> str:
        """The status as the lines ``om:status`` prints."""
        lines = [
            f"observations: {self.recorded_observations} recorded, "
            f"{self.dropped_observations} dropped, {self.active_observations} active, "
            f"{self.visible_observations} visible",
            f"reflections: {self.recorded_reflections} recorded, "
            f"{self.visible_reflections} visible",
            f"pool tokens: {self.active_pool_tokens} active, {self.visible_pool_tokens} visible "
            f"(max {self.pool_max_tokens})",
        ]
        if self.in_flight:
            lines.append("runtime: flush in flight")
        if self.last_error:
            lines.append(f"last error: {self.last_error}")
        return "\n".join(lines)


def memory_status(
    entries: Sequence[SessionEntry],
    settings: ObservationalMemorySettings | None = None,
    invalidated_ids: Iterable[str] = (),
    *,
    in_flight: bool = False,
    last_error: str | None = None,
    ledger: ObservationalMemoryLedger | None = None,
) -> MemoryStatus:
    """Count recorded, dropped, active and visible memory on one branch (session-local).

    ``last_error`` must already be redacted (the runtime keeps it so). Pass ``ledger`` when
    the branch is already folded (a store keeps it); ``entries`` then need only cover the
    recent window.
    """
    resolved = settings or resolve_settings()
    ledger = ledger if ledger is not None else fold_ledger(entries)
    projection = project_ledger(ledger, invalidated_ids)
    recent = select_recent_message_entries(
        entries, resolved.context.recent_messages, resolved.context.recent_message_max_tokens
    )
    visible = visible_observations(projection, (e.id for e in recent))
    return MemoryStatus(
        recorded_observations=len(ledger.observations),
        dropped_observations=len(ledger.dropped),
        active_observations=len(ledger.active_observations),
        visible_observations=len(visible),
        recorded_reflections=len(ledger.reflections),
        visible_reflections=len(projection.reflections),
        active_pool_tokens=sum(estimate_text_tokens(o.text) for o in ledger.active_observations),
        visible_pool_tokens=sum(estimate_text_tokens(o.text) for o in visible),
        pool_max_tokens=resolved.context.observations_pool_max_tokens,
        in_flight=in_flight,
        last_error=last_error,
    )


def memory_view(
    entries: Sequence[SessionEntry],
    mode: str = "visible",
    settings: ObservationalMemorySettings | None = None,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
    shared: Sequence[SharedScopeMemory] = (),
    *,
    ledger: ObservationalMemoryLedger | None = None,
    scope_map: WorkScopeMap | None = None,
) -> str:
    """Render visible memory (default) or all active recorded memory (``mode="full"``).

    ``shared`` (resolved shared scopes) joins the view; ``memory_status`` stays local.
    Pass ``ledger`` and ``scope_map`` when the branch is already folded; ``entries`` then need
    only cover the recent window. Any other mode returns the usage line
    ``Usage: /om:view [full]``.
    """
    if mode not in ("visible", "full"):
        return VIEW_USAGE
    resolved = settings or resolve_settings()
    ledger, _ = merge_shared_memory(
        ledger if ledger is not None else fold_ledger(entries),
        scope_map if scope_map is not None else fold_work_scope_map(entries),
        shared,
    )
    projection = project_ledger(ledger, invalidated_ids)
    observations = projection.observations
    if mode == "visible":
        recent = select_recent_message_entries(
            entries, resolved.context.recent_messages, resolved.context.recent_message_max_tokens
        )
        observations = visible_observations(projection, (e.id for e in recent))
    text = render_observational_memory(projection.reflections, observations, secrets=secrets)
    return text or "(no observational memory yet)"
