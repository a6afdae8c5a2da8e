"""What each console page shows, built through the same reads the HTTP routes use
(:mod:`om_workers.reads`, the store's tenant-scoped methods): tenancy, tombstones and
redaction hold exactly as in the API. No I/O of its own; no HTML here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from om_api.schemas import ContextOut
from om_api.server.convert import context_out
from om_api.server.state import ApiState
from om_core import RecallResult
from om_core.ledger.models import (
    Observation,
    ObservationalMemoryLedger,
    Reflection,
    SessionEntry,
)
from om_core.ledger.projection import invalidated_memory
from om_core.policy.redaction import normalize_secrets, redact, redact_value
from om_core.read.recall import redact_entry
from om_core.scopes.index import WorkScopeMap
from om_workers.reads import session_context, session_recall
from om_workers.store import FlushJob, SessionInfo
from om_workers.store.console_queries import linked_sessions, session_jobs

MEMORY_PAGE: Final = 100
"""Observations (or reflections) a session page lists at a time, newest first."""
ENTRIES_PAGE: Final = 50
"""Raw entries a branch page shows."""
JOBS_LISTED: Final = 20
"""The session's latest flush jobs a session page lists."""
LINKED_LISTED: Final = 50
"""Sessions linked to a workspace that its page names."""


@dataclass(frozen=True)
class MemoryRow:
    """One observation or reflection as a page lists it (text redacted)."""

    id: str
    kind: str
    text: str
    when: str | None
    sources: int


@dataclass(frozen=True)
class EntryRow:
    """One raw entry of the branch as a page shows it (payload redacted)."""

    id: str
    parent_id: str | None
    kind: str
    role: str
    text: str
    created_at: str | None


@dataclass(frozen=True)
class MemoryPage:
    """A window of a session's memory, newest first."""

    rows: list[MemoryRow]
    total: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        """Where the next window starts; ``None`` on the last."""
        end = self.offset + len(self.rows)
        return end if end < self.total else None


@dataclass(frozen=True)
class SessionPage:
    """Everything the session page shows."""

    info: SessionInfo
    metadata: dict[str, Any]
    context: ContextOut
    observations: MemoryPage
    reflections: MemoryPage
    scopes: WorkScopeMap
    jobs: list[FlushJob]
    linked: list[str]


def redacted(text: str | None, secrets: Iterable[str]) -> str:
    """``text`` with every exact secret redacted (empty for ``None``)."""
    return "" if text is None else redact(text, secrets)


def entry_row(entry: SessionEntry, secrets: tuple[str, ...]) -> EntryRow:
    """The row of an entry: a message's role and text (tool calls spelled out), another
    kind's record type or summary and data, every exact secret redacted."""
    clean = redact_entry(entry, secrets)
    role, text = "", ""
    if clean.message is not None:
        role = clean.message.role
        calls = [f"→ {c.name}({json.dumps(c.arguments)})" for c in clean.message.tool_calls]
        text = "\n".join([clean.message.text, *calls]).strip()
    elif clean.summary is not None:
        text = clean.summary
    elif clean.data is not None:
        role = clean.record_type or ""
        text = json.dumps(clean.data, ensure_ascii=False, indent=1)[:4000]
    return EntryRow(clean.id, clean.parent_id, clean.kind, role, text, clean.created_at)


def _window(
    items: list[Observation] | list[Reflection], offset: int, secrets: tuple[str, ...]
) -> MemoryPage:
    # Only the window shown is redacted and built: a pool may hold thousands of items.
    start = max(0, min(offset, len(items)))
    shown = items[::-1][start : start + MEMORY_PAGE]
    rows = [
        MemoryRow(
            i.id,
            "observation",
            redact(i.text, secrets),
            i.observed_at,
            len(i.source_entry_ids),
        )
        if isinstance(i, Observation)
        else MemoryRow(
            i.id,
            "reflection",
            redact(i.text, secrets),
            i.reflected_at,
            len(i.observation_ids),
        )
        for i in shown
    ]
    return MemoryPage(rows, len(items), start)


def memory_pages(
    ledger: ObservationalMemoryLedger,
    invalidated: frozenset[str],
    secrets: tuple[str, ...],
    offset: int,
) -> tuple[MemoryPage, MemoryPage]:
    """The active observations and the reflections not withheld by a tombstone, newest first,
    a window of :data:`MEMORY_PAGE` from ``offset`` each."""
    bad_observations, bad_reflections = invalidated_memory(ledger, invalidated)
    dropped = ledger.dropped
    observations = [
        o for o in ledger.observations if o.id not in bad_observations and o.id not in dropped
    ]
    reflections = [r for r in ledger.reflections if r.id not in bad_reflections]
    return _window(observations, offset, secrets), _window(reflections, offset, secrets)


def _context(state: ApiState, tenant_id: str, session_id: str) -> ContextOut:
    # The context exactly as GET .../context answers it (default scope and budget), from the
    # same per-process cache; viewing it asks for no flush, unlike the route: a page view
    # must not cost model calls.
    context = session_context(
        state.store,
        tenant_id,
        session_id,
        settings=state.memory_settings,
        secrets=state.secrets,
        max_tokens=state.settings.api.context_max_tokens,
    )
    return context_out(context)


def session_page(
    state: ApiState, tenant_id: str, session_id: str, *, memory_offset: int = 0
) -> SessionPage:
    """The session page of ``tenant_id``'s session, its context kept by
    :func:`~om_workers.reads.session_context` while nothing it depends on changed. Raises
    :class:`~om_workers.errors.SessionNotFoundError` (a 404) for a missing, erased or another
    tenant's session, before anything else is read."""
    store = state.store
    info = store.get_session(tenant_id, session_id)
    secrets = normalize_secrets(state.secrets)
    invalidated = state.invalidated_ids(tenant_id, session_id)
    context = _context(state, tenant_id, session_id)
    context_state = store.read_context_state(tenant_id, session_id)
    observations, reflections = memory_pages(
        context_state.ledger, invalidated, secrets, memory_offset
    )
    return SessionPage(
        info=info,
        metadata=redact_value(dict(info.metadata), secrets),
        context=context,
        observations=observations,
        reflections=reflections,
        scopes=context_state.scope_map,
        jobs=session_jobs(store, tenant_id, session_id, JOBS_LISTED),
        linked=linked_sessions(store, tenant_id, session_id, LINKED_LISTED),
    )


def recall(state: ApiState, tenant_id: str, session_id: str, memory_id: str) -> RecallResult:
    """What ``GET .../memory/{id}`` answers (sources redacted, tombstones withheld). Raises
    :class:`~om_core.errors.InvalidMemoryIdError` (422) and the store's
    :class:`~om_workers.errors.SessionNotFoundError` (404)."""
    return session_recall(
        state.store,
        tenant_id,
        session_id,
        memory_id,
        secrets=state.secrets,
        invalidated_ids=state.invalidated_ids(tenant_id, session_id),
    )


def entries(
    state: ApiState, tenant_id: str, session_id: str, after: str | None
) -> tuple[list[EntryRow], str | None]:
    """A page of the current branch after entry ``after`` (from the root without it) and the
    cursor of the next page. Raises the store's
    :class:`~om_workers.errors.EntryNotFoundError` for an ``after`` not on the branch."""
    page = state.store.read_page(tenant_id, session_id, after=after, limit=ENTRIES_PAGE)
    secrets = normalize_secrets(state.secrets)
    return [entry_row(e, secrets) for e in page.entries], page.next_cursor
