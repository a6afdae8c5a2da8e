"""Immutable values the store returns; none of them holds a connection."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import Row

from om_core.flush.unit_of_work import MemoryView
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.scopes.index import WorkScopeMap

JobState = Literal["queued", "running", "succeeded", "failed", "skipped"]
JOB_STATES: tuple[JobState, ...] = ("queued", "running", "succeeded", "failed", "skipped")
FINAL_JOB_STATES: frozenset[str] = frozenset({"succeeded", "failed", "skipped"})


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (SQLite hands back naive ones; they are UTC)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def as_utc_or_none(value: datetime | None) -> datetime | None:
    """:func:`as_utc`, passing ``None`` through."""
    return None if value is None else as_utc(value)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant: the ownership scope every session and key belongs to."""

    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CreatedApiKey:
    """A new API key. ``plaintext`` is shown once: only its hash is stored."""

    key_id: str
    tenant_id: str
    plaintext: str


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """An API key without its secret: ``prefix`` is how every plaintext of it begins
    (``om_<key_id>_``); ``revoked_at`` is ``None`` while the key works."""

    key_id: str
    tenant_id: str
    prefix: str
    label: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class LastFlush:
    """What a flush request needs to know to be answered without a job of its own: the
    session's unobserved tokens, and its newest job that was not folded into another (its id
    and state; ``None`` when it has none)."""

    unobserved_tokens: int
    job_id: str | None
    state: JobState | None

    def idle_answer(self, threshold_tokens: int) -> tuple[str, JobState] | None:
        """The job (id, state) that answers a request with nothing to do, or ``None``.

        Nothing to do: fewer than ``threshold_tokens`` unobserved (a flush now would observe
        nothing, so reflect, drop and bind nothing new either) and the newest job queued,
        running or succeeded (a failed one is run again by a new job, which retries its step).
        """
        if self.job_id is None or self.state not in ("queued", "running", "succeeded"):
            return None
        if self.unobserved_tokens >= threshold_tokens:
            return None
        return self.job_id, self.state


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session's bookkeeping: leaf, fence epoch, entry count, unobserved tokens, the
    workspace its observable messages are copied onto (``None``: not linked), and when its
    stored entries were last rewritten in place (``None``: never)."""

    tenant_id: str
    id: str
    leaf_id: str | None
    epoch: int
    entry_count: int
    unobserved_tokens: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    workspace_id: str | None = None
    rewritten_at: datetime | None = None


def session_info(row: Row[Any]) -> SessionInfo:
    """The :class:`SessionInfo` of a ``sessions`` row (every column selected)."""
    return SessionInfo(
        tenant_id=row.tenant_id,
        id=row.id,
        leaf_id=row.leaf_id,
        epoch=int(row.epoch),
        entry_count=int(row.entry_count),
        unobserved_tokens=int(row.unobserved_tokens),
        metadata=dict(row.meta),
        created_at=as_utc(row.created_at),
        updated_at=as_utc(row.updated_at),
        workspace_id=row.workspace_id,
        rewritten_at=as_utc(row.rewritten_at) if row.rewritten_at is not None else None,
    )


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did.

    ``entries`` are the batch's entries as stored (parent and ``created_at`` filled in), in
    batch order; ``appended_ids`` were written now, ``duplicate_ids`` were already stored with
    the same content and were not written again. ``leaf_id`` is the session's leaf afterwards.
    """

    entries: tuple[SessionEntry, ...]
    appended_ids: tuple[str, ...]
    duplicate_ids: tuple[str, ...]
    leaf_id: str | None


