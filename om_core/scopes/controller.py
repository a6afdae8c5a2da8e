"""The work-scope controller: validated ``om.scope.*`` appends for one session's branch.

The controller keeps no state of its own. Every operation reads the current branch through the
host's ``get_entries`` callable, folds it, checks the request against the same rule set the fold
applies (:class:`om_core.scopes.ScopeFold`), and only then appends one ``custom`` entry through
``append_entry``. Reading afresh each time means two controllers (or a controller and a worker)
on one branch can never act on a stale view, and a rejected request appends nothing.

Folding the branch costs O(n) per operation. A host that keeps the branch's folded state (a
store with a snapshot) passes ``get_view`` instead: the scope map and ledger of the current
branch, read afresh for each operation at the cost of the entries since the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from om_core.errors import (
    InvalidScopeInputError,
    ScopeCapError,
    ScopeOwnershipError,
    UnknownMemoryRefError,
)
from om_core.ledger.appending import append_checked, check_own_entries, record_entry
from om_core.ledger.fold import fold_ledger
from om_core.ledger.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX, create_memory_id
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.policy.redaction import normalize_secrets, redact
from om_core.scopes.index import ScopeFold, WorkScopeMap, fold_work_scope_map
from om_core.scopes.records import (
    MAX_WORK_SCOPE_BINDS,
    MAX_WORK_SCOPE_LABEL_CHARS,
    MAX_WORK_SCOPE_PRINCIPALS,
    ScopeBound,
    ScopeClosed,
    ScopeEntered,
    ScopeGranted,
    ScopeLeft,
    ScopeOpened,
    ScopeRecord,
    ScopeRevoked,
    ScopeUnbound,
    WorkScopeSpec,
    check_scope_id,
    is_memory_ref,
    is_principal_id,
)

AppendEntry = Callable[[SessionEntry], object]
GetEntries = Callable[[], Sequence[SessionEntry]]


@dataclass(frozen=True)
class ScopeView:
    """The folded state of a session's current branch that scope operations check against:
    ``scope_map == fold_work_scope_map(branch)`` and ``ledger == fold_ledger(branch)``."""

    scope_map: WorkScopeMap
    ledger: ObservationalMemoryLedger


GetView = Callable[[], ScopeView]


class WorkScopeController:
    """Open, close, enter, leave, bind, unbind, grant and revoke work scopes on one branch.

    ``get_entries`` returns the session's current branch (root to leaf); ``append_entry`` appends
    one entry to that same branch. Every method fails closed, appending nothing, with a typed
    :class:`~om_core.errors.ScopeError`: :class:`~om_core.errors.InvalidScopeInputError` for
    malformed input, :class:`~om_core.errors.ReservedScopeError`,
    :class:`~om_core.errors.UnknownScopeError`, :class:`~om_core.errors.DuplicateScopeError`,
    :class:`~om_core.errors.ScopeStateError`, :class:`~om_core.errors.ScopeCapError`,
    :class:`~om_core.errors.UnknownMemoryRefError`, and
    :class:`~om_core.errors.ScopeOwnershipError` when the branch holds another session's entries.
    After an append the branch is read again; if the new entry is not its leaf the callback wrote
    elsewhere and :class:`~om_core.errors.AppendNotVisibleError` is raised.

    Methods return the appended entry, or ``None`` when the request changes nothing (binding
    refs already bound, granting principals already granted, leaving with nothing entered).

    With ``get_view`` the controller reads the branch's folded state from the host instead of
    folding ``get_entries`` (which it then never calls: it may be ``None``), and does not read
    the branch again after an append: ``append_entry`` must itself raise
    :class:`~om_core.errors.AppendNotVisibleError` when the entry did not land on the branch (a
    store confirms that in the append's own transaction), and the host's entries are its own.
    """

    def __init__(
        self,
        *,
        session_id: str,
        append_entry: AppendEntry,
        get_entries: GetEntries | None = None,
        get_view: GetView | None = None,
        secrets: Iterable[str] = (),
        new_entry_id: Callable[[], str] = create_memory_id,
        now: Callable[[], str] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidScopeInputError("session_id must be a non-empty string")
        if (get_entries is None) == (get_view is None):
            raise InvalidScopeInputError("pass exactly one of get_entries and get_view")
        self.session_id = session_id
        self._append = append_entry
        self._get_entries = get_entries
        self._get_view = get_view
        self._secrets = normalize_secrets(secrets)
        self._new_entry_id = new_entry_id
        self._now = now

    # -- reads ------------------------------------------------------------------------------

    def entries(self) -> Sequence[SessionEntry]:
        """The current branch; raises :class:`ScopeOwnershipError` for a foreign entry, and
        :class:`InvalidScopeInputError` for a controller made with ``get_view`` alone."""
        if self._get_entries is None:
            raise InvalidScopeInputError("this controller reads a view, not the branch")
        entries = self._get_entries()
        check_own_entries(entries, self.session_id, ScopeOwnershipError)
        return entries

    def scope_map(self) -> WorkScopeMap:
        """The folded work-scope map of the current branch."""
        return self._read()[0]

    def _read(
        self, *, ledger: bool = False
    ) -> tuple[WorkScopeMap, ObservationalMemoryLedger | None]:
        """The branch's scope map and (with ``ledger``, or from a view) its ledger."""
        if self._get_view is not None:
            view = self._get_view()
            return view.scope_map, view.ledger
        entries = self.entries()
        return fold_work_scope_map(entries), fold_ledger(entries) if ledger else None

    def has(self, scope_id: str) -> bool:
        """True when the branch has opened ``scope_id`` (open or closed)."""
        return self.scope_map().get(check_scope_id(scope_id)) is not None

    def leaf(self) -> str:
        """The current leaf scope (``session`` when nothing is entered)."""
        return self.scope_map().leaf

    # -- writes -----------------------------------------------------------------------------

    def open(self, spec: WorkScopeSpec | Mapping[str, Any]) -> SessionEntry:
        """Open a scope under ``spec.parent_id`` (default ``session``).

        ``kind`` and ``label`` are redacted with the controller's secrets and must stay within
        512 characters before and after redaction (:class:`ScopeCapError`).
        """
        if not isinstance(spec, WorkScopeSpec):
            try:
                spec = WorkScopeSpec.model_validate(spec)
            except ValidationError as error:
                raise InvalidScopeInputError(f"invalid work scope spec: {error}") from None
        record = ScopeOpened(
            id=check_scope_id(spec.id),
            parent_id=None if spec.parent_id is None else check_scope_id(spec.parent_id, "parent"),
            kind=self._text(spec.kind, "kind"),
            label=self._text(spec.label, "label"),
        )
        entry = self._commit(record)
        assert entry is not None
        return entry

    def close(self, scope_id: str) -> SessionEntry:
        """Close an open, non-entered host scope; its id stays taken."""
        entry = self._commit(ScopeClosed(scope_id=check_scope_id(scope_id)))
        assert entry is not None
        return entry

    def enter(self, scope_id: str) -> SessionEntry:
        """Push a scope whose whole lineage is open onto the enter stack (at most 8 deep)."""
        entry = self._commit(ScopeEntered(scope_id=check_scope_id(scope_id)))
        assert entry is not None
        return entry

    def leave(self) -> SessionEntry | None:
        """Pop the enter stack; ``None`` (nothing appended) when nothing is entered."""
        scope_map, _ = self._read()
        if not scope_map.stack:
            return None
        return self._commit(ScopeLeft(), ScopeFold.start(scope_map))

    def bind(self, scope_id: str, refs: Iterable[str]) -> SessionEntry | None:
        """Bind ``om:<id>`` / ``reflection:<id>`` refs the branch recorded to a scope.

        Refs already bound are skipped; ``None`` when none is new. Unknown ids raise
        :class:`UnknownMemoryRefError`; more than 4,096 refs on the scope :class:`ScopeCapError`.
        """
        return self._refs(scope_id, refs, bind=True)

    def unbind(self, scope_id: str, refs: Iterable[str]) -> SessionEntry | None:
        """Remove refs from a scope; refs not bound there are skipped (``None`` if all are)."""
        return self._refs(scope_id, refs, bind=False)

    def grant(self, scope_id: str, principal_ids: Iterable[str]) -> SessionEntry | None:
        """Grant principals read+write on an open host scope (at most 1,024 per scope).

        Grants are authoritative only on the scope owner's branch (see
        :func:`om_core.scopes.shared.resolve_shared_scopes`). ``None`` when all were granted.
        """
        return self._principals(scope_id, principal_ids, grant=True)

    def revoke(self, scope_id: str, principal_ids: Iterable[str]) -> SessionEntry | None:
        """Revoke granted principals (closed scopes too); ``None`` when none was granted."""
        return self._principals(scope_id, principal_ids, grant=False)

    # -- internals --------------------------------------------------------------------------

    def _text(self, value: str | None, what: str) -> str | None:
        if value is None:
            return None
        if len(value) > MAX_WORK_SCOPE_LABEL_CHARS:
            raise ScopeCapError(f"work scope {what} exceeds {MAX_WORK_SCOPE_LABEL_CHARS} chars")
        redacted = redact(value, self._secrets)
        if len(redacted) > MAX_WORK_SCOPE_LABEL_CHARS:
            # The marker can be longer than the secret it replaces.
            raise ScopeCapError(
                f"work scope {what} exceeds {MAX_WORK_SCOPE_LABEL_CHARS} chars after redaction"
            )
        return redacted

    def _refs(self, scope_id: str, refs: Iterable[str], *, bind: bool) -> SessionEntry | None:
        sid = check_scope_id(scope_id)
        wanted = _unique(refs, is_memory_ref, "memory ref (om:<id> or reflection:<id>)")
        scope_map, ledger = self._read(ledger=True)
        assert ledger is not None
        state = ScopeFold.start(scope_map)
        # State first, so an unknown scope is reported as such before any ref lookup.
        state.check(ScopeUnbound(scope_id=sid, refs=(wanted[0],)))
        known = {f"{OBSERVATION_REF_PREFIX}{o.id}" for o in ledger.observations}
        known.update(f"{REFLECTION_REF_PREFIX}{r.id}" for r in ledger.reflections)
        unknown = [ref for ref in wanted if ref not in known]
        if unknown:
            raise UnknownMemoryRefError(f"no recorded memory for {', '.join(unknown[:5])}")
        bound = state.binds.get(sid, {})
        changed = [ref for ref in wanted if (ref in bound) != bind]
        if not changed:
            return None
        record: ScopeRecord
        if bind:
            if len(bound) + len(changed) > MAX_WORK_SCOPE_BINDS:
                raise ScopeCapError(f"at most {MAX_WORK_SCOPE_BINDS} refs per work scope")
            record = ScopeBound(scope_id=sid, refs=tuple(changed))
        else:
            record = ScopeUnbound(scope_id=sid, refs=tuple(changed))
        return self._commit(record, state)

    def _principals(
        self, scope_id: str, principal_ids: Iterable[str], *, grant: bool
    ) -> SessionEntry | None:
        sid = check_scope_id(scope_id)
        wanted = _unique(principal_ids, is_principal_id, "principal id")
        state = ScopeFold.start(self._read()[0])
        target: type[ScopeGranted] | type[ScopeRevoked] = ScopeGranted if grant else ScopeRevoked
        # Target checks first, so a reserved, unknown or closed scope fails even as a no-op.
        state.check(target(scope_id=sid, principal_ids=(wanted[0],)))
        granted = state.grants.get(sid, {})
        changed = [p for p in wanted if (p in granted) != grant]
        if grant and len(granted) + len(changed) > MAX_WORK_SCOPE_PRINCIPALS:
            raise ScopeCapError(f"at most {MAX_WORK_SCOPE_PRINCIPALS} principals per work scope")
        if not changed:
            return None
        return self._commit(target(scope_id=sid, principal_ids=tuple(changed)), state)

    def _commit(self, record: ScopeRecord, state: ScopeFold | None = None) -> SessionEntry | None:
        if state is None:
            state = ScopeFold.start(self._read()[0])
        state.check(record)
        now = self._now() if self._now is not None else None
        entry = record_entry(record, self.session_id, self._new_entry_id(), now)
        if self._get_entries is None:
            self._append(entry)  # the host confirms the entry landed (see the class docstring)
        else:
            append_checked(self._append, self._get_entries, entry, "scope entry")
        return entry


def _unique(values: Iterable[str], valid: Callable[[object], bool], what: str) -> list[str]:
    """Distinct values in first-seen order; a bare string or an empty input is refused."""
    if isinstance(values, str | bytes):
        raise InvalidScopeInputError(f"expected a collection of {what}s, got one string")
    seen: dict[str, None] = {}
    for value in values:
        if not valid(value):
            raise InvalidScopeInputError(f"invalid {what} {value!r}")
        seen[value] = None
    if not seen:
        raise InvalidScopeInputError(f"expected at least one {what}")
    return list(seen)


@contextmanager
def with_work_scope(
    controller: WorkScopeController, spec: WorkScopeSpec | Mapping[str, Any]
) -> Iterator[str]:
    """Open ``spec`` if the branch lacks it, enter it, yield its id, and leave in ``finally``.

    It never closes the scope. Errors from open or enter propagate before the body runs (and
    nothing is left then); an existing scope is entered as it is, whatever ``spec`` says.
    """
    if not isinstance(spec, WorkScopeSpec):
        try:
            spec = WorkScopeSpec.model_validate(spec)
        except ValidationError as error:
            raise InvalidScopeInputError(f"invalid work scope spec: {error}") from None
    if not controller.has(spec.id):
        controller.open(spec)
    controller.enter(spec.id)
    try:
        yield spec.id
    finally:
        controller.leave()
