"""One exception tree for the whole service, rooted at :class:`ObservationalMemoryError`.

Every error ``om_core``, ``om_workers`` and ``om_api`` raise descends from the root. The
*categories* are defined here, once, each named for what the caller can do about the error;
where a builtin fits, a category also subclasses it (``ValueError`` for bad input,
``LookupError`` for something missing), so ``except ValueError`` keeps working for code that
does not know this package. An adapter's or the edge's error subclasses its category and its
origin (multiple inheritance): a missing session is a ``StoreError`` and a
:class:`NotFoundError`, the client's 404 an ``OMClientError`` and a :class:`NotFoundError`,
so ``except NotFoundError`` catches both. The API answers each category with one status
(``om_api.server.errors.STATUS_BY_ERROR``). Foreign errors (SQLAlchemy, redis-py, httpx,
pydantic at the edge) are translated at their one seam each and never leave it.

The categories, and every error in them (unmarked: defined in ``om_core``; ``[w]``: in
``om_workers``, all in ``om_workers.errors`` but the store's internal ``WriteRace`` and the
embedders' errors, in ``om_workers.embeddings``; ``[c]``:
the client, ``om_api.client``; ``[a]``: elsewhere in ``om_api``; ``A: B``: B subclasses A)::

    ObservationalMemoryError
    ├── InvalidInputError (ValueError)    the input can never be valid: fix it
    │   ├── InvalidMemoryIdError, InvalidSettingsError, AmbiguousInputError
    │   ├── UnknownCursorError (LookupError), NonMessageCursorError, OversizedPageError,
    │   │   InvalidSearchQueryError, InvalidUsageWindowError
    │   ├── WorkerLimitError, InvalidTriggerError, ToolError (the model's refused call)
    │   ├── InvalidEntryError             an append the plan refuses (empty, ids, parents)
    │   ├── InvalidWebhookUrlError        a webhook URL the service will not call (SSRF)
    │   ├── ImportLineError               a line of an import refused (its number, why)
    │   ├── InvalidScopeInputError, ReservedScopeError, UnknownMemoryRefError (LookupError)
    │   ├── InvalidCursorError [w], InvalidLinkError [w], LocomoFormatError [a]
    │   ├── InvalidSubjectError [w]       a subject no session can be erased by
    │   ├── EmbeddingsOffError [w]        a hybrid search while embeddings are off
    │   ├── ProxyInputError [a], FormRefused [a] (a console form without its token)
    │   └── InvalidRequest [c]            400/422, or refused before sending
    │       └── PayloadTooLarge [c]       413
    ├── NotFoundError (LookupError)       no such thing (or another tenant's): check the id
    │   ├── UnknownScopeError
    │   ├── TenantNotFoundError [w], SessionNotFoundError [w], EntryNotFoundError [w],
    │   │   ApiKeyNotFoundError [w], FlushJobNotFoundError [w], ErasureJobNotFoundError [w],
    │   │   WebhookEndpointNotFoundError [w], WebhookDeliveryNotFoundError [w]
    │   ├── NotVisible [a]                the console: a tenant the viewer may not see
    │   └── NotFound [c]
    ├── ConflictError                     clashes with the stored state: read it again, decide
    │   ├── WrongSessionError
    │   │   └── ScopeOwnershipError
    │   ├── EntryConflictError            an entry id stored with other content
    │   ├── ImportClashError              an imported id another session of the tenant holds
    │   ├── AppendNotVisibleError         the leaf moved under the append: retry
    │   ├── DuplicateScopeError, ScopeStateError
    │   ├── FencedOutError                a newer writer owns the session: stop, write nothing
    │   │   ├── StaleEpochError [w]
    │   │   └── LockLostError [w]
    │   ├── AlreadyExistsError [w]: TenantExistsError [w], SessionExistsError [w]
    │   ├── LinkConflictError [w], WorkspaceMissingError [w], InvalidJobStateError [w]
    │   ├── RewindError [a]
    │   └── Conflict [c]
    ├── UnauthorizedError                 no credentials, or unknown or revoked ones
    │   ├── InvalidApiKeyError [w]
    │   ├── SignInRequired [a]            the console: no sign-in, or it ended
    │   └── Unauthorized [c]
    ├── UnavailableError                  a dependency is down or busy: retry later
    │   ├── StoreUnavailableError [w]: WritersBusyError [w] (a write asked not to wait)
    │   ├── RedisUnavailableError [w]
    │   ├── ProviderTransportError [w]: ProviderTimeoutError [w]
    │   ├── ProviderRateLimitError [w], ProviderServerError [w]
    │   ├── EmbeddingsUnavailableError [w]: the embeddings endpoint is down
    │   └── Unavailable [c], RateLimited [c]
    ├── CapExceededError                  a hard cap would be passed, nothing to trim: send less
    │   └── ScopeCapError
    ├── WorkerRunError                    a worker run failed closed and recorded nothing
    │   ├── WorkerProtocolError
    │   │   └── WorkerCitationError
    │   └── WorkerTranscriptOverflowError, WorkerOutputRejectedError, WorkerProviderError
    └── ScriptExhaustedError              the scripted test provider ran past its script

The origins (each error above sits under one of these too, where it has one)::

    ObservationalMemoryError
    ├── ScopeError                        every work-scope, shared-scope and grant failure
    ├── OMWorkersError [w]                an adapter failed: the store, Redis, a provider
    │   ├── ConfigError [w] (ValueError)  an OM_* setting cannot be used: fix the deployment
    │   │   └── _ApiStartupError [a]      ``om api``: the app cannot be built from them
    │   ├── StoreError [w]                a store operation failed; nothing was written
    │   │   └── MigrationError [w], WriteRace [w], and the store's errors above
    │   ├── CoordinationError [w]         a Redis step failed (the API answers 503)
    │   │   └── EmbeddedRedisError [w], and the Redis errors above
    │   ├── EmbeddingError [w]            an embedder failed (text redacted)
    │   └── ProviderError [w]             a model call failed (text redacted)
    │       └── ProviderRequestError [w] (ValueError), ProviderResponseError [w], and the
    │           provider errors above
    ├── OMClientError [c]                 the client: every error above marked [c], and
    │   ├── ServerError [c]               a 500, or a status the API does not document
    │   ├── InvalidResponse [c]           a 2xx body that is not the wire model
    │   └── JobTimeout [c]                ``wait_for_job`` ran out of time
    ├── ApiError [a]                      a route's answer, carrying its status and code
    │   └── RateLimitedError [a]          429 with ``Retry-After``
    ├── EvalError [a] (RuntimeError)      an evaluation replay could not go on
    └── StackError [a] (RuntimeError)     ``om up``: a component could not start, or died

One class stays outside: ``om_api.server.app._BodyTooLarge`` must be a FastAPI
``HTTPException`` (FastAPI turns any other error raised while reading a body into a 400).
"""

