"""Context and recall for one stored session, without reading its whole history.

A 100,000-entry session must answer in milliseconds: the ledger and scope map come from the
store's snapshot (plus the few entries after it), the recent window from the branch's tail,
and a recall reads only the span of branch around the sources it cites.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from om_core.flush.compaction import CompactionResult, ObservationalMemoryCompactionStrategy
from om_core.ledger.fold import is_eligible_observation_source
from om_core.ledger.ids import parse_memory_ref
from om_core.ledger.models import ObservationalMemoryLedger, SessionEntry
from om_core.policy.redaction import normalize_secrets
from om_core.read.commands import MemoryStatus, memory_status, memory_view
from om_core.read.context import Context, Unobserved, build_context_tail, check_budget
from om_core.read.context_memory import ContextMemory, MemorySelection
from om_core.read.paging import BranchPage, Detail, Direction, check_page_limit, recall_branch_page
from om_core.read.recall import RecallResult, recall_memory
from om_core.scopes.work_memory import Include
from om_core.settings import ObservationalMemorySettings
from om_workers.context_cache import (
    ContextCache,
    ContextKey,
    MemoryKey,
    context_cache,
    secrets_digest,
)
from om_workers.errors import SessionNotFoundError
from om_workers.store import ContextParts, ContextState, ContextVersion, SqlStore, tombstone_scope
from om_workers.tails import TAIL_FIRST_READ, TailReach, TailWalk, recent_tail


def session_context(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    *,
    settings: ObservationalMemorySettings,
    scope: str | None = None,
    include: Include = "self+ancestors",
    secrets: Iterable[str] = (),
    invalidated_ids: Iterable[str] = (),
    max_tokens: int | None = None,
) -> Context:
    """The context of a stored session (see :func:`om_core.read.context.build_context`): memory,
    every message memory does not cover yet and the last ``context.recentMessages``, within
    ``max_tokens`` (estimated tokens; ``None``: no budget). ``invalidated_ids`` are withheld
    besides those of the session's own tombstone scope, which are read with the rest.

    :func:`read_context`, then the build it may leave. Fails as :func:`read_context` does.
    """
    found = read_context(
        store,
        tenant_id,
        session_id,
        settings=settings,
        scope=scope,
        include=include,
        secrets=secrets,
        invalidated_ids=invalidated_ids,
        max_tokens=max_tokens,
    )
    return found if isinstance(found, Context) else found()


def read_context(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    *,
    settings: ObservationalMemorySettings,
    scope: str | None = None,
    include: Include = "self+ancestors",
    secrets: Iterable[str] = (),
    invalidated_ids: Iterable[str] = (),
    max_tokens: int | None = None,
) -> Context | ContextBuild:
    """The store's part of :func:`session_context`: the context this process's
    :func:`~om_workers.context_cache.context_cache` keeps for the session as it is now (one
    small read), else a :class:`ContextBuild` of the parts read, which builds the context
    without further I/O. So a caller on an event loop can read a local store there and hand
    only the build (pure CPU, reusing the kept memory part when only messages were appended)
    to a thread.

    Reads the stored ledger and the branch tail back to the observation cursor, never the
    whole history, in one read transaction; unobserved messages older than a budget can show
    are counted with one index range query. Raises the store's
    :class:`~om_workers.errors.SessionNotFoundError` (also for another tenant's session), the
    core's scope errors for an unknown ``scope`` or ``include``, and ``ValueError`` for a
    budget below the core's minimum.
    """
    check_budget(max_tokens)
    cache = context_cache(store)
    read = _ContextRead(
        tenant_id,
        session_id,
        settings=settings,
        scope=scope,
        include=include,
        secrets=normalize_secrets(secrets),
        invalidated_ids=frozenset(invalidated_ids),
        max_tokens=max_tokens,
    )
    keep = settings.context.recent_messages
    try:
        parts = store.read_context_parts(
            tenant_id,
            session_id,
            invalidation_scope=tombstone_scope(session_id),
            first_tail=max(TAIL_FIRST_READ, 4 * keep),
            tail_enough=read.enough,
            kept=read.look_up(cache),
        )
    except SessionNotFoundError:
        cache.forget(tenant_id, session_id)
        raise
    return read.kept() if parts is None else ContextBuild(read, cache, parts)


@dataclass(frozen=True)
class ContextBuild:
    """What is left of a context read that missed the cache: calling it builds the context
    from the parts read (no I/O; it may raise the core's scope errors) and keeps it."""

    read: _ContextRead
    cache: ContextCache
    parts: ContextParts

    @property
    def warm(self) -> bool:
        """Whether the memory part is kept, so the build only fits the recent block and the
        kept memory to the budget (about a millisecond); a cold build renders the branch's
        whole memory first, which grows with it."""
        return self.cache.holds_memory(self.read.memory_key(self.parts))

    def __call__(self) -> Context:
        return self.read.build(self.cache, self.parts)


@dataclass
class _ContextRead:
    """One context read: the key its version makes, the context kept under it (a hit) or the
    one built from the parts read (a miss)."""

    tenant_id: str
    session_id: str
    settings: ObservationalMemorySettings
    scope: str | None
    include: Include
    secrets: tuple[str, ...]
    invalidated_ids: frozenset[str]
    max_tokens: int | None
    _key: ContextKey | None = None
    _kept: Context | None = None
    _walk: TailWalk | None = None
    _unobserved_tokens: int | None = None

    def look_up(self, cache: ContextCache) -> Callable[[ContextVersion], bool]:
        """What the store asks, in the read's transaction, once it has read the session's
        version: whether a context built for it is kept (then nothing more is read)."""

        def kept(version: ContextVersion) -> bool:
            self._unobserved_tokens = version.info.unobserved_tokens
            self._key = self._context_key(version)
            self._kept = cache.kept_context(self._key)
            return self._kept is not None

        return kept

    def _context_key(self, version: ContextVersion) -> ContextKey:
        info = version.info
        return ContextKey(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            created_at=info.created_at,
            updated_at=info.updated_at,
            rewritten_at=info.rewritten_at,
            leaf_id=info.leaf_id,
            entry_count=info.entry_count,
            withheld=version.withheld.union(self.invalidated_ids),
            secrets=secrets_digest(self.secrets),
            settings=self.settings,
            scope=self.scope,
            include=self.include,
            max_tokens=self.max_tokens,
        )

    def enough(
        self, state: ContextState, tail: tuple[SessionEntry, ...], holds_cursor: bool
    ) -> bool:
        """Whether ``tail`` holds the recent window and reaches the observation cursor (or
        more unobserved tokens than the budget can show); ``holds_cursor``: the store found
        the cursor in it. Asked of the same read's tail as it doubles, walking only what the
        last question did not."""
        if self._walk is None:
            budget = self.max_tokens
            if (
                budget is not None
                and self._unobserved_tokens is not None
                and self._unobserved_tokens <= budget
            ):
                # Every unobserved message fits the budget (as the session row counts them):
                # the tail reaches the cursor (or the root) anyway, and summing their tokens
                # on the way back would not stop it sooner.
                budget = None
            reach = TailReach(state.ledger.observation_covers_up_to_id, budget)
            self._walk = TailWalk(self.settings.context.recent_messages, reach)
        return self._walk.holds(tail, reached=holds_cursor)

    def kept(self) -> Context:
        """The context kept for the version read (after :meth:`look_up` said so)."""
        if self._kept is None:
            raise RuntimeError("no context was kept for this read")
        return self._kept

    def memory_key(self, parts: ContextParts) -> MemoryKey:
        """The key of the memory part of ``parts``: the branch's memory as read."""
        key = self._key if self._key is not None else self._context_key(parts.version)
        state = parts.state
        return MemoryKey(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            created_at=key.created_at,
            rewritten_at=key.rewritten_at,
            snapshot_entry_id=state.snapshot_entry_id,
            memory_entry_ids=tuple(e.id for e in state.entries),
            withheld=key.withheld,
            secrets=key.secrets,
            scope=self.scope,
            include=self.include,
        )

    def build(self, cache: ContextCache, parts: ContextParts) -> Context:
        """The context of ``parts`` (read in the transaction that read the key's version),
        kept from now on; its memory part reused when the branch's memory is as kept."""
        key = self._key if self._key is not None else self._context_key(parts.version)
        state = parts.state
        memory_key = self.memory_key(parts)
        view: MemorySelection = {
            "ledger": state.ledger,
            "scope_map": state.scope_map,
            "scope": self.scope,
            "include": self.include,
        }
        memory = cache.memory(
            memory_key,
            lambda: ContextMemory(
                parts.tail, key.withheld, self.secrets, view, cache.earlier_memory(memory_key)
            ),
        )
        count, tokens, first = parts.older
        older = Unobserved(messages=count, tokens=tokens, first_id=first) if count else None
        tail = cache.tail_messages(memory_key, parts.tail, memory)
        built = build_context_tail(
            parts.tail, memory, self.settings, max_tokens=self.max_tokens, older=older, tail=tail
        )
        cache.keep_context(key, built)
        return built


def session_recall(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    memory_id: str,
    *,
    secrets: Iterable[str] = (),
    invalidated_ids: Iterable[str] = (),
) -> RecallResult:
    """Exact-id recall on a stored session, reading only the branch span its sources cover.

    Raises :class:`~om_core.errors.InvalidMemoryIdError` for a malformed id before any read,
    and the store's :class:`~om_workers.errors.SessionNotFoundError`.
    """
    bare = parse_memory_ref(memory_id)
    ledger = store.read_context_state(tenant_id, session_id).ledger
    span = store.read_span(tenant_id, session_id, _source_ids(ledger, bare))
    return recall_memory(span, bare, invalidated_ids, secrets, ledger=ledger)


def _source_ids(ledger: ObservationalMemoryLedger, memory_id: str) -> list[str]:
    if memory_id in ledger.observations_by_id:
        return list(ledger.observations_by_id[memory_id].source_entry_ids)
    reflection = ledger.reflections_by_id.get(memory_id)
    if reflection is None:
        return []
    return [
        source
        for oid in reflection.observation_ids
        if oid in ledger.observations_by_id
        for source in ledger.observations_by_id[oid].source_entry_ids
    ]


def session_status(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    *,
    settings: ObservationalMemorySettings,
    invalidated_ids: Iterable[str] = (),
    in_flight: bool = False,
) -> MemoryStatus:
    """``om:status`` of a stored session from its snapshot and tail (no history read).

    Raises the store's :class:`~om_workers.errors.SessionNotFoundError`.
    """
    state = store.read_context_state(tenant_id, session_id)
    tail = recent_tail(store, tenant_id, session_id, settings.context.recent_messages)
    return memory_status(tail, settings, invalidated_ids, in_flight=in_flight, ledger=state.ledger)


def session_view(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    mode: str,
    *,
    settings: ObservationalMemorySettings,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> str:
    """``om:view`` of a stored session from its snapshot and tail (no history read).

    Raises the store's :class:`~om_workers.errors.SessionNotFoundError`.
    """
    state = store.read_context_state(tenant_id, session_id)
    tail = recent_tail(store, tenant_id, session_id, settings.context.recent_messages)
    return memory_view(
        tail,
        mode,
        settings,
        invalidated_ids,
        secrets,
        ledger=state.ledger,
        scope_map=state.scope_map,
    )


def session_compaction(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    keep_recent_entries: int,
    *,
    settings: ObservationalMemorySettings,
    invalidated_ids: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> CompactionResult:
    """A compaction of a stored session from its snapshot and the tail holding the last
    ``keep_recent_entries`` messages (no history read); the caller appends its entry.

    Raises the store's :class:`~om_workers.errors.SessionNotFoundError` and
    :class:`~om_core.errors.CapExceededError` when the memory cannot fit its cap.
    """
    state = store.read_context_state(tenant_id, session_id)
    tail = recent_tail(store, tenant_id, session_id, keep_recent_entries)
    strategy = ObservationalMemoryCompactionStrategy(keep_recent_entries, settings)
    return strategy.compact(
        tail,
        invalidated_ids=invalidated_ids,
        secrets=secrets,
        scope_map=state.scope_map,
        ledger=state.ledger,
    )


def session_page(
    store: SqlStore,
    tenant_id: str,
    session_id: str,
    cursor: str,
    *,
    limit: int,
    direction: Direction = "forward",
    detail: Detail = "summary",
    secrets: Iterable[str] = (),
) -> BranchPage:
    """A page of messages around ``cursor``, reading only a span of the branch around it.

    The span widens until it holds one message more than the page (so ``has_more`` is
    exact) or reaches the end of the branch. Fails like
    :func:`~om_core.read.paging.recall_branch_page`, and with the store's
    :class:`~om_workers.errors.SessionNotFoundError`.
    """
    check_page_limit(limit)
    leaf = store.get_session(tenant_id, session_id).leaf_id
    margin = 4 * limit + 32
    while True:
        span = store.read_span(tenant_id, session_id, [cursor], margin=margin)
        if _page_fits(span, cursor, limit, direction, leaf):
            return recall_branch_page(span, cursor, limit, direction, detail, secrets)
        margin *= 4


def _page_fits(
    span: Sequence[SessionEntry], cursor: str, limit: int, direction: Direction, leaf: str | None
) -> bool:
    position = next((i for i, e in enumerate(span) if e.id == cursor), None)
    if position is None:
        return True  # not on the branch: the page call reports it
    if direction == "forward":
        side, at_end = span[position + 1 :], bool(span) and span[-1].id == leaf
    else:
        side, at_end = span[:position], bool(span) and span[0].parent_id is None
    return at_end or sum(1 for e in side if is_eligible_observation_source(e)) > limit
