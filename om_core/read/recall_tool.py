"""The optional ``recall`` tool: exact-id recall, current-branch paging or (when the host
gives a search) a word search whose hits are ids to recall, one per call."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from om_core.errors import AmbiguousInputError, InvalidInputError, WrongSessionError
from om_core.ledger.ids import parse_memory_ref
from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import normalize_secrets
from om_core.read.paging import check_page_request, recall_branch_page
from om_core.read.recall import recall_memory, recall_shared_memory
from om_core.read.search import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, SearchPage, check_limit
from om_core.scopes.shared import SharedScopeMemory
from om_core.settings import DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT

GetEntries = Callable[[str], Sequence[SessionEntry]]
GetInvalidated = Callable[[str], Iterable[str]]
GetShared = Callable[[str], Sequence[SharedScopeMemory]]
Search = Callable[[str, str, int], SearchPage]
"""``search(session_id, query, limit)``: the host's full-text search of that session (or, as
``hybrid_search``, its words-and-vectors search)."""
SEARCH_MODES = ("lexical", "hybrid")
"""The values of a query's ``mode``: the host's ``search`` or its ``hybrid_search``."""

RECALL_TOOL_NAME = "recall"
_PAGE_KEYS = frozenset({"cursor", "limit", "direction", "detail"})
_SEARCH_LIMIT = 10


class RecallMemoryTool:
    """Recall memory by exact id, or page raw messages around a cursor. No topic search.

    ``get_entries(session_id)`` returns that session's current branch; entries of any other
    session make the call fail closed (:class:`WrongSessionError`). Arguments must hold
    exactly one of ``id`` or ``cursor`` (:class:`AmbiguousInputError` otherwise); page
    arguments are only valid with ``cursor``. Results are JSON-ready dicts with secrets redacted.
    ``get_shared(session_id)`` (resolved shared scopes) extends exact-id recall to memory
    bound to a granted shared scope; paging stays on the current branch. With ``search``,
    ``query`` (and an optional ``limit``) is a third mode: the session's hits, best first,
    each an id the next call can recall or page from; with ``hybrid_search`` too, the query
    takes ``mode`` (``lexical``, the default, or ``hybrid``: that search runs instead).
    """

    def __init__(
        self,
        *,
        get_entries: GetEntries,
        secrets: Iterable[str] = (),
        page_limit: int = DEFAULT_PAGE_LIMIT,
        get_invalidated_ids: GetInvalidated | None = None,
        get_shared: GetShared | None = None,
        search: Search | None = None,
        hybrid_search: Search | None = None,
    ) -> None:
        self._get_entries = get_entries
        self._secrets = normalize_secrets(secrets)
        self._page_limit = page_limit
        self._get_invalidated = get_invalidated_ids
        self._get_shared = get_shared
        self._search = search
        self._hybrid_search = hybrid_search

    @property
    def definition(self) -> dict[str, Any]:
        """The tool's name, description and JSON-schema parameters, for a provider request."""
        if self._search is not None:
            return self._search_definition()
        return {
            "name": RECALL_TOOL_NAME,
            "description": (
                "Recall the exact raw messages behind a memory id (om:<id> or "
                "reflection:<id>), or page raw messages around a message entry id. "
                "Give exactly one of id or cursor. There is no topic search."
            ),
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string"},
                    "cursor": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT},
                    "direction": {"type": "string", "enum": ["forward", "backward"]},
                    "detail": {"type": "string", "enum": ["summary", "full"]},
                },
            },
        }

    def _search_definition(self) -> dict[str, Any]:
        definition: dict[str, Any] = {
            "name": RECALL_TOOL_NAME,
            "description": (
                "Recall the exact raw messages behind a memory id (om:<id> or "
                "reflection:<id>), page raw messages around a message entry id, or search "
                "past messages and memory by words (query). Give exactly one of id, cursor "
                "or query; a search hit's id is then recalled (memory) or used as a cursor "
                "(message)."
            ),
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string"},
                    "cursor": {"type": "string"},
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT},
                    "direction": {"type": "string", "enum": ["forward", "backward"]},
                    "detail": {"type": "string", "enum": ["summary", "full"]},
                },
            },
        }
        if self._hybrid_search is not None:
            definition["description"] += (
                " With query, mode hybrid also finds by meaning (default: lexical, by words)."
            )
            definition["parameters"]["properties"]["mode"] = {
                "type": "string",
                "enum": list(SEARCH_MODES),
            }
        return definition

    def _searcher(self, mode: Any, lexical: Search) -> Search:
        """The host's search for ``mode`` (``lexical`` for the default); raises
        :class:`InvalidInputError` for another value or a hybrid mode without a hybrid search."""
        if mode not in SEARCH_MODES:
            raise InvalidInputError(f"mode must be one of {list(SEARCH_MODES)}")
        if mode == "lexical":
            return lexical
        if self._hybrid_search is None:
            raise InvalidInputError("this recall tool has no hybrid search: use mode lexical")
        return self._hybrid_search

    def _query(self, session_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self._search is None:
            raise InvalidInputError("this recall tool has no search: give an id or a cursor")
        if set(arguments) - {"query", "limit", "mode"}:
            raise AmbiguousInputError("only 'limit' and 'mode' go with 'query'")
        search = self._searcher(arguments.get("mode", "lexical"), self._search)
        query, limit = arguments["query"], arguments.get("limit", _SEARCH_LIMIT)
        if not isinstance(query, str):
            raise InvalidInputError("query must be a string")
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise InvalidInputError(f"limit must be an integer within 1..{MAX_SEARCH_LIMIT}")
        page = search(session_id, query, check_limit(limit))
        hits = [
            {
                "id": hit.id,
                "kind": hit.kind,
                "snippet": hit.snippet,
                **({"sourceIds": list(hit.source_ids)} if hit.source_ids is not None else {}),
            }
            for hit in page.hits
        ]
        return {"query": query, "hits": hits}

    def __call__(self, session_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run one recall for ``session_id``; typed errors for every invalid request
        (:class:`~om_core.errors.InvalidSearchQueryError` for a query search refuses)."""
        if not isinstance(arguments, Mapping):
            raise InvalidInputError("recall arguments must be an object")
        if "query" in arguments and not ({"id", "cursor"} & set(arguments)):
            return self._query(session_id, arguments)
        unknown = set(arguments) - _PAGE_KEYS - {"id", "query"}
        if unknown:
            raise InvalidInputError(f"unknown recall arguments: {sorted(unknown)}")
        has_id, has_cursor = "id" in arguments, "cursor" in arguments
        if has_id == has_cursor or "query" in arguments:
            raise AmbiguousInputError("recall needs exactly one of 'id' or 'cursor'")
        if has_id and set(arguments) != {"id"}:
            raise AmbiguousInputError("page arguments are only valid with 'cursor'")
        # Everything the arguments alone can refute is refuted before any host callback runs:
        # an invalid id or page request never reads the branch.
        if has_id:
            memory_id = parse_memory_ref(arguments["id"])
            entries = self._entries(session_id)
            invalidated = self._get_invalidated(session_id) if self._get_invalidated else ()
            result = recall_memory(entries, memory_id, invalidated, self._secrets)
            if result.reason == "not_found" and self._get_shared is not None:
                # Granted shared scopes are the one exception to single-branch recall.
                shared = self._get_shared(session_id)
                result = recall_shared_memory(shared, result.id, invalidated, self._secrets)
            return result.to_json_dict()
        cursor = arguments["cursor"]
        if not isinstance(cursor, str):
            raise InvalidInputError("cursor must be an entry id string")
        limit, direction, detail = check_page_request(
            arguments.get("limit", self._page_limit),
            arguments.get("direction", "forward"),
            arguments.get("detail", "summary"),
        )
        page = recall_branch_page(
            self._entries(session_id),
            cursor,
            limit=limit,
            direction=direction,
            detail=detail,
            secrets=self._secrets,
        )
        return page.to_json_dict()

    def _entries(self, session_id: str) -> Sequence[SessionEntry]:
        entries = self._get_entries(session_id)
        foreign = next((e for e in entries if e.session_id != session_id), None)
        if foreign is not None:
            raise WrongSessionError(
                f"entries for session {session_id!r} include one of another session"
            )
        return entries
