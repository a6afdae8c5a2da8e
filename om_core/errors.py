"""One exception tree for the core: every way an operation fails closed (writes nothing).

Each error subclasses :class:`ObservationalMemoryError`; some also subclass the builtin a
Python caller would expect (``ValueError`` for bad input, ``LookupError`` for unknown ids), so
``except ValueError`` keeps working for code that does not know this package.
"""

from __future__ import annotations


class ObservationalMemoryError(Exception):
    """Root of every error raised by ``om_core``."""


class InvalidInputError(ObservationalMemoryError, ValueError):
    """Input that can never be valid: malformed ids, wrong types, out-of-range values."""


class InvalidMemoryIdError(InvalidInputError):
    """A memory id that does not match ``^[a-f0-9]{12}$`` (optionally ``om:``/``reflection:``)."""


class InvalidSettingsError(InvalidInputError):
    """Settings with an unknown key or a value out of range."""


class WrongSessionError(ObservationalMemoryError):
    """Entries supplied for one session were asked about another."""


class AmbiguousInputError(InvalidInputError):
    """A request naming more than one exclusive operation (e.g. ``id`` and ``cursor``)."""


class UnknownCursorError(ObservationalMemoryError, LookupError):
    """A page cursor that is not an entry on the current branch."""


class NonMessageCursorError(InvalidInputError):
    """A page cursor that points at an entry which is not a user/assistant/tool message."""


class OversizedPageError(InvalidInputError):
    """A page limit outside ``1..MAX_PAGE_LIMIT``."""


class CapExceededError(ObservationalMemoryError):
    """A hard byte or count cap would be exceeded and nothing can be trimmed."""


class WorkerLimitError(InvalidInputError):
    """A worker limit that is not a positive integer within its hard cap."""


class ScriptExhaustedError(ObservationalMemoryError):
    """A :class:`~om_core.flush.provider.ScriptedProvider` was asked for more turns than
    scripted."""


class WorkerRunError(ObservationalMemoryError):
    """A worker run failed closed and recorded nothing; the message is redacted and bounded."""


class WorkerProtocolError(WorkerRunError):
    """A tool call broke the protocol: unknown tool, call overflow, bad arguments or result."""


class WorkerCitationError(WorkerProtocolError):
    """A record cites a source entry or observation the run may not cite."""


class WorkerTranscriptOverflowError(WorkerRunError):
    """The worker transcript would grow past ``maxWorkerMessageBytes``."""


class WorkerOutputRejectedError(WorkerRunError):
    """A guard rejected the run's output (empty/not smaller reflections, degenerate text)."""


class WorkerProviderError(WorkerRunError):
    """The provider call raised or answered with something that is not an assistant message."""


class InvalidEntryError(InvalidInputError):
    """An entry or batch that cannot be appended: an empty batch, an entry naming another
    session, an id twice in one batch, a parent that is not an earlier entry of the session
    (also an out-of-range id or page limit of a store read)."""


class EntryConflictError(ObservationalMemoryError):
    """An entry id that is already stored with other content (or in another session)."""

    def __init__(self, entry_id: str) -> None:
        super().__init__(f"entry id {entry_id!r} is already stored with different content")
        self.entry_id = entry_id


class AppendNotVisibleError(ObservationalMemoryError):
    """An appended memory entry is not the session leaf: the append went to another branch."""


class InvalidTriggerError(InvalidInputError):
    """A compact-when ``trigger`` of unknown type, or a ``should_compact`` that is not callable."""


class ScopeError(ObservationalMemoryError):
    """Root of every work-scope, shared-scope and grant failure; nothing was appended."""


class InvalidScopeInputError(ScopeError, InvalidInputError):
    """Malformed scope input: an id off ``[A-Za-z0-9._:/-]{1,128}`` or with ``..``, a bad
    reference, principal, label, kind, ``include`` or ``closed`` value."""


class ReservedScopeError(ScopeError, InvalidInputError):
    """An operation the implicit ``session`` root cannot take (open, close, grant, revoke)."""


class UnknownScopeError(ScopeError, LookupError):
    """A scope id that is not in the branch's work-scope map."""


class DuplicateScopeError(ScopeError):
    """Opening a scope id that the branch already opened (open or closed: ids are never reused)."""


class ScopeStateError(ScopeError):
    """An operation the scope's state forbids: a closed parent, a closed grant target, entering
    under a closed lineage, closing a closed or entered scope."""


class ScopeCapError(ScopeError, CapExceededError):
    """A work-scope cap (scopes, depth, stack, binds, principals, label/kind length) would be
    exceeded."""


class UnknownMemoryRefError(ScopeError, LookupError):
    """A bind/unbind reference to an observation or reflection the branch's ledger never
    recorded."""


class ScopeOwnershipError(ScopeError, WrongSessionError):
    """Entries that belong to another session, or an append that landed off this branch."""
