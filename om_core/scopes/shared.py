"""Shared work scopes: read memory other sessions bound to one scope, under owner grants.

Each shared scope names an owner session whose branch is the only grant authority: its
``om.scope.granted`` / ``om.scope.revoked`` records decide who may read and contribute (a grant
is symmetric read+write); grant records on any other branch are inert. Every resolve re-reads
the owner branch, so a revocation lands on the next read. Branches are folded separately with
:func:`~om_core.ledger.fold.fold_ledger` and unioned by id with
:func:`~om_core.ledger.fold.merge_ledgers`; raw entry lists are never concatenated, because coverage
cursors and projection boundaries are positional per branch.

Decisions this module makes (the wire format leaves them open):

* The owner is implicitly authorized on its own scopes (it is the grant authority).
* The reader's own branch is never read here: local memory stays in the local ledger, and the
  result holds only foreign memory, so a local folded payload never absorbs it.
* A granted branch that cannot be read (the callback raises, returns something that is not a
  sequence of entries, or returns another session's entries) contributes nothing; only an
  unreadable owner branch denies the whole scope (``unreachable``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from om_core.ledger.fold import fold_ledger, merge_ledgers
from om_core.ledger.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX
from om_core.ledger.models import Frozen, ObservationalMemoryLedger, SessionEntry
from om_core.scopes.index import ScopeBinding, WorkScopeMap, fold_work_scope_map
from om_core.scopes.records import is_principal_id, is_scope_id

DenialReason = Literal[
    "invalid_config", "not_opened", "unreachable", "unknown", "absent", "revoked"
]
"""Why a shared scope was denied.

``invalid_config``: a bad scope id, owner id or callback; ``not_opened``: the reader has not
opened the scope in its own branch; ``unreachable``: the owner branch cannot be read;
``unknown``: the owner branch never opened the scope; ``absent``: the reader was never granted;
``revoked``: the reader's grant was revoked.
"""


@dataclass(frozen=True)
class SharedScopeConfig:
    """One shared scope: its owner session and the host's ``entries(session_id)`` callback.

    The callback is the store and tenant boundary: the core checks grants, it cannot verify that
    another branch belongs to the same tenant. Keep it inside one ownership scope.
    """

    owner_session_id: str
    entries: Callable[[str], Sequence[SessionEntry]]


class SharedScopeAccessEvent(Frozen):
    """One access decision, reported to ``on_access`` whether granted or denied."""

    scope_id: str
    owner_session_id: str
    principal_id: str
    granted: bool
    reason: DenialReason | None = None
    branches: int = 0
    observations: int = 0
    reflections: int = 0


class SharedBranch(Frozen):
    """A foreign branch that contributed: its session id, the bare memory ids it shared, and
    its entries (for exact-id source recall on that branch only)."""

    session_id: str
    memory_ids: tuple[str, ...]
    entries: tuple[SessionEntry, ...]


class SharedScopeMemory(Frozen):
    """Foreign memory bound to one scope, from every readable owner/granted branch.

    ``ledger`` holds only the bound observations and reflections (dropped ones flagged as in
    their branch); ``refs`` are the refs bound to the scope on those branches.
    """

    scope_id: str
    owner_session_id: str
    ledger: ObservationalMemoryLedger
    refs: tuple[str, ...]
    branches: tuple[SharedBranch, ...]


def _read(config: SharedScopeConfig, session_id: str) -> tuple[SessionEntry, ...] | None:
    """A branch, or ``None`` when it cannot be read or holds another session's entries."""
    try:
        entries = config.entries(session_id)
    except Exception:
        # Any failure of the host callback fails closed: nothing from that branch is read.
        return None
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        return None
    branch = tuple(entries)
    for entry in branch:
        if not isinstance(entry, SessionEntry) or entry.session_id != session_id:
            return None
    return branch


def _bound_ledger(
    ledger: ObservationalMemoryLedger, refs: frozenset[str]
) -> ObservationalMemoryLedger:
    observations = tuple(
        o for o in ledger.observations if f"{OBSERVATION_REF_PREFIX}{o.id}" in refs
    )
    kept = {o.id for o in observations}
    return ObservationalMemoryLedger(
        observations=observations,
        reflections=tuple(
            r for r in ledger.reflections if f"{REFLECTION_REF_PREFIX}{r.id}" in refs
        ),
        dropped_observation_ids=tuple(i for i in ledger.dropped_observation_ids if i in kept),
    )


def resolve_shared_scopes(
    *,
    scopes: Mapping[str, SharedScopeConfig] | None,
    principal_id: str,
    scope_map: WorkScopeMap,
    on_access: Callable[[SharedScopeAccessEvent], None] | None = None,
) -> tuple[SharedScopeMemory, ...]:
    """Resolve every configured shared scope for ``principal_id`` (the reader's session id).

    For each scope, in the mapping's order: the reader must have opened it in its own branch
    (``scope_map``); the owner branch must be readable and must have opened it; the reader must
    be the owner or currently granted there. Then the owner and every granted branch other
    than the reader's are read and folded separately, and only ids bound to that exact scope on
    each branch are kept and unioned. Denied scopes are left out of the result; ``on_access``
    hears every decision. It never raises for branch content or callback failures; an
    exception raised by ``on_access`` itself propagates.
    """
    resolved: list[SharedScopeMemory] = []
    for scope_id, config in (scopes or {}).items():
        outcome = _resolve(scope_id, config, principal_id, scope_map)
        if on_access is not None:
            on_access(_access_event(scope_id, config, principal_id, outcome))
        if isinstance(outcome, SharedScopeMemory):
            resolved.append(outcome)
    return tuple(resolved)


