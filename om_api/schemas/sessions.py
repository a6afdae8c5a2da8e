"""Sessions, their flushes and jobs: creation, links, listing, imports, tickets and job
records."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from om_api.schemas.base import JobState, PathId, RequestModel, WireModel
from om_core.policy.subjects import SUBJECT_KEY

SUBJECT_PATTERN: Final = r"^(?:[^/\s.][^/\s]{0,255}|\.[^/\s.][^/\s]{0,254}|\.\.[^/\s]{1,254})$"
"""A subject: 1-256 characters, no ``/`` and no whitespace (it travels in a URL path), never
``.`` or ``..`` (clients resolve those away). ``user@example.com`` and ``u_42`` both fit."""
_SUBJECT_RE: Final = re.compile(SUBJECT_PATTERN)


class CreateSessionRequest(RequestModel):
    """``POST /v1/sessions``: ``id`` defaults to a random hex id; ``workspace`` links the new
    session to a workspace session at once (see :class:`LinkRequest`); ``metadata`` is the
    tenant's own, except ``metadata.subject`` (:data:`SUBJECT_KEY`), which names the end
    user the session is about, for erasure by subject, and must then fit
    :data:`SUBJECT_PATTERN`."""

    id: PathId | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _subject_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        subject = value.get(SUBJECT_KEY)
        if subject is not None and not (
            isinstance(subject, str) and _SUBJECT_RE.fullmatch(subject)
        ):
            raise ValueError(
                "metadata.subject must be a string of 1-256 characters without '/' or "
                "whitespace (it names the end user for DELETE /v1/subjects/{subject})"
            )
        return value

    workspace: PathId | None = Field(
        default=None,
        description="Copy every observable message appended to this session onto this "
        "workspace session of the same tenant (the delegation funnel).",
    )


class LinkRequest(RequestModel):
    """``PUT /v1/sessions/{sid}/link``: from now on, every observable message (user, assistant
    or tool) appended to the session is also appended to ``workspace``, a session of the same
    tenant, with a new id and ``data.funnelOrigin`` naming the original. Memory records are
    never copied. The workspace cannot itself be linked (funnels do not chain)."""

    workspace: PathId


class SessionOut(WireModel):
    """A session's bookkeeping; ``workspace`` is the session its observable messages are
    copied onto (``None``: not linked)."""

    id: str
    leaf_id: str | None
    entry_count: int
    unobserved_tokens: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    workspace: str | None = None


MAX_SESSIONS_PAGE = 100
"""Largest ``limit`` of ``GET /v1/sessions``."""


class SessionsPage(WireModel):
    """``GET /v1/sessions``: the tenant's sessions, newest first (by ``created_at``, then id).

    Pass ``next_cursor`` as ``cursor`` for the next page (``None`` on the last page). Paging
    is by position (keyset), so sessions created meanwhile never shift a page: they are newer
    than the first page and show up in the next listing, not in this one, and no session is
    skipped or repeated."""

    sessions: list[SessionOut]
    next_cursor: str | None


class ImportOut(WireModel):
    """What ``POST /v1/sessions/{sid}/import`` stored: the session afterwards, whether the
    import created it (201) or found it (200), the entries written now, those already stored
    with the same content (a repeated import writes none), and the tombstones added."""

    session: SessionOut
    created: bool
    imported: int
    duplicates: int
    tombstones: int


# Flush and jobs ----------------------------------------------------------------------------


class FlushRequest(RequestModel):
    """``POST /v1/sessions/{sid}/flush`` (the body is optional).

    ``force`` observes whatever is unscanned now, below ``observation.messageTokens`` too.
    ``full_reflection_rebuild`` reflects over every active observation, not only the new ones.
    Both are kept in the job row; a request that coalesces into a pending job adds its options
    to that job's.
    """

    force: bool = False
    full_reflection_rebuild: bool = False


class ErasureTicket(WireModel):
    """The answer to an erasure request (202): the erasure job ``job_id`` exists and what it
    erases is already gone to the tenant (404 on every route); read the job at
    ``GET /v1/jobs/{job_id}`` until it has ``succeeded``, when nothing of it is stored."""

    job_id: str


class FlushTicket(WireModel):
    """The answer to a flush request (202): the job row of ``job_id`` exists. ``coalesced``: a
    job that existed already answers this request (nothing new was published): one pending
    for the session, or, when the request had nothing to do (the session's unobserved tokens
    below ``observation.messageTokens`` and no option set), the session's newest job,
    running or finished. ``state`` is that job's state when the request was answered
    (``queued`` for a new or pending job; ``running`` or ``succeeded`` for a request with
    nothing to do). The wire form of the worker's ``ServingJob``."""

    job_id: str
    coalesced: bool
    state: JobState = "queued"


ErasureKind = Literal["session", "subject", "tenant", "retention"]


class ModelUsageOut(WireModel):
    """One model's usage: ``calls`` that reported usage, their input (prompt) and output
    (completion) tokens as the provider reported them, and their ``cost`` at ``OM_PRICES``
    (``null``: the model has no price)."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None


class JobUsageOut(WireModel):
    """A flush job's model usage: totals, then by model. ``cost`` sums the priced models
    (``null`` when none is priced); ``unpriced_models`` names the others. All zero for a job
    whose provider reports no usage (the offline extractive provider calls no model)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None
    unpriced_models: list[str] = Field(default_factory=list)
    models: list[ModelUsageOut] = Field(default_factory=list)


class JobOut(WireModel):
    """A flush job, or an erasure job (``kind``). ``error`` (failed or skipped jobs) is
    redacted of every known secret. For an erasure job ``session_id`` is what it erases (the
    session id, the subject, the tenant id; empty for retention), ``erases`` says which, and
    ``counts`` has ``sessions``, ``entries`` and ``workspace_entries`` (placeholders written on
    workspaces that held funnel copies)."""

    id: str
    kind: Literal["flush", "erasure"] = "flush"
    erases: ErasureKind | None = None
    session_id: str
    state: JobState
    force: bool
    full_reflection_rebuild: bool
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None = Field(description="finished_at - started_at, once finished.")
    counts: dict[str, int]
    error: str | None
    reason: str | None = Field(
        default=None,
        description="Why a job that recorded nothing did nothing, e.g. "
        "'observer below threshold: 12 of 10000 tokens'.",
    )
    prompt_version: str | None = Field(
        default=None,
        description="Version of the observer/reflector instructions the job used, e.g. "
        "'observer-2/reflector-2' ('custom': set in the memory settings); null until it ran.",
    )
    usage: JobUsageOut | None = Field(
        default=None,
        description="A flush job's model usage as the provider reported it, written when the "
        "job finished; null for an erasure job.",
    )