from __future__ import annotations


class ObservationalMemoryError(Exception):
    """Root of every error raised by ``om_core``, ``om_workers`` and ``om_api``."""


# The categories: what the caller can do about it --------------------------------------------


class InvalidInputError(ObservationalMemoryError, ValueError):
    """Input that can never be valid: malformed ids, wrong types, out-of-range values, a
    reference that names nothing. Retrying the same input fails the same way."""


class NotFoundError(ObservationalMemoryError, LookupError):
    """Something that does not exist, or that belongs to another tenant (never told apart)."""


class ConflictError(ObservationalMemoryError):
    """The request clashes with the stored state (an id taken, a state that forbids the
    change, a concurrent writer); read the state again before deciding to retry."""


class UnauthorizedError(ObservationalMemoryError):
    """No credentials, or credentials that are unknown or revoked."""


class UnavailableError(ObservationalMemoryError):
    """A dependency (database, Redis, a model provider, the API) is down, busy or limiting
    this caller; nothing was done, and retrying later may succeed."""


class FencedOutError(ConflictError):
    """A newer writer owns the session (a newer flush's epoch, or this worker's lock is gone):
    stop without writing; the newer owner carries on. Never retry the write itself."""


class CapExceededError(ObservationalMemoryError):
    """A hard byte or count cap would be exceeded and nothing can be trimmed."""


class WorkerRunError(ObservationalMemoryError):
    """A worker run failed closed and recorded nothing; the message is redacted and bounded."""


class ScopeError(ObservationalMemoryError):
    """Root of every work-scope, shared-scope and grant failure; nothing was appended. Each
    concrete scope error is also in the category a caller acts on."""


# Invalid input ------------------------------------------------------------------------------


class InvalidMemoryIdError(InvalidInputError):
    """A memory id that does not match ``^[a-f0-9]{12}$`` (optionally ``om:``/``reflection:``)."""


class InvalidSettingsError(InvalidInputError):
    """Settings with an unknown key or a value out of range."""


