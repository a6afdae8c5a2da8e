"""Conversions between the wire models and the core/store values (no I/O)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel

from om_api.schemas import (
    AuditEventOut,
    AuditOut,
    ContextBlockOut,
    ContextOut,
    EntryIn,
    EntryOut,
    FlushQueueOut,
    GapOut,
    JobOut,
    SessionOut,
    TenantLoadOut,
    UnobservedOut,
)
from om_core.ledger.models import SessionEntry
from om_core.policy.fairness import TenantLoad, busiest_first
from om_core.policy.redaction import normalize_secrets, redact_value
from om_core.read.context import Context
from om_core.read.recall import redact_entry
from om_workers.store import AuditEvent, ErasureJob, FlushJob, SessionInfo


def to_entry(entry: EntryIn, session_id: str) -> SessionEntry:
    """The core entry for a wire entry; a missing id becomes a random hex id.

    Raises ``pydantic.ValidationError`` when kind and payload disagree (a ``message`` entry
    without a message ...): the API answers 422 with the reason.
    """
    payload: dict[str, Any] = entry.model_dump(exclude_none=True)
    payload["id"] = entry.id if entry.id is not None else uuid.uuid4().hex
    payload["session_id"] = session_id
    return SessionEntry.model_validate(payload)


def json_answer(model: BaseModel, status_code: int = 200) -> Response:
    """``model`` as a JSON response, serialised once by pydantic (compact, as FastAPI writes
    it). A route returning its response model this way skips FastAPI's validation of the
    answer (for a sync route, one more thread-pool hop) and its second encoding pass; the
    route still declares ``response_model`` for the OpenAPI document."""
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json")


def entry_out(entry: SessionEntry, secrets: Iterable[str] = ()) -> EntryOut:
    """The wire form of a stored entry (snake_case, as the core's field names), with every
    exact secret redacted from its payload: message text, parts, tool calls (id, name,
    arguments), tool name and call id, ``data`` (keys and values) and ``summary``."""
    redacted = redact_entry(entry, normalize_secrets(secrets))
    return EntryOut.model_validate(redacted.model_dump(mode="json"))


def context_out(context: Context) -> ContextOut:
    """The wire form of a context: the two blocks, what memory does not cover, the gap."""
    gap = context.gap
    return ContextOut(
        blocks=[
            ContextBlockOut(id="observational-memory", text=context.memory.text),
            ContextBlockOut(
                id="recent-messages",
                text=context.recent.text,
                entry_ids=list(context.recent.entry_ids),
            ),
        ],
        unobserved=UnobservedOut(**context.unobserved.model_dump()),
        gap=None if gap is None else GapOut(**gap.model_dump()),
        max_tokens=context.max_tokens or 0,
    )


def session_out(info: SessionInfo, secrets: Iterable[str] = ()) -> SessionOut:
    """The wire form of a session's bookkeeping; every exact secret is redacted from the
    metadata (keys and values)."""
    metadata: dict[str, Any] = redact_value(dict(info.metadata), secrets)
    return SessionOut(
        id=info.id,
        leaf_id=info.leaf_id,
        entry_count=info.entry_count,
        unobserved_tokens=info.unobserved_tokens,
        metadata=metadata,
        created_at=info.created_at,
        updated_at=info.updated_at,
        workspace=info.workspace_id,
    )


def _duration_s(started: datetime | None, finished: datetime | None) -> float | None:
    """Seconds a job ran, once it has finished."""
    if started is None or finished is None:
        return None
    return (finished - started).total_seconds()


def job_out(job: FlushJob, error: str | None) -> JobOut:
    """The wire form of a flush job; ``error`` is the already-redacted error text."""
    duration = _duration_s(job.started_at, job.finished_at)
    return JobOut(
        id=job.id,
        session_id=job.session_id,
        state=job.state,
        force=job.force,
        full_reflection_rebuild=job.full_reflection_rebuild,
        attempts=job.attempts,
        queued_at=job.queued_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        duration_s=duration,
        counts=dict(job.counts),
        error=error,
        reason=job.reason,
        prompt_version=job.prompt_version,
    )


def erasure_job_out(job: ErasureJob, error: str | None) -> JobOut:
    """The wire form of an erasure job (``kind="erasure"``); ``error`` already redacted."""
    duration = _duration_s(job.started_at, job.finished_at)
    return JobOut(
        id=job.id,
        kind="erasure",
        erases=job.kind,
        session_id=job.target,
        state=job.state,
        force=False,
        full_reflection_rebuild=False,
        attempts=job.attempts,
        queued_at=job.queued_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        duration_s=duration,
        counts=dict(job.counts),
        error=error,
    )


def queue_out(backlog: int, loads: Iterable[TenantLoad]) -> FlushQueueOut:
    """The fair queue on the wire (``GET /v1/admin/queue``, ``om queue --json``): the backlog
    and every tenant, busiest first."""
    return FlushQueueOut(
        backlog=backlog,
        tenants=[
            TenantLoadOut(
                tenant_id=t.tenant_id,
                waiting=t.waiting,
                queued=t.queued,
                running=t.running,
                throttled=t.throttled,
            )
            for t in busiest_first(loads)
        ],
    )


def audit_out(events: Iterable[AuditEvent]) -> AuditOut:
    """The audit trail's wire form (ids, actions and outcomes only: the rows hold no content)."""
    return AuditOut(
        events=[
            AuditEventOut(
                tenant_id=e.tenant_id,
                key_id=e.key_id,
                action=e.action,
                target=e.target,
                outcome=e.outcome,
                job_id=e.job_id,
                created_at=e.created_at,
            )
            for e in events
        ]
    )
