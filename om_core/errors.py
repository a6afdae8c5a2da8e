"""One exception tree for the core: every failure the seed calls "fail closed".

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
    """A request that names more than one mutually exclusive operation (e.g. ``id`` and ``cursor``)."""


class UnknownCursorError(ObservationalMemoryError, LookupError):
    """A page cursor that is not an entry on the current branch."""


class NonMessageCursorError(InvalidInputError):
    """A page cursor that points at an entry which is not a user/assistant/tool message."""


class OversizedPageError(InvalidInputError):
    """A page limit outside ``1..MAX_PAGE_LIMIT``."""


class CapExceededError(ObservationalMemoryError):
    """A hard byte or count cap from the seed would be exceeded and nothing can be trimmed."""


class WorkerLimitError(InvalidInputError):
    """A worker limit that is not a positive integer within its hard cap."""
