"""One exception tree for ``om_workers``, rooted at :class:`OMWorkersError`.

Database driver and SQLAlchemy errors never leave the store: the store translates them at its
boundary into :class:`StoreUnavailableError` (the database could not be reached or stayed
locked; retrying later may succeed) or :class:`StoreError` (anything else). Lookup errors also
subclass :class:`LookupError` and bad input :class:`ValueError`, so callers that do not know
this package still catch them sensibly.
"""

from __future__ import annotations


class OMWorkersError(Exception):
    """Root of every error raised by ``om_workers``."""


class ConfigError(OMWorkersError, ValueError):
    """An ``OM_*`` setting that cannot be used (for example an unsupported database URL)."""


class StoreError(OMWorkersError):
    """A session-store operation failed; nothing it was asked to write was written."""


class StoreUnavailableError(StoreError):
    """The database could not be reached, or stayed locked past the busy timeout."""


class MigrationError(StoreError):
    """Applying the schema migrations failed."""


class NotFoundError(StoreError, LookupError):
    """Something that does not exist, or that belongs to another tenant."""


class TenantNotFoundError(NotFoundError):
    """No tenant with this id."""


class SessionNotFoundError(NotFoundError):
    """No session with this id for this tenant (another tenant's session is reported the same)."""


class EntryNotFoundError(NotFoundError):
    """No entry with this id in this session (or not on its current branch, where that matters)."""


class ApiKeyNotFoundError(NotFoundError):
    """No API key has this id."""


class InvalidCursorError(StoreError, ValueError):
    """A listing cursor that this store did not hand out (malformed or tampered with)."""


class FlushJobNotFoundError(NotFoundError):
    """No flush job with this id for this tenant."""


class AlreadyExistsError(StoreError):
    """A create call for an id that is already taken."""


class TenantExistsError(AlreadyExistsError):
    """A tenant with this id already exists."""


class SessionExistsError(AlreadyExistsError):
    """This tenant already has a session with this id."""


class InvalidApiKeyError(StoreError):
    """An API key that is unknown or revoked."""


class InvalidLinkError(StoreError, ValueError):
    """A funnel link that can never hold: a session linked to itself."""


class LinkConflictError(StoreError):
    """A funnel link the current links forbid: the workspace is itself linked to another
    workspace, or the session is the workspace of others (funnels do not chain)."""


class WorkspaceMissingError(StoreError):
    """An append to a linked session whose workspace no longer exists; nothing was written.
    Unlink the session (or link it to an existing workspace) to append again."""


class StaleEpochError(StoreError):
    """A fenced memory write whose epoch is no longer the session's: a newer flush began."""

    def __init__(self, session_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"stale epoch {epoch} for session {session_id!r}: a newer flush holds epoch {current}"
        )
        self.session_id = session_id
        self.epoch = epoch
        self.current = current


class InvalidJobStateError(StoreError, ValueError):
    """A flush-job state change the job's current state does not allow."""


class CoordinationError(OMWorkersError):
    """A Redis coordination step (lock, coalescing, delivery count) failed.

    redis-py errors never leave ``om_workers``:
    :func:`om_workers.coordination.connection.translate_errors` turns them into this class or one
    of its subclasses.
    """


class RedisUnavailableError(CoordinationError):
    """Redis could not be reached, timed out, or is still loading; retrying later may succeed
    (the API answers 503 with ``Retry-After``)."""


class EmbeddedRedisError(CoordinationError):
    """The private Redis server could not be found, started or stopped."""


class LockLostError(CoordinationError):
    """This worker no longer holds the session lock (it expired, was deleted, or Redis lost it).

    Raised before a write, so a job stops without writing; the fenced SQL write is the final
    guard if the lock is lost between the check and the commit.
    """

    def __init__(self, key: str) -> None:
        super().__init__(f"session lock {key!r} is no longer held by this worker")
        self.key = key


class ProviderError(OMWorkersError):
    """A model provider call failed; the text is redacted of every known secret.

    ``status`` is the HTTP status when there was a response; ``retryable`` says whether the
    adapter's retry policy treats it as transient (429, 5xx, transport errors).
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class ProviderTransportError(ProviderError):
    """The request never got an HTTP answer (connection refused, reset, DNS ...)."""


class ProviderTimeoutError(ProviderTransportError):
    """The provider did not answer within the adapter's timeout."""


class ProviderRateLimitError(ProviderError):
    """HTTP 429 after every retry the policy allowed."""


class ProviderServerError(ProviderError):
    """HTTP 5xx after every retry the policy allowed."""


class ProviderRequestError(ProviderError, ValueError):
    """HTTP 4xx other than 429 (bad request, auth, unknown model): retrying cannot help."""


class ProviderResponseError(ProviderError):
    """A 2xx answer that is not the wire format: bad JSON, no message, malformed tool calls."""
