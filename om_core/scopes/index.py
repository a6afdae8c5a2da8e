"""The work-scope index: ``om.scope.*`` records folded into a :class:`WorkScopeMap`.

The index is append-only: a closed scope stays in the map (its id is never reused) and still
counts towards the caps.

One rule set serves both writers and readers: :class:`ScopeFold` checks a record against the
current state and raises a typed :class:`~om_core.errors.ScopeError` when the record breaks a rule.
The controller raises that error before appending anything; :func:`fold_work_scope_map` skips the
record instead, so a ledger written by anyone folds to exactly what the controller would accept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from pydantic import Field

from om_core.errors import (
    DuplicateScopeError,
    ReservedScopeError,
    ScopeCapError,
    ScopeError,
    ScopeStateError,
    UnknownScopeError,
)
from om_core.ledger.models import Frozen, SessionEntry
from om_core.scopes.records import (
    MAX_WORK_SCOPE_BINDS,
    MAX_WORK_SCOPE_DEPTH,
    MAX_WORK_SCOPE_PRINCIPALS,
    MAX_WORK_SCOPE_STACK,
    MAX_WORK_SCOPES,
    SESSION_SCOPE_ID,
    ScopeBound,
    ScopeClosed,
    ScopeEntered,
    ScopeGranted,
    ScopeLeft,
    ScopeOpened,
    ScopeRecord,
    ScopeUnbound,
    parse_scope_record,
)


class WorkScope(Frozen):
    """A scope of the map. ``parent_id`` is ``None`` only for the ``session`` root."""

    id: str
    parent_id: str | None = None
    kind: str | None = None
    label: str | None = None
    status: Literal["open", "closed"] = "open"
    depth: int = Field(default=0, ge=0, le=MAX_WORK_SCOPE_DEPTH)


class ScopeBinding(Frozen):
    """The refs bound to one scope, in bind order."""

    scope_id: str
    refs: tuple[str, ...]


class ScopeGrant(Frozen):
    """Principals currently granted on one scope, and those whose grant was revoked."""

    scope_id: str
    principal_ids: tuple[str, ...] = ()
    revoked_principal_ids: tuple[str, ...] = ()


_ROOT = WorkScope(id=SESSION_SCOPE_ID)


class WorkScopeMap(Frozen):
    """The folded work-scope index of one branch.

    ``scopes`` lists ``session`` first, then host scopes in open order. ``stack`` is the enter
    stack without the implicit ``session`` at its bottom; its top is the current leaf.
    """

    scopes: tuple[WorkScope, ...] = (_ROOT,)
    binds: tuple[ScopeBinding, ...] = ()
    stack: tuple[str, ...] = ()
    grants: tuple[ScopeGrant, ...] = ()

    @cached_property
    def scopes_by_id(self) -> dict[str, WorkScope]:
        return {s.id: s for s in self.scopes}

    @cached_property
    def refs_by_scope(self) -> dict[str, frozenset[str]]:
        return {b.scope_id: frozenset(b.refs) for b in self.binds}

    @cached_property
    def grants_by_scope(self) -> dict[str, ScopeGrant]:
        return {g.scope_id: g for g in self.grants}

    @property
    def leaf(self) -> str:
        """The current leaf: the top of the enter stack, ``session`` when nothing is entered."""
        return self.stack[-1] if self.stack else SESSION_SCOPE_ID

    @property
    def has_host_scopes(self) -> bool:
        """True once any host scope was opened (closed ones count: the index is in use)."""
        return len(self.scopes) > 1

    def get(self, scope_id: str) -> WorkScope | None:
        """The scope with this id, or ``None``."""
        return self.scopes_by_id.get(scope_id)

    def refs(self, scope_id: str) -> frozenset[str]:
        """Refs bound to exactly this scope (empty for unknown scopes)."""
        return self.refs_by_scope.get(scope_id, frozenset())

    def lineage(self, scope_id: str) -> tuple[str, ...]:
        """Ids from ``session`` down to ``scope_id``; raises :class:`UnknownScopeError`."""
        by_id = self.scopes_by_id
        scope = by_id.get(scope_id)
        if scope is None:
            raise UnknownScopeError(f"unknown work scope {scope_id!r}")
        path = [scope.id]
        # The fold only admits children of known scopes, so the walk ends at the root.
        while scope.parent_id is not None:
            scope = by_id[scope.parent_id]
            path.append(scope.id)
        return tuple(reversed(path))

    def descendants(self, scope_id: str) -> tuple[str, ...]:
        """Strict descendants of ``scope_id`` in map order; raises :class:`UnknownScopeError`."""
        if scope_id not in self.scopes_by_id:
            raise UnknownScopeError(f"unknown work scope {scope_id!r}")
        below: set[str] = {scope_id}
        found: list[str] = []
        # Parents are opened before children, so one pass in map order finds every descendant.
        for scope in self.scopes:
            if scope.parent_id is not None and scope.parent_id in below:
                below.add(scope.id)
                found.append(scope.id)
        return tuple(found)


@dataclass
class ScopeFold:
    """Mutable fold state and the one rule set every ``om.scope.*`` record is checked against."""

    scopes: dict[str, WorkScope] = field(default_factory=lambda: {SESSION_SCOPE_ID: _ROOT})
    binds: dict[str, dict[str, None]] = field(default_factory=dict)
    stack: list[str] = field(default_factory=list)
    grants: dict[str, dict[str, None]] = field(default_factory=dict)
    revoked: dict[str, dict[str, None]] = field(default_factory=dict)

    @classmethod
    def start(cls, scope_map: WorkScopeMap) -> ScopeFold:
        """State that continues from a folded map."""
        return cls(
            scopes={s.id: s for s in scope_map.scopes},
            binds={b.scope_id: dict.fromkeys(b.refs) for b in scope_map.binds},
            stack=list(scope_map.stack),
            grants={g.scope_id: dict.fromkeys(g.principal_ids) for g in scope_map.grants},
            revoked={g.scope_id: dict.fromkeys(g.revoked_principal_ids) for g in scope_map.grants},
        )

    def _known(self, scope_id: str) -> WorkScope:
        scope = self.scopes.get(scope_id)
        if scope is None:
            raise UnknownScopeError(f"unknown work scope {scope_id!r}")
        return scope

    def _host(self, scope_id: str, action: str) -> WorkScope:
        if scope_id == SESSION_SCOPE_ID:
            raise ReservedScopeError(f"cannot {action} the reserved {SESSION_SCOPE_ID!r} scope")
        return self._known(scope_id)

    def _lineage_open(self, scope: WorkScope) -> bool:
        while True:
            if scope.status != "open":
                return False
            if scope.parent_id is None:
                return True
            scope = self.scopes[scope.parent_id]

    def check(self, record: ScopeRecord) -> None:
        """Raise the :class:`~om_core.errors.ScopeError` that ``record`` would violate, if any."""
        if isinstance(record, ScopeOpened):
            if record.id == SESSION_SCOPE_ID:
                raise ReservedScopeError(f"cannot open the reserved {SESSION_SCOPE_ID!r} scope")
            if record.id in self.scopes:
                raise DuplicateScopeError(f"work scope {record.id!r} already exists")
            if len(self.scopes) - 1 >= MAX_WORK_SCOPES:
                raise ScopeCapError(f"at most {MAX_WORK_SCOPES} work scopes per branch")
            parent = self.scopes.get(record.parent_id or SESSION_SCOPE_ID)
            if parent is None:
                raise UnknownScopeError(f"unknown parent work scope {record.parent_id!r}")
            if parent.status != "open":
                raise ScopeStateError(f"parent work scope {parent.id!r} is closed")
            if parent.depth >= MAX_WORK_SCOPE_DEPTH:
                raise ScopeCapError(f"work scopes nest at most {MAX_WORK_SCOPE_DEPTH} deep")
        elif isinstance(record, ScopeClosed):
            scope = self._host(record.scope_id, "close")
            if scope.status != "open":
                raise ScopeStateError(f"work scope {scope.id!r} is already closed")
            if scope.id in self.stack:
                # Closing an entered scope would leave the stack pointing at a dead leaf.
                raise ScopeStateError(f"work scope {scope.id!r} is entered; leave it first")
        elif isinstance(record, ScopeEntered):
            scope = self._known(record.scope_id)
            if not self._lineage_open(scope):
                raise ScopeStateError(f"work scope {scope.id!r} or an ancestor is closed")
            if len(self.stack) >= MAX_WORK_SCOPE_STACK:
                raise ScopeCapError(f"at most {MAX_WORK_SCOPE_STACK} entered work scopes")
        elif isinstance(record, ScopeLeft):
            if not self.stack:
                raise ScopeStateError("no work scope is entered")
        elif isinstance(record, ScopeBound):
            self._known(record.scope_id)
            bound = self.binds.get(record.scope_id, {})
            fresh = {ref for ref in record.refs if ref not in bound}
            if len(bound) + len(fresh) > MAX_WORK_SCOPE_BINDS:
                raise ScopeCapError(f"at most {MAX_WORK_SCOPE_BINDS} refs per work scope")
        elif isinstance(record, ScopeUnbound):
            self._known(record.scope_id)
        elif isinstance(record, ScopeGranted):
            scope = self._host(record.scope_id, "grant")
            if scope.status != "open":
                raise ScopeStateError(f"cannot grant the closed work scope {scope.id!r}")
            granted = self.grants.get(record.scope_id, {})
            fresh = {p for p in record.principal_ids if p not in granted}
            if len(granted) + len(fresh) > MAX_WORK_SCOPE_PRINCIPALS:
                raise ScopeCapError(
                    f"at most {MAX_WORK_SCOPE_PRINCIPALS} principals per work scope"
                )
        else:
            # Revoking a closed scope stays allowed: taking access away is always safe.
            self._host(record.scope_id, "revoke")

    def apply(self, record: ScopeRecord) -> None:
        """Apply a record that :meth:`check` accepted."""
        if isinstance(record, ScopeOpened):
            parent = self.scopes[record.parent_id or SESSION_SCOPE_ID]
            self.scopes[record.id] = WorkScope(
                id=record.id,
                parent_id=parent.id,
                kind=record.kind,
                label=record.label,
                depth=parent.depth + 1,
            )
        elif isinstance(record, ScopeClosed):
            scope = self.scopes[record.scope_id]
            self.scopes[scope.id] = scope.model_copy(update={"status": "closed"})
        elif isinstance(record, ScopeEntered):
            self.stack.append(record.scope_id)
        elif isinstance(record, ScopeLeft):
            self.stack.pop()
        elif isinstance(record, ScopeBound):
            self.binds.setdefault(record.scope_id, {}).update(dict.fromkeys(record.refs))
        elif isinstance(record, ScopeUnbound):
            bound = self.binds.get(record.scope_id, {})
            for ref in record.refs:
                bound.pop(ref, None)
        elif isinstance(record, ScopeGranted):
            granted = self.grants.setdefault(record.scope_id, {})
            revoked = self.revoked.setdefault(record.scope_id, {})
            for principal in record.principal_ids:
                granted[principal] = None
                revoked.pop(principal, None)
        else:
            granted = self.grants.setdefault(record.scope_id, {})
            revoked = self.revoked.setdefault(record.scope_id, {})
            for principal in record.principal_ids:
                # Only a grant that existed can be revoked; the reason "revoked" depends on it.
                if principal in granted:
                    del granted[principal]
                    revoked[principal] = None

    def accept(self, record: ScopeRecord) -> bool:
        """Apply ``record`` when it passes :meth:`check`; say whether it did."""
        try:
            self.check(record)
        except ScopeError:
            return False
        self.apply(record)
        return True

    def finish(self) -> WorkScopeMap:
        """The frozen map of the current state."""
        scope_ids = set(self.grants) | set(self.revoked)
        return WorkScopeMap(
            scopes=tuple(self.scopes.values()),
            binds=tuple(
                ScopeBinding(scope_id=sid, refs=tuple(refs))
                for sid, refs in self.binds.items()
                if refs
            ),
            stack=tuple(self.stack),
            grants=tuple(
                ScopeGrant(
                    scope_id=sid,
                    principal_ids=tuple(self.grants.get(sid, {})),
                    revoked_principal_ids=tuple(self.revoked.get(sid, {})),
                )
                for sid in sorted(scope_ids)
                if self.grants.get(sid) or self.revoked.get(sid)
            ),
        )


def fold_work_scope_map(
    entries: Iterable[SessionEntry], *, initial: WorkScopeMap | None = None
) -> WorkScopeMap:
    """Fold a branch's ``om.scope.*`` records, in branch order, into a :class:`WorkScopeMap`.

    Without scope records the map holds only the implicit ``session`` root. A malformed record,
    or one that breaks a rule (the same rules the controller enforces), is skipped: the fold
    never raises for entry content. ``initial`` resumes a fold a store kept (``entries`` are
    then only the later ones).
    """
    state = ScopeFold.start(initial) if initial is not None else ScopeFold()
    for entry in entries:
        record = parse_scope_record(entry)
        if record is not None:
            state.accept(record)
    return state.finish()