@dataclass(frozen=True, slots=True)
class SessionsListing:
    """One page of a tenant's sessions, newest first; ``next_cursor`` (opaque) continues
    after the last one, ``None`` on the last page."""

    sessions: tuple[SessionInfo, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class StoredPage:
    """Current-branch entries after a cursor; ``next_cursor`` is ``None`` on the last page."""

    entries: tuple[SessionEntry, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ContextParts:
    """What one context read fetched in one transaction (see
    :meth:`~om_workers.store.SqlStore.read_context_parts`): the session's ``version`` (its row
    and the ids its tombstones withhold), the ledger ``state``, the branch ``tail``, and
    ``older``: the count, tokens and first id of unobserved messages before the tail (zeros
    when the tail reaches the observation cursor)."""

    version: ContextVersion
    state: ContextState
    tail: tuple[SessionEntry, ...]
    older: tuple[int, int, str | None]

    @property
    def withheld(self) -> frozenset[str]:
        """The ids the session's tombstones withhold."""
        return self.version.withheld


@dataclass(frozen=True, slots=True)
class ContextVersion:
    """What a context read depends on in the session row and its tombstones, read together:
    the row (:class:`SessionInfo`, whose ``updated_at`` moves with every write) and the ids
    the session's tombstone scope withholds."""

    info: SessionInfo
    withheld: frozenset[str]


@dataclass(frozen=True, slots=True)
class ContextState:
    """What building context needs, without re-folding the whole branch.

    ``ledger`` equals ``fold_ledger(current_branch)``. It is the stored snapshot (covering the
    branch up to ``snapshot_entry_id``) folded forward over ``entries``: the current-branch
    entries after that point, in order. With no memory on the branch there is no snapshot,
    ``snapshot_entry_id`` is ``None`` and ``entries`` is the whole branch. ``scope_map``
    equals ``fold_work_scope_map(current_branch)`` the same way. ``observation_cursor_seq`` is
    the seq of the observation cursor as the snapshot records it (0: nothing observed, or no
    snapshot on this branch).
    """

    ledger: ObservationalMemoryLedger
    snapshot_entry_id: str | None
    entries: tuple[SessionEntry, ...]
    leaf_id: str | None
    scope_map: WorkScopeMap = field(default_factory=WorkScopeMap)
    observation_cursor_seq: int = 0


@dataclass(frozen=True, slots=True)
class FlushJob:
    """One flush job: state, timings, counts, the redacted error of a failed job, and the
    version of the prompts its flush used (``None`` until the flush ran)."""

    id: str
    tenant_id: str
    session_id: str
    state: JobState
    force: bool
    full_reflection_rebuild: bool
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    reason: str | None = None
    prompt_version: str | None = None
    deliveries: tuple[str, ...] = field(default=(), compare=False)
    """The ids of the webhook deliveries written by the finish that returned this row (in its
    transaction), to publish without reading them back; empty on every other read."""


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What one job's calls of one ``model`` used: ``calls`` answers that reported usage,
    and their ``input_tokens`` and ``output_tokens`` as the provider reported them."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """A tenant's model usage on one UTC ``day`` (``YYYY-MM-DD``) for one ``model``."""

    tenant_id: str
    day: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class JobFinish:
    """How a flush job ends: its final ``state``, counts, an error that is stored with every
    exact value of ``secrets`` redacted, and the ``reason`` a job that recorded nothing did
    nothing (``observer below threshold: 12 of 10000 tokens``), and the ``prompt_version`` of
    its flush (``None`` for a job that never ran the pipeline)."""

    job_id: str
    state: JobState
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    secrets: tuple[str, ...] = ()
    reason: str | None = None
    prompt_version: str | None = None
    usage: tuple[ModelUsage, ...] = ()
    """The job's model usage, written with its finish: counted even when the row had already
    finished (the calls were made and billed all the same)."""


@dataclass(frozen=True, slots=True)
class StartedJob:
    """A flush job as :meth:`SqlStore.start_job` left it: its row (now ``running``), the
    session's new epoch (every append of the flush is fenced by it) and the session's view as
    of that moment, read in the same transaction."""

    job: FlushJob
    epoch: int
    view: MemoryView


@dataclass(frozen=True, slots=True)
class StoredTombstone:
    """A tombstone as the store keeps it: an entry id one scope of a tenant withholds, since
    ``created_at``. Unlike :class:`om_core.Tombstone` (any id, a ``reason``), the store's
    are entry ids only, and a ``corrected`` one stays withheld."""

    tenant_id: str
    scope: str
    entry_id: str
    corrected: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SessionRef:
    """One session, by tenant and id; ``unobserved_tokens`` as the store counts them."""

    tenant_id: str
    session_id: str
    unobserved_tokens: int = 0


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job row, by id, and its session."""

    job_id: str
    session: SessionRef


@dataclass(frozen=True, slots=True)
class FailureStreak:
    """A session's consecutive failed jobs, newest backwards (skipped jobs do not break it),
    and when the last of them finished."""

    failures: int
    last_failed_at: datetime | None


@dataclass(frozen=True, slots=True)
class StoredMemoryItem:
    """An observation or reflection of a session's stored ledger (``kind``: ``observation``
    or ``reflection``), its wire ``payload``, and whether it was dropped."""

    kind: str
    item_id: str
    payload: dict[str, Any]
    dropped: bool


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import stored: the session afterwards, whether the import created it, the
    entries written now and those already stored (a repeated import), the tombstones added."""

    session: SessionInfo
    created: bool
    imported: int
    duplicates: int
    tombstones: int
