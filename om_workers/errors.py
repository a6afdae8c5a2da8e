"""The adapters' errors: the store, Redis coordination, model providers and the settings.

Each sits under :class:`OMWorkersError` (an adapter failed), itself under the service's root
:class:`om_core.errors.ObservationalMemoryError`, and under the category of
:mod:`om_core.errors` that says what the caller can do: a missing session is a
:class:`StoreError` and a :class:`~om_core.errors.NotFoundError`, an unreachable database a
:class:`StoreError` and an :class:`~om_core.errors.UnavailableError`. The whole tree is drawn
in :mod:`om_core.errors`.

Foreign errors never leave their seam: the store translates SQLAlchemy and driver errors
(:class:`StoreUnavailableError` when the database could not be reached or stayed locked,
:class:`StoreError` for anything else), :func:`om_workers.coordination.connection.translate_errors`
redis-py's, and the provider adapters httpx's (:class:`ProviderError` subclasses).
"""

from __future__ import annotations

from om_core.errors import (
    ConflictError,
    FencedOutError,
    InvalidInputError,
    NotFoundError,
    ObservationalMemoryError,
    UnauthorizedError,
    UnavailableError,
)


class OMWorkersError(ObservationalMemoryError):
    """An adapter failed: the store, Redis, a model provider, or the ``OM_*`` settings. Catch
    it to tell "the outside world failed" from the core refusing its input."""


class ConfigError(OMWorkersError, ValueError):
    """An ``OM_*`` setting that cannot be used (for example an unsupported database URL).

    Not an :class:`~om_core.errors.InvalidInputError`: the operator fixes the deployment, not
    the caller its request (a request that meets it is answered 500, a server fault)."""


class StoreError(OMWorkersError):
    """A session-store operation failed; nothing it was asked to write was written."""


class StoreUnavailableError(StoreError, UnavailableError):
    """The database could not be reached, or stayed locked past the busy timeout."""


class WritersBusyError(StoreUnavailableError):
    """Another writer holds this SQLite file, and the caller asked not to wait for it
    (:func:`~om_workers.store.engine.writers_not_waited`); nothing was read or written."""


class MigrationError(StoreError):
    """Applying the schema migrations failed."""


class TenantNotFoundError(StoreError, NotFoundError):
    """No tenant with this id."""


class SessionNotFoundError(StoreError, NotFoundError):
    """No session with this id for this tenant (another tenant's session is reported the same)."""


class EntryNotFoundError(StoreError, NotFoundError):
    """No entry with this id in this session (or not on its current branch, where that matters)."""


class ApiKeyNotFoundError(StoreError, NotFoundError):
    """No API key has this id."""


class InvalidCursorError(StoreError, InvalidInputError):
    """A listing cursor that this store did not hand out (malformed or tampered with)."""


class FlushJobNotFoundError(StoreError, NotFoundError):
    """No flush job with this id for this tenant."""


class ErasureJobNotFoundError(StoreError, NotFoundError):
    """No erasure job with this id for this tenant (or it belongs to another tenant)."""


class WebhookEndpointNotFoundError(StoreError, NotFoundError):
    """No such webhook endpoint of the tenant (or another tenant's)."""


class WebhookDeliveryNotFoundError(StoreError, NotFoundError):
    """No such webhook delivery of the tenant (or another tenant's)."""


class AlreadyExistsError(StoreError, ConflictError):
    """A create call for an id that is already taken."""


class TenantExistsError(AlreadyExistsError):
    """A tenant with this id already exists."""


class SessionExistsError(AlreadyExistsError):
    """This tenant already has a session with this id."""


class InvalidApiKeyError(StoreError, UnauthorizedError):
    """An API key that is unknown or revoked."""


class InvalidLinkError(StoreError, InvalidInputError):
    """A funnel link that can never hold: a session linked to itself."""


class InvalidSubjectError(StoreError, InvalidInputError):
    """A subject no session's metadata can be erased by: over 256 characters, or holding NUL
    or a lone surrogate."""


class LinkConflictError(StoreError, ConflictError):
    """A funnel link the current links forbid: the workspace is itself linked to another
    workspace, or the session is the workspace of others (funnels do not chain)."""


class WorkspaceMissingError(StoreError, ConflictError):
    """An append to a linked session whose workspace no longer exists; nothing was written.
    Unlink the session (or link it to an existing workspace) to append again."""


class StaleEpochError(StoreError, FencedOutError):
    """A fenced memory write whose epoch is no longer the session's: a newer flush began."""

    def __init__(self, session_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"stale epoch {epoch} for session {session_id!r}: a newer flush holds epoch {current}"
        )
        self.session_id = session_id
        self.epoch = epoch
        self.current = current


class InvalidJobStateError(StoreError, ConflictError):
    """A flush-job state change the job's current state does not allow."""


class CoordinationError(OMWorkersError):
    """A Redis coordination step (lock, coalescing, delivery count) failed.

    redis-py errors never leave ``om_workers``:
    :func:`om_workers.coordination.connection.translate_errors` turns them into this class or one
    of its subclasses. Only :class:`RedisUnavailableError` is surely transient; the API answers
    every coordination failure with 503 and ``Retry-After`` all the same.
    """


class RedisUnavailableError(CoordinationError, UnavailableError):
    """Redis could not be reached, timed out, or is still loading; retrying later may succeed
    (the API answers 503 with ``Retry-After``)."""


class EmbeddedRedisError(CoordinationError):
    """The private Redis server could not be found, started or stopped."""


class LockLostError(CoordinationError, FencedOutError):
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


class ProviderTransportError(ProviderError, UnavailableError):
    """The request never got an HTTP answer (connection refused, reset, DNS ...)."""


class ProviderTimeoutError(ProviderTransportError):
    """The provider did not answer within the adapter's timeout."""


class ProviderRateLimitError(ProviderError, UnavailableError):
    """HTTP 429 after every retry the policy allowed."""


class ProviderServerError(ProviderError, UnavailableError):
    """HTTP 5xx after every retry the policy allowed."""


class ProviderRequestError(ProviderError, ValueError):
    """HTTP 4xx other than 429 (bad request, auth, unknown model): retrying cannot help."""


class ProviderResponseError(ProviderError):
    """A 2xx answer that is not the wire format: bad JSON, no message, malformed tool calls."""
