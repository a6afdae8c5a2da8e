"""Full-text search: of one session (``GET /v1/sessions/{id}/search``) and of the tenant
(``GET /v1/search``).

Hits are message entry ids and memory ids, so an agent searches, then pages to the message or
recalls the memory by id. The store applies every rule a read obeys (tenancy, tombstones,
revoked memory, redaction of the secrets the API knows); a query it cannot run is a 422 with
the reason.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from om_api.schemas import SearchHitOut, SearchPage
from om_api.server.auth import TenantId
from om_api.server.routes import SessionPath, error_answers
from om_api.server.state import ApiState, State
from om_core.policy.redaction import redact
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, parse_query
from om_core.read.search import SearchPage as CorePage
from om_core.read.search_narrowing import (
    MAX_NARROWED_SESSIONS,
    MAX_NARROWING_PAIRS,
    MetadataNarrowing,
    parse_narrowing,
)
from om_workers.embeddings import EmbeddingsOffError
from om_workers.store.search import Semantic

router = APIRouter(prefix="/v1", tags=["search"])
ERRORS = error_answers(401, 404, 422)

SearchText = Annotated[
    str | None,
    Query(
        description=f"Words to search for (1..{MAX_QUERY_CHARS} characters); any word matches "
        "and every character that is not a letter or digit separates words, so quotes, `*`, "
        "`:`, parentheses and AND/OR/NOT/NEAR are plain text."
    ),
]
SearchLimit = Annotated[int, Query(description=f"Hits per page (1..{MAX_SEARCH_LIMIT}).")]
SearchCursor = Annotated[str | None, Query(description="`next_cursor` of the previous page.")]


SearchMode = Annotated[
    Literal["lexical", "hybrid"] | None,
    Query(
        description="`lexical` (full text, the default) or `hybrid` (full text and nearest "
        "vectors fused by reciprocal rank; needs OM_EMBEDDINGS_PROVIDER)."
    ),
]


SearchMetadata = Annotated[
    list[str] | None,
    Query(
        description=f"`key:value`, repeatable (at most {MAX_NARROWING_PAIRS}): only the "
        "sessions whose metadata holds every key with exactly that string value (at most "
        f"{MAX_NARROWED_SESSIONS} sessions); keys are letters, digits, `_`, `.` and `-`."
    ),
]


def _semantic(state: ApiState, q: str | None, mode: str | None) -> Semantic | None:
    """The query's vector for a hybrid search (``None``: lexical). The query is checked
    first, so a bad one costs no model call, and embedded with the known secrets redacted."""
    embedder = state.services.embedder()
    if mode == "hybrid" and embedder is None:
        raise EmbeddingsOffError(
            "hybrid search needs embeddings: this server runs with OM_EMBEDDINGS_PROVIDER=none"
        )
    if mode != "hybrid" or embedder is None:
        return None
    parse_query(q)
    vector = embedder.embed_query(redact(str(q), state.secrets))
    return Semantic(vector=vector, model=embedder.name)


def _page(
    state: ApiState,
    tenant_id: str,
    session_id: str | None,
    q: str | None,
    limit: int,
    cursor: str | None,
    mode: str | None = None,
    narrowing: MetadataNarrowing | None = None,
) -> SearchPage:
    found: CorePage = state.store.search(
        tenant_id,
        q,
        session_id=session_id,
        limit=limit,
        cursor=cursor,
        secrets=state.secrets,
        semantic=_semantic(state, q, mode),
        narrowing=narrowing,
    )
    hits = [
        SearchHitOut(
            id=hit.id,
            session_id=hit.session_id,
            kind=hit.kind,
            snippet=hit.snippet,
            score=hit.score,
            created_at=hit.created_at,
            source_ids=list(hit.source_ids) if hit.source_ids is not None else None,
        )
        for hit in found.hits
    ]
    return SearchPage(hits=hits, next_cursor=found.next_cursor)


@router.get("/sessions/{session_id}/search", response_model=SearchPage, responses=ERRORS)
def search_session(
    state: State,
    tenant_id: TenantId,
    session_id: SessionPath,
    q: SearchText = None,
    limit: SearchLimit = 20,
    cursor: SearchCursor = None,
    mode: SearchMode = None,
) -> SearchPage:
    """Search one session's messages (every branch) and memory (current branch), best first.
    Tombstoned entries and the memory they support are never hits. 422: empty query, no word
    in it, longer than the limit, a limit out of range, a cursor no search returned, or
    `mode=hybrid` with embeddings off; 404: no such session; 503: the embeddings endpoint is
    down (hybrid)."""
    return _page(state, tenant_id, session_id, q, limit, cursor, mode)


@router.get("/search", response_model=SearchPage, responses=ERRORS)
def search_tenant(
    state: State,
    tenant_id: TenantId,
    q: SearchText = None,
    limit: SearchLimit = 20,
    cursor: SearchCursor = None,
    mode: SearchMode = None,
    metadata: SearchMetadata = None,
) -> SearchPage:
    """Search every session of the tenant, as the session search does (same rules, same
    422s), or with `metadata` only the sessions whose metadata holds those values. 422 also
    for a malformed `metadata` pair, or one matching more sessions than the limit."""
    narrowing = parse_narrowing(metadata)
    return _page(state, tenant_id, None, q, limit, cursor, mode, narrowing)
