"""The ``om.scope.*`` records: their names, caps, id rules and models, parsed from entries.

A work scope is a host-named node of a tree rooted at the implicit, reserved ``session`` scope.
Observations and reflections join scopes through explicit binds (``om:<id>`` and
``reflection:<id>`` refs). Each record is one ``custom`` entry; a malformed one parses to
``None`` and counts as no record.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field

from om_core.errors import (
    InvalidScopeInputError,
)
from om_core.ledger.ids import OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX, is_memory_id
from om_core.ledger.models import Frozen, SessionEntry

SESSION_SCOPE_ID: Final = "session"

SCOPE_OPENED: Final = "om.scope.opened"
SCOPE_CLOSED: Final = "om.scope.closed"
SCOPE_ENTERED: Final = "om.scope.entered"
SCOPE_LEFT: Final = "om.scope.left"
SCOPE_BOUND: Final = "om.scope.bound"
SCOPE_UNBOUND: Final = "om.scope.unbound"
SCOPE_GRANTED: Final = "om.scope.granted"
SCOPE_REVOKED: Final = "om.scope.revoked"

MAX_WORK_SCOPES = 256
"""Host scopes per branch, closed ones included; the implicit ``session`` root is not counted."""
MAX_WORK_SCOPE_DEPTH = 8
"""Depth of a host scope below ``session`` (a child of ``session`` has depth 1)."""
MAX_WORK_SCOPE_STACK = 8
"""Entered scopes on the enter stack (the implicit ``session`` at its bottom is not counted)."""
MAX_WORK_SCOPE_BINDS = 4096
"""Distinct refs bound to one scope at a time."""
MAX_WORK_SCOPE_PRINCIPALS = 1024
"""Principals granted on one scope at a time."""
MAX_WORK_SCOPE_LABEL_CHARS = 512
"""Characters of a scope label or kind, after redaction."""
MAX_WORK_SCOPE_ID_CHARS = 128
MAX_PRINCIPAL_ID_CHARS = 256

SCOPE_ID_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,128}")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def is_scope_id(value: object) -> bool:
    """True for a string matching ``[A-Za-z0-9._:/-]{1,128}`` that contains no ``..``."""
    return (
        isinstance(value, str)
        and SCOPE_ID_PATTERN.fullmatch(value) is not None
        and ".." not in value
    )


def is_memory_ref(value: object) -> bool:
    """True for ``om:<12 hex>`` (an observation) or ``reflection:<12 hex>`` (a reflection)."""
    if not isinstance(value, str):
        return False
    for prefix in (OBSERVATION_REF_PREFIX, REFLECTION_REF_PREFIX):
        if value.startswith(prefix):
            return is_memory_id(value[len(prefix) :])
    return False


def is_principal_id(value: object) -> bool:
    """True for a principal (session) id: 1..256 characters, trimmed, no control characters."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_PRINCIPAL_ID_CHARS
        and value.strip() == value
        and _CONTROL_CHARS.search(value) is None
    )


def check_scope_id(value: object, what: str = "scope id") -> str:
    """Return ``value`` when it is a scope id; raise :class:`InvalidScopeInputError` otherwise."""
    if not is_scope_id(value):
        raise InvalidScopeInputError(
            f"invalid {what} {value!r}: expected [A-Za-z0-9._:/-]{{1,128}} without '..'"
        )
    assert isinstance(value, str)
    return value


def _scope_text(value: str) -> str:
    if len(value) > MAX_WORK_SCOPE_LABEL_CHARS:
        raise ValueError(f"at most {MAX_WORK_SCOPE_LABEL_CHARS} characters")
    return value


def _ref(value: str) -> str:
    if not is_memory_ref(value):
        raise ValueError(f"invalid memory ref {value!r}: expected om:<id> or reflection:<id>")
    return value


def _principal(value: str) -> str:
    if not is_principal_id(value):
        raise ValueError(f"invalid principal id {value!r}")
    return value


ScopeId = Annotated[str, AfterValidator(check_scope_id)]
ScopeText = Annotated[str, AfterValidator(_scope_text)]
MemoryRefs = Annotated[
    tuple[Annotated[str, AfterValidator(_ref)], ...],
    Field(min_length=1, max_length=MAX_WORK_SCOPE_BINDS),
]
PrincipalIds = Annotated[
    tuple[Annotated[str, AfterValidator(_principal)], ...],
    Field(min_length=1, max_length=MAX_WORK_SCOPE_PRINCIPALS),
]


class WorkScopeSpec(Frozen):
    """What a host asks to open: an id, an optional parent (default ``session``), kind and label."""

    id: str
    parent_id: str | None = None
    kind: str | None = None
    label: str | None = None


class ScopeOpened(Frozen):
    """Payload of ``om.scope.opened``."""

    type: Literal["om.scope.opened"] = SCOPE_OPENED
    id: ScopeId
    parent_id: ScopeId | None = None
    kind: ScopeText | None = None
    label: ScopeText | None = None


class ScopeClosed(Frozen):
    """Payload of ``om.scope.closed``."""

    type: Literal["om.scope.closed"] = SCOPE_CLOSED
    scope_id: ScopeId


class ScopeEntered(Frozen):
    """Payload of ``om.scope.entered``: pushes the scope on the enter stack."""

    type: Literal["om.scope.entered"] = SCOPE_ENTERED
    scope_id: ScopeId


class ScopeLeft(Frozen):
    """Payload of ``om.scope.left``: pops the enter stack."""

    type: Literal["om.scope.left"] = SCOPE_LEFT


class ScopeBound(Frozen):
    """Payload of ``om.scope.bound``: refs join the scope."""

    type: Literal["om.scope.bound"] = SCOPE_BOUND
    scope_id: ScopeId
    refs: MemoryRefs


class ScopeUnbound(Frozen):
    """Payload of ``om.scope.unbound``: refs leave the scope."""

    type: Literal["om.scope.unbound"] = SCOPE_UNBOUND
    scope_id: ScopeId
    refs: MemoryRefs


class ScopeGranted(Frozen):
    """Payload of ``om.scope.granted``; authoritative only on the scope owner's branch."""

    type: Literal["om.scope.granted"] = SCOPE_GRANTED
    scope_id: ScopeId
    principal_ids: PrincipalIds


class ScopeRevoked(Frozen):
    """Payload of ``om.scope.revoked``."""

    type: Literal["om.scope.revoked"] = SCOPE_REVOKED
    scope_id: ScopeId
    principal_ids: PrincipalIds


ScopeRecord = (
    ScopeOpened
    | ScopeClosed
    | ScopeEntered
    | ScopeLeft
    | ScopeBound
    | ScopeUnbound
    | ScopeGranted
    | ScopeRevoked
)
_RECORD_MODELS: dict[str, type[ScopeRecord]] = {
    SCOPE_OPENED: ScopeOpened,
    SCOPE_CLOSED: ScopeClosed,
    SCOPE_ENTERED: ScopeEntered,
    SCOPE_LEFT: ScopeLeft,
    SCOPE_BOUND: ScopeBound,
    SCOPE_UNBOUND: ScopeUnbound,
    SCOPE_GRANTED: ScopeGranted,
    SCOPE_REVOKED: ScopeRevoked,
}


def scope_record_models() -> dict[str, type[ScopeRecord]]:
    """Every ``om.scope.*`` record type and its payload model (a copy)."""
    return dict(_RECORD_MODELS)


def parse_scope_record(entry: SessionEntry) -> ScopeRecord | None:
    """The ``om.scope.*`` record a custom entry carries, or ``None`` (malformed ones included)."""
    return entry.record(_RECORD_MODELS)