def _resolve(
    scope_id: str, config: SharedScopeConfig, principal_id: str, scope_map: WorkScopeMap
) -> SharedScopeMemory | DenialReason:
    """One shared scope for the reader: its memory, or why it is denied (the checks in the
    order :func:`resolve_shared_scopes` states)."""
    if not isinstance(config, SharedScopeConfig) or not _valid(scope_id, config, principal_id):
        return "invalid_config"
    if scope_map.get(scope_id) is None:
        return "not_opened"
    owner = config.owner_session_id
    owner_entries = _read(config, owner)
    if owner_entries is None:
        return "unreachable"
    owner_map = fold_work_scope_map(owner_entries)
    if owner_map.get(scope_id) is None:
        return "unknown"
    grant = owner_map.grants_by_scope.get(scope_id)
    granted = grant.principal_ids if grant is not None else ()
    if principal_id != owner and principal_id not in granted:
        revoked = grant is not None and principal_id in grant.revoked_principal_ids
        return "revoked" if revoked else "absent"
    return _collect(scope_id, config, owner_entries, owner_map, granted, principal_id)


def _valid(scope_id: str, config: SharedScopeConfig, principal_id: str) -> bool:
    """Well-formed scope, owner and reader ids, and a callable to read branches with."""
    return (
        is_scope_id(scope_id)
        and is_principal_id(config.owner_session_id)
        and callable(config.entries)
        and is_principal_id(principal_id)
    )


def _access_event(
    scope_id: str,
    config: SharedScopeConfig,
    principal_id: str,
    outcome: SharedScopeMemory | DenialReason,
) -> SharedScopeAccessEvent:
    """What ``on_access`` hears of one decision."""
    owner = config.owner_session_id if isinstance(config, SharedScopeConfig) else ""
    memory = outcome if isinstance(outcome, SharedScopeMemory) else None
    return SharedScopeAccessEvent(
        scope_id=scope_id,
        owner_session_id=owner,
        principal_id=principal_id,
        granted=memory is not None,
        reason=None if isinstance(outcome, SharedScopeMemory) else outcome,
        branches=len(memory.branches) if memory else 0,
        observations=len(memory.ledger.active_observations) if memory else 0,
        reflections=len(memory.ledger.reflections) if memory else 0,
    )


def _collect(
    scope_id: str,
    config: SharedScopeConfig,
    owner_entries: tuple[SessionEntry, ...],
    owner_map: WorkScopeMap,
    granted: Sequence[str],
    principal_id: str,
) -> SharedScopeMemory:
    owner = config.owner_session_id
    ledgers: list[ObservationalMemoryLedger] = []
    refs: dict[str, None] = {}
    branches: list[SharedBranch] = []
    for session_id in sorted({owner, *granted} - {principal_id}):
        read = owner_entries if session_id == owner else _read(config, session_id)
        if read is None:
            continue
        entries = read
        branch_map = owner_map if session_id == owner else fold_work_scope_map(entries)
        bound = branch_map.refs(scope_id)
        if not bound:
            continue
        shared = _bound_ledger(fold_ledger(entries), bound)
        ledgers.append(shared)
        refs.update(dict.fromkeys(sorted(bound)))
        memory_ids = (*(o.id for o in shared.observations), *(r.id for r in shared.reflections))
        branches.append(SharedBranch(session_id=session_id, memory_ids=memory_ids, entries=entries))
    return SharedScopeMemory(
        scope_id=scope_id,
        owner_session_id=owner,
        ledger=merge_ledgers(ledgers),
        refs=tuple(refs),
        branches=tuple(branches),
    )


def merge_shared_memory(
    ledger: ObservationalMemoryLedger,
    scope_map: WorkScopeMap,
    shared: Sequence[SharedScopeMemory],
) -> tuple[ObservationalMemoryLedger, WorkScopeMap]:
    """Local memory plus shared memory, for rendering and exact-id recall only.

    Returns the id-keyed union of the local ledger and every shared ledger (coverage cursors
    dropped: never persist or fold from it), and the local map with each shared scope's foreign
    refs added to its binds, so :func:`om_core.scopes.work_memory.project_work_memory` shows shared
    memory exactly where the reader has the scope in its lineage.
    """
    if not shared:
        return ledger, scope_map
    merged = merge_ledgers([ledger, *(s.ledger for s in shared)])
    binds: dict[str, dict[str, None]] = {b.scope_id: dict.fromkeys(b.refs) for b in scope_map.binds}
    for memory in shared:
        binds.setdefault(memory.scope_id, {}).update(dict.fromkeys(memory.refs))
    bindings = tuple(ScopeBinding(scope_id=s, refs=tuple(r)) for s, r in binds.items() if r)
    return merged, WorkScopeMap(
        scopes=scope_map.scopes, binds=bindings, stack=scope_map.stack, grants=scope_map.grants
    )
