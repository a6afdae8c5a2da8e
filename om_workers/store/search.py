"""Full-text search of a tenant's sessions: the page a route answers, every rule applied.

Tenancy and tombstoned entries are filtered by the statement
(:mod:`om_workers.store.repositories.search`); here, on the page, memory a revocation
withholds is left out as recall leaves it out (an observation with a withheld source, a
reflection resting on a withheld observation), and snippets are cut from redacted text (see
:func:`om_core.read.search.snippet`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from om_core.errors import InvalidSearchQueryError
from om_core.ledger.models import SessionEntry
from om_core.read.fusion import fuse
from om_core.read.search import (
    MAX_SEARCH_LIMIT,
    HitKind,
    SearchHit,
    SearchKey,
    SearchPage,
    SearchQuery,
    check_limit,
    decode_cursor,
    parse_query,
    snippet,
)
from om_core.read.search_narrowing import MAX_NARROWED_SESSIONS, MetadataNarrowing
from om_workers.store.repositories.search import SearchRow
from om_workers.store.repositories.search_sql import ROW_SHIFT
from om_workers.store.repositories.tombstones import tombstone_scope
from om_workers.store.service import Service
from om_workers.store.snapshot import OBSERVATION
from om_workers.store.unit_of_work import SqlReadUnitOfWork
from om_workers.store.vectors import SCAN_CHUNK, top_by_cosine


def _entry_text(payload: dict[str, object] | None) -> str:
    if payload is None:
        return ""
    entry = SessionEntry.model_validate(payload)
    return entry.message.text if entry.message is not None else ""


class _Withheld:
    """Per session of one page: the withheld entry ids, and which memory they withhold."""

    def __init__(self, uow: SqlReadUnitOfWork, tenant_id: str) -> None:
        self._uow = uow
        self._tenant_id = tenant_id
        self._ids: dict[str, frozenset[str]] = {}

    def _of(self, session_id: str) -> frozenset[str]:
        if session_id not in self._ids:
            scope = tombstone_scope(session_id)
            self._ids[session_id] = self._uow.tombstones.withheld(self._tenant_id, scope)
        return self._ids[session_id]

    def entry(self, row: SearchRow) -> bool:
        """Whether a message candidate's entry is tombstoned."""
        return row.entry_id in self._of(row.session_id)

    def memory(self, row: SearchRow) -> bool:
        blocked = self._of(row.session_id)
        payload = row.memory_payload or {}
        if not blocked:
            return False
        if payload.get("id") in blocked:
            return True
        if row.memory_kind == OBSERVATION:
            return not blocked.isdisjoint(payload.get("sourceEntryIds", ()))
        observation_ids = [str(i) for i in payload.get("observationIds", ())]
        if not blocked.isdisjoint(observation_ids):
            return True
        sources = self._uow.search.observation_sources(row.key.row // ROW_SHIFT, observation_ids)
        return any(not blocked.isdisjoint(ids) for ids in sources.values())


def _hit(row: SearchRow, query: SearchQuery, secrets: Iterable[str]) -> SearchHit | None:
    kind: HitKind
    if row.key.source == 0:
        text, kind, source_ids = _entry_text(row.entry_payload), "message", None
        hit_id = row.entry_id
    else:
        payload = row.memory_payload or {}
        text, hit_id = str(payload.get("text", "")), payload.get("id")
        kind = "observation" if row.memory_kind == OBSERVATION else "reflection"
        key = "sourceEntryIds" if kind == "observation" else "observationIds"
        source_ids = tuple(str(i) for i in payload.get(key, ()))
    shown = snippet(text, query.terms, secrets)
    if shown is None or hit_id is None:
        return None
    return SearchHit(
        id=str(hit_id),
        session_id=row.session_id,
        kind=kind,
        snippet=shown,
        score=-row.key.rank,
        created_at=row.created_at.isoformat() if row.created_at is not None else None,
        source_ids=source_ids,
    )


FUSION_DEPTH = MAX_SEARCH_LIMIT
"""Candidates each engine gives a hybrid search: full-text matches and nearest vectors."""


@dataclass(frozen=True)
class Semantic:
    """The vector side of a hybrid search: the query's vector and the model that made it."""

    vector: tuple[float, ...]
    model: str


def _scope(
    uow: SqlReadUnitOfWork,
    tenant_id: str,
    session_id: str | None,
    narrowing: MetadataNarrowing | None,
) -> tuple[int, ...] | None:
    """The keys of the sessions a search covers, ``None`` for every session of the tenant."""
    if session_id is not None:
        return (uow.sessions.head(tenant_id, session_id).pk,)
    if narrowing is None:
        return None
    pks = uow.sessions.matching(tenant_id, narrowing, MAX_NARROWED_SESSIONS + 1)
    if len(pks) > MAX_NARROWED_SESSIONS:
        raise InvalidSearchQueryError(
            f"the metadata matches more than {MAX_NARROWED_SESSIONS} sessions: narrow it "
            "further, or search the whole tenant without it"
        )
    return tuple(pks)


def _fused(
    uow: SqlReadUnitOfWork,
    tenant_id: str,
    query: SearchQuery,
    pks: tuple[int, ...] | None,
    semantic: Semantic,
    after: SearchKey | None,
) -> list[SearchRow]:
    """The fused candidates after ``after``, best first, each keyed by its fused score; a
    vector of a tombstoned entry is dropped here (the full-text side filters them in SQL)."""
    lexical = uow.search.candidates(
        tenant_id, query, session_pks=pks, after=None, limit=FUSION_DEPTH
    )
    scanned = uow.vectors.scan(tenant_id, semantic.model, pks, SCAN_CHUNK)
    nearest = uow.vectors.rows(top_by_cosine(scanned, semantic.vector, FUSION_DEPTH))
    withheld = _Withheld(uow, tenant_id)
    nearest = [r for r in nearest if r.key.source != 0 or not withheld.entry(r)]
    by_place = {(r.key.source, r.key.row): r for r in (*nearest, *lexical)}
    fused = fuse([[(r.key.source, r.key.row) for r in ranked] for ranked in (lexical, nearest)])
    # Ordered by key, not by fusion's tie rule, so a cursor (a key) continues the same order.
    rows = sorted(
        (replace(by_place[place], key=SearchKey(-score, *place)) for place, score in fused),
        key=lambda r: r.key,
    )
    return [r for r in rows if after is None or r.key > after]


class SearchService(Service):
    """Full-text search over a store's units of work (see :meth:`search`)."""

    def search(
        self,
        tenant_id: str,
        q: str | None,
        *,
        session_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        secrets: Iterable[str] = (),
        semantic: Semantic | None = None,
        narrowing: MetadataNarrowing | None = None,
    ) -> SearchPage:
        """One page of hits for ``q`` in the tenant's sessions (those whose metadata holds
        ``narrowing``'s pairs, with one), or in ``session_id`` alone.

        With ``semantic`` (the query's vector and its model) the search is hybrid: the best
        :data:`FUSION_DEPTH` full-text candidates and the :data:`FUSION_DEPTH` nearest vectors
        are fused by reciprocal rank (:func:`om_core.read.fusion.fuse`), and pages follow the
        fused order (so a hybrid search ends after at most twice that many hits).

        Messages of every branch of a session and the memory of its current branch are
        searched; tombstoned entries and revoked memory are never hits; snippets are redacted
        of ``secrets``. Raises :class:`~om_core.errors.InvalidSearchQueryError` for an empty,
        word-less or too long query, a limit outside ``1..MAX_SEARCH_LIMIT``, a foreign
        cursor, a ``narrowing`` of one session's search or one that matches more than
        :data:`~om_core.read.search_narrowing.MAX_NARROWED_SESSIONS` sessions, and
        :class:`~om_workers.errors.SessionNotFoundError` for a session the tenant does not
        have.
        """
        query = parse_query(q)
        check_limit(limit)
        after = decode_cursor(cursor)
        if narrowing is not None and session_id is not None:
            raise InvalidSearchQueryError("metadata narrows a tenant-wide search, not a session's")
        with self._units.read() as uow:
            uow.plan_for_search()
            pks = _scope(uow, tenant_id, session_id, narrowing)
            rows: Sequence[SearchRow]
            if semantic is not None:
                rows = _fused(uow, tenant_id, query, pks, semantic, after)[: limit + 1]
            else:
                rows = uow.search.candidates(
                    tenant_id, query, session_pks=pks, after=after, limit=limit + 1
                )
            page = rows[:limit]
            withheld = _Withheld(uow, tenant_id)
            visible = [r for r in page if r.key.source == 0 or not withheld.memory(r)]
        hits = _hits(visible, query, secrets)
        more = len(rows) > limit
        return SearchPage(hits=hits, next_cursor=page[-1].key.encode() if more else None)


def _hits(
    rows: Sequence[SearchRow], query: SearchQuery, secrets: Iterable[str]
) -> tuple[SearchHit, ...]:
    secrets = tuple(secrets)
    return tuple(hit for row in rows if (hit := _hit(row, query, secrets)) is not None)