class AmbiguousInputError(InvalidInputError):
    """A request naming more than one exclusive operation (e.g. ``id`` and ``cursor``)."""


class UnknownCursorError(InvalidInputError, LookupError):
    """A page cursor that is not an entry on the current branch (input naming nothing)."""


class InvalidSearchQueryError(InvalidInputError):
    """A search query that cannot run: empty, without a word, over the length limit, or a
    malformed cursor."""


class InvalidUsageWindowError(InvalidInputError):
    """A usage report's days that cannot be read: not ``YYYY-MM-DD``, ``since`` after
    ``until``, or more days than ``MAX_USAGE_DAYS``."""


class NonMessageCursorError(InvalidInputError):
    """A page cursor that points at an entry which is not a user/assistant/tool message."""


class OversizedPageError(InvalidInputError):
    """A page limit outside ``1..MAX_PAGE_LIMIT``."""


class WorkerLimitError(InvalidInputError):
    """A worker limit that is not a positive integer within its hard cap."""


class InvalidTriggerError(InvalidInputError):
    """A compact-when ``trigger`` of unknown type, or a ``should_compact`` that is not callable."""


class InvalidEntryError(InvalidInputError):
    """An entry or batch that cannot be appended: an empty batch, an entry naming another
    session, an id twice in one batch, a parent that is not an earlier entry of the session
    (also an out-of-range id or page limit of a store read)."""


class ImportLineError(InvalidInputError):
    """A line of an import that cannot be stored: ``line`` (1-based) and ``reason`` say which
    and why. Nothing of the import is stored."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


# Conflicts ----------------------------------------------------------------------------------


class WrongSessionError(ConflictError):
    """Entries supplied for one session were asked about another."""


class EntryConflictError(ConflictError):
    """An entry id that is already stored with other content (or in another session)."""

    def __init__(self, entry_id: str) -> None:
        super().__init__(f"entry id {entry_id!r} is already stored with different content")
        self.entry_id = entry_id


class ImportClashError(ConflictError):
    """An import's entry id is already stored in another session of the tenant (entry ids are
    unique per tenant): ``line`` of the file holds it. Import into another tenant, or into
    the session that holds the ids."""

    def __init__(self, line: int, entry_id: str) -> None:
        super().__init__(
            f"line {line}: entry id {entry_id!r} is already stored in another session of this "
            "tenant; entry ids are unique per tenant and an import keeps them"
        )
        self.line = line
        self.entry_id = entry_id


class AppendNotVisibleError(ConflictError):
    """An appended memory entry is not the session leaf: the append went to another branch
    (a concurrent writer moved the leaf); read again and retry."""


# Worker runs --------------------------------------------------------------------------------


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


class ScriptExhaustedError(ObservationalMemoryError):
    """A :class:`~om_core.flush.provider.ScriptedProvider` was asked for more turns than
    scripted: the test's script is too short (a worker run reports it as a
    :class:`WorkerProviderError`)."""


# Work scopes --------------------------------------------------------------------------------


class InvalidScopeInputError(ScopeError, InvalidInputError):
    """Malformed scope input: an id off ``[A-Za-z0-9._:/-]{1,128}`` or with ``..``, a bad
    reference, principal, label, kind, ``include`` or ``closed`` value."""


class ReservedScopeError(ScopeError, InvalidInputError):
    """An operation the implicit ``session`` root cannot take (open, close, grant, revoke)."""


class UnknownScopeError(ScopeError, NotFoundError):
    """A scope id that is not in the branch's work-scope map."""


class DuplicateScopeError(ScopeError, ConflictError):
    """Opening a scope id that the branch already opened (open or closed: ids are never reused)."""


class ScopeStateError(ScopeError, ConflictError):
    """An operation the scope's state forbids: a closed parent, a closed grant target, entering
    under a closed lineage, closing a closed or entered scope."""


class ScopeCapError(ScopeError, CapExceededError):
    """A work-scope cap (scopes, depth, stack, binds, principals, label/kind length) would be
    exceeded."""


class UnknownMemoryRefError(ScopeError, InvalidInputError, LookupError):
    """A bind/unbind reference to an observation or reflection the branch's ledger never
    recorded (input naming nothing)."""


class ScopeOwnershipError(ScopeError, WrongSessionError):
    """Entries that belong to another session, or an append that landed off this branch."""


class InvalidWebhookUrlError(InvalidInputError):
    """A webhook endpoint URL the service will not call: not ``http(s)``, unresolvable, or
    resolving to a private, loopback or link-local address while those are not allowed."""
