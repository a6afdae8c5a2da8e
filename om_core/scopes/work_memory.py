"""Work-memory projection: the observations and reflections a work-scope query selects.

Decisions this module makes (the wire format leaves them open):

* Without host scopes the index is off: the map holds only ``session`` and every query on it
  returns the whole active pool (no outline), whatever ``include`` and ``kinds`` say.
* Once a host scope exists, memory is visible only through explicit binds. Memory recorded
  before the first scope (or unbound later) is not implicitly part of ``session``; a host that
  wants it everywhere binds it to ``session``, which is an ancestor of every leaf. This keeps
  ``unbind`` meaning "hide" and keeps the full ledger out of the context prefix.
* ``kinds`` filters the selected scopes by kind; ``None`` or empty means no filter. The
  ``session`` root has no kind, so a kind filter leaves it out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

from om_core.errors import InvalidScopeInputError
from om_core.ledger.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX
from om_core.ledger.models import Frozen, Observation, ObservationalMemoryLedger, Reflection
from om_core.scopes.index import WorkScope, WorkScopeMap
from om_core.scopes.records import check_scope_id

Include = Literal["self", "self+ancestors", "self+descendants", "lineage"]
Closed = Literal["hide", "include"]
INCLUDE_MODES: tuple[str, ...] = get_args(Include)
CLOSED_MODES: tuple[str, ...] = get_args(Closed)


class OutlineItem(Frozen):
    """One scope of a projection's outline."""

    id: str
    kind: str | None = None
    label: str | None = None
    status: Literal["open", "closed"] = "open"
    depth: int = 0

    @property
    def line(self) -> str:
        """The item as one markdown list line, indented by depth."""
        text = f"{'  ' * self.depth}- {self.id}"
        if self.kind:
            text += f" [{self.kind}]"
        if self.label:
            text += f": {self.label}"
        if self.status == "closed":
            text += " (closed)"
        return text


class WorkMemoryProjection(Frozen):
    """Filtered memory: observations (record order), reflections, and the selected scopes."""

    observations: tuple[Observation, ...] = ()
    reflections: tuple[Reflection, ...] = ()
    outline: tuple[OutlineItem, ...] = ()

    @property
    def outline_lines(self) -> tuple[str, ...]:
        """The outline as lines for :func:`om_core.read.render.render_observational_memory`."""
        return tuple(item.line for item in self.outline)


def has_host_scopes(scope_map: WorkScopeMap) -> bool:
    """True while any host scope exists (open or closed); the runtime then skips the dropper."""
    return scope_map.has_host_scopes


def select_scopes(
    scope_map: WorkScopeMap,
    from_: str,
    include: str,
    closed: str = "hide",
    kinds: Iterable[str] | None = None,
) -> tuple[WorkScope, ...]:
    """The scopes a query selects, ancestors first, then ``from_``, then descendants.

    Raises :class:`~om_core.errors.InvalidScopeInputError` for a bad id, ``include`` or
    ``closed``, and :class:`~om_core.errors.UnknownScopeError` when ``from_`` is not in the map.
    """
    check_scope_id(from_, "from scope")
    if include not in INCLUDE_MODES:
        raise InvalidScopeInputError(f"include must be one of {INCLUDE_MODES}, got {include!r}")
    if closed not in CLOSED_MODES:
        raise InvalidScopeInputError(f"closed must be one of {CLOSED_MODES}, got {closed!r}")
    lineage = scope_map.lineage(from_)
    ids: tuple[str, ...]
    if include == "self":
        ids = (from_,)
    elif include == "self+ancestors":
        ids = lineage
    elif include == "self+descendants":
        ids = (from_, *scope_map.descendants(from_))
    else:
        ids = (*lineage, *scope_map.descendants(from_))
    # Closed ancestors of from_ stay: the work under them is still in progress.
    ancestors = frozenset(lineage[:-1])
    wanted_kinds = frozenset(kinds or ())
    selected: list[WorkScope] = []
    for scope_id in ids:
        scope = scope_map.scopes_by_id[scope_id]
        if closed == "hide" and scope.status == "closed" and scope.id not in ancestors:
            continue
        if wanted_kinds and scope.kind not in wanted_kinds:
            continue
        selected.append(scope)
    return tuple(selected)


def project_work_memory(
    ledger: ObservationalMemoryLedger,
    scope_map: WorkScopeMap,
    *,
    from_: str,
    include: str,
    closed: str = "hide",
    kinds: Iterable[str] | None = None,
) -> WorkMemoryProjection:
    """Filter a ledger's active observations and its reflections through a scope query.

    ``include`` is ``self``, ``self+ancestors``, ``self+descendants`` or ``lineage``
    (ancestors, self and descendants); ``closed="hide"`` (default) leaves closed scopes out
    except closed ancestors of ``from_``. Memory is selected when it is bound to a selected
    scope. Without host scopes the whole active pool is returned (see the module notes).
    Pass a ledger that already had invalidation applied to withhold revoked memory.

    Raises :class:`~om_core.errors.InvalidScopeInputError` for a bad id or mode and
    :class:`~om_core.errors.UnknownScopeError` for a ``from_`` the map lacks.
    """
    scopes = select_scopes(scope_map, from_, include, closed, kinds)
    if not scope_map.has_host_scopes:
        return WorkMemoryProjection(
            observations=ledger.active_observations, reflections=ledger.reflections
        )
    refs: set[str] = set()
    for scope in scopes:
        refs.update(scope_map.refs(scope.id))
    return WorkMemoryProjection(
        observations=tuple(
            o for o in ledger.active_observations if f"{OBSERVATION_REF_PREFIX}{o.id}" in refs
        ),
        reflections=tuple(
            r for r in ledger.reflections if f"{REFLECTION_REF_PREFIX}{r.id}" in refs
        ),
        outline=tuple(
            OutlineItem(id=s.id, kind=s.kind, label=s.label, status=s.status, depth=s.depth)
            for s in scopes
        ),
    )


def leaf_memory(
    scope_map: WorkScopeMap,
    reflections: Iterable[Reflection],
    observations: Iterable[Observation],
    *,
    from_: str | None = None,
    include: Include = "self+ancestors",
) -> tuple[tuple[Reflection, ...], tuple[Observation, ...], tuple[str, ...] | None]:
    """The ``include`` view from ``from_`` (default: the current leaf) of visible memory.

    Context blocks and the compaction summary render this, so the full ledger never rides into
    the prefix while the folded payload keeps everything. Without host scopes the input comes
    back unchanged with no outline (``None``). With the defaults it never raises (the leaf is
    always in the map); an explicit ``from_`` or ``include`` fails as
    :func:`project_work_memory` does.
    """
    reflections, observations = tuple(reflections), tuple(observations)
    if not scope_map.has_host_scopes:
        if from_ is not None or include != "self+ancestors":
            # Only validates: without host scopes every query sees the whole active pool.
            project_work_memory(
                ObservationalMemoryLedger(),
                scope_map,
                from_=from_ or scope_map.leaf,
                include=include,
            )
        return reflections, observations, None
    view = project_work_memory(
        ObservationalMemoryLedger(observations=observations, reflections=reflections),
        scope_map,
        from_=from_ if from_ is not None else scope_map.leaf,
        include=include,
    )
    return view.reflections, view.observations, view.outline_lines
