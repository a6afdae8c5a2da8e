"""``ObservationalMemoryRuntime``: the in-process flush pipeline of one session.

``flush()`` reads the current branch and runs, in order: observe (chunked backlog, each chunk
its own coverage), reflect, drop, bind new ids to the leaf work scope, and the compaction gate.
Each step appends at most one entry per chunk/run, and every append is checked to be the
session leaf before the next step reads the branch again. Exactly one flush runs at a time
per runtime; a concurrent call returns at once with the ``busy`` skip.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from om_core.appending import append_checked
from om_core.errors import AppendNotVisibleError
from om_core.ids import create_memory_id
from om_core.ledger import (
    Record,
    fold_ledger,
    is_eligible_observation_source,
    observations_uncovered_by_reflection,
    unscanned_entries,
)
from om_core.limits import WorkerLimits
from om_core.models import (
    ObservationalMemoryLedger,
    ObservationsDropped,
    SessionEntry,
)
from om_core.provider import Provider
from om_core.redaction import normalize_secrets
from om_core.scopes import ScopeBound, ScopeFold, fold_work_scope_map
from om_core.settings import ObservationalMemorySettings, resolve_settings
from om_core.tokens import estimate_entry_tokens
from om_core.work_memory import has_host_scopes
from om_core.workers.chunking import max_sources_per_chunk, plan_chunks, prompt_budget
from om_core.workers.dropper import drop_lowest_relevance, observation_tokens, run_dropper
from om_core.workers.flush_state import (
    FlushResult,
    FlushState,
    WorkerSkip,
    default_compaction_due,
    estimated_input_tokens,
)
from om_core.workers.jsonvalue import bounded_error
from om_core.workers.observer import observer_system, run_observer
from om_core.workers.reflector import run_reflector
from om_core.workers.selection import (
    CredentialResolver,
    ResolvedWorker,
    WorkerConfig,
    resolve_worker,
)

AppendEntry = Callable[[SessionEntry], object]
DebugSink = Callable[[str, Mapping[str, Any]], None]
DEFAULT_BACKOFF_AFTER = 3
BUSY = "busy"
BACKOFF = "backoff"
BELOW_THRESHOLD = "below_threshold"
HOST_SCOPES = "host_scopes"


class SessionSource(Protocol):
    """What the runtime reads: the session id and its current branch, root to leaf."""

    @property
    def id(self) -> str: ...

    def get_entries(self) -> Sequence[SessionEntry]: ...


class ObservationalMemoryRuntime:
    """Explicit flush of one session's observational memory (see the module docstring).

    ``append_entry`` must append to the same branch ``session.get_entries()`` reads; an append
    that does not land on that branch fails the flush closed (:class:`AppendNotVisibleError`,
    reported in ``FlushResult.error`` and ``last_error``). ``providers`` resolves provider
    names from settings groups; the reflector and dropper fall back to the observer's provider.
    ``compact`` (with ``should_compact`` deciding, else ``context.compactAfterTokens``) is the
    compaction step. After ``backoff_after`` consecutive flushes that ran a worker but did not
    advance, flushes skip with ``backoff`` until the branch leaf changes. ``invalidated_ids``
    (read once per flush: the tombstone port's withheld ids) keeps revoked entries out of the
    observer's input.
    """

    def __init__(
        self,
        session: SessionSource,
        *,
        append_entry: AppendEntry,
        settings: ObservationalMemorySettings | Mapping[str, Any] | None = None,
        observation: WorkerConfig | None = None,
        reflection: WorkerConfig | None = None,
        dropper: WorkerConfig | None = None,
        providers: Mapping[str, Provider] | None = None,
        session_model: str | None = None,
        limits: WorkerLimits | None = None,
        secrets: Iterable[str] = (),
        credentials: CredentialResolver | None = None,
        backoff_after: int = DEFAULT_BACKOFF_AFTER,
        compact: Callable[[], object] | None = None,
        should_compact: Callable[[Sequence[SessionEntry]], bool] | None = None,
        now: Callable[[], str] | None = None,
        new_entry_id: Callable[[], str] = create_memory_id,
        debug: DebugSink | None = None,
        invalidated_ids: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.session = session
        self._invalidated = invalidated_ids
        self.settings = (
            settings
            if isinstance(settings, ObservationalMemorySettings)
            else resolve_settings(settings)
        )
        self.limits = limits or WorkerLimits(max_turns=self.settings.agent_max_turns)
        self.secrets = normalize_secrets(secrets)
        self._append = append_entry
        self._configs = {
            "observer": observation or WorkerConfig(),
            "reflector": reflection or WorkerConfig(),
            "dropper": dropper or WorkerConfig(),
        }
        self._providers = dict(providers or {})
        self._session_model = session_model
        self._credentials = credentials
        self._backoff_after = max(1, backoff_after)
        self._compact = compact
        self._should_compact = should_compact
        self._now = now
        self._new_entry_id = new_entry_id
        self._debug = debug
        self._lock = threading.Lock()
        self._stalled = 0
        self._stalled_leaf: str | None = None
        self.last_error: str | None = None
        self._cache: tuple[int, str, ObservationalMemoryLedger] | None = None

    def ledger(self, entries: Sequence[SessionEntry] | None = None) -> ObservationalMemoryLedger:
        """The folded ledger of the current branch (or of ``entries``), folded incrementally.

        The last fold is kept with the branch length and leaf it saw; when the branch still
        starts with that prefix only the new entries are folded, so a long session costs
        O(new entries) per flush instead of O(branch). Any other branch is folded in full.
        """
        branch = self._entries() if entries is None else entries
        cache = self._cache
        if (
            cache is not None
            and 0 < cache[0] <= len(branch)
            and branch[cache[0] - 1].id == cache[1]
        ):
            ledger = fold_ledger(branch[cache[0] :], initial=cache[2])
        else:
            ledger = fold_ledger(branch)
        if branch:
            self._cache = (len(branch), branch[-1].id, ledger)
        return ledger

    @property
    def in_flight(self) -> bool:
        """True while a flush holds the pipeline."""
        return self._lock.locked()

    def flush(self, full_reflection_rebuild: bool = False, *, force: bool = False) -> FlushResult:
        """Run the pipeline once; never raises for worker, provider or append failures.

        ``full_reflection_rebuild`` reflects over every active observation instead of only
        those recorded after the last reflection coverage. ``force`` observes whatever is
        unscanned now, below ``observation.messageTokens`` too (a host ending a session).
        """
        if not self._lock.acquire(blocking=False):
            return FlushResult(skipped=(WorkerSkip(worker="flush", reason=BUSY),))
        try:
            return self._flush_locked(full_reflection_rebuild, force)
        finally:
            self._lock.release()

    def _flush_locked(self, full_rebuild: bool, force: bool) -> FlushResult:
        state = FlushState()
        leaf = self._leaf_id()
        if self._stalled >= self._backoff_after and leaf == self._stalled_leaf:
            state.skip("flush", BACKOFF)
            return state.result()
        steps: list[Callable[[FlushState], None]] = [
            lambda st: self._observe(st, force),
            lambda st: self._reflect(st, full_rebuild),
            self._drop,
            self._bind,
            self._compaction_gate,
        ]
        for step in steps:
            try:
                step(state)
            except Exception as exc:  # a failed step wrote nothing; report it, go on
                self._report(state, exc)
                if isinstance(exc, AppendNotVisibleError):
                    break  # appends land elsewhere: no further step may write
        self._track_progress(state)
        return state.result()

    def _report(self, state: FlushState, exc: Exception) -> None:
        text = bounded_error(
            f"{type(exc).__name__}: {exc}", self.secrets, self.limits.max_error_bytes
        )
        state.errors.append(text)
        self.last_error = text
        self._emit("observational-memory:flush-error", {"error": text})

    def _track_progress(self, state: FlushState) -> None:
        workers_ran = any(name != "compaction" for name in state.ran)
        if state.appended and not state.errors:
            self._stalled = 0
        elif workers_ran or state.errors:
            self._stalled += 1
            self._stalled_leaf = self._leaf_id()

    # -- steps ------------------------------------------------------------------------------

    def _observe(self, state: FlushState, force: bool) -> None:
        entries = self._entries()
        backlog = unscanned_entries(entries, self.ledger(entries))
        if self._invalidated is not None:
            # A revoked source never reaches the observer (nor, so, any new memory).
            withheld = frozenset(self._invalidated())
            backlog = [e for e in backlog if e.id not in withheld]
        pending = sum(
            estimate_entry_tokens(e) for e in backlog if is_eligible_observation_source(e)
        )
        threshold = 1 if force else self.settings.observation.message_tokens
        if pending < threshold:
            state.skip("observer", BELOW_THRESHOLD)
            return
        worker = self._worker("observer", state)
        if worker is None:
            return
        system = observer_system(worker.instructions, self.limits)
        chunks = plan_chunks(
            backlog,
            budget_bytes=prompt_budget(self.limits, system),
            max_sources=max_sources_per_chunk(self.limits),
            secrets=self.secrets,
        )
        state.ran.append("observer")
        for chunk in chunks:
            record = run_observer(
                worker.provider,
                chunk,
                **self._call_options(worker),
                observed_at=self._now() if self._now else None,
            )
            self._append_record(record, state)
            state.observations.extend(o.id for o in record.observations)

    def _reflect(self, state: FlushState, full_rebuild: bool) -> None:
        entries = self._entries()
        ledger = self.ledger(entries)
        window = ledger.active_observations if full_rebuild else None
        window = window if window is not None else observations_uncovered_by_reflection(ledger)
        if not window or observation_tokens(window) < self.settings.reflection.observation_tokens:
            state.skip("reflector", BELOW_THRESHOLD)
            return
        worker = self._worker("reflector", state)
        if worker is None:
            return
        state.ran.append("reflector")
        record = run_reflector(
            worker.provider,
            window,
            active=ledger.active_observations,
            **self._call_options(worker),
            reflected_at=self._now() if self._now else None,
            covers_up_to_id=entries[-1].id if entries else None,
        )
        self._append_record(record, state)
        state.reflections.extend(r.id for r in record.reflections)

    def _drop(self, state: FlushState) -> None:
        entries = self._entries()
        active = self.ledger(entries).active_observations
        if observation_tokens(active) <= self.settings.context.observations_pool_max_tokens:
            state.skip("dropper", BELOW_THRESHOLD)
            return
        if has_host_scopes(fold_work_scope_map(entries)):
            state.skip("dropper", HOST_SCOPES)
            return
        target = self.settings.dropper.target_tokens
        record: ObservationsDropped | None
        if self.settings.dropper.policy == "lowest-relevance":
            state.ran.append("dropper")
            record = drop_lowest_relevance(active, target)
        else:
            worker = self._worker("dropper", state)
            if worker is None:
                return
            state.ran.append("dropper")
            record = run_dropper(
                worker.provider,
                active,
                target_tokens=target,
                **self._call_options(worker),
            )
        if record is not None:
            self._append_record(record, state)
            state.dropped.extend(record.observation_ids)

    def _bind(self, state: FlushState) -> None:
        """Bind this flush's new ids, once, to the current leaf scope (when scopes exist)."""
        refs = [f"om:{oid}" for oid in state.observations]
        refs += [f"reflection:{rid}" for rid in state.reflections]
        if not refs:
            return
        scope_map = fold_work_scope_map(self._entries())
        if not has_host_scopes(scope_map):
            return
        record = ScopeBound(scope_id=scope_map.leaf, refs=tuple(refs))
        # The fold ignores a bind that breaks a rule (the 4,096-binds cap): fail loudly instead.
        ScopeFold.start(scope_map).check(record)
        self._append_payload(record, state)

    def _compaction_gate(self, state: FlushState) -> None:
        if self._compact is None:
            return
        entries = self._entries()
        try:
            due = (
                self._should_compact(entries)
                if self._should_compact is not None
                else default_compaction_due(entries, self.settings)
            )
        except Exception as exc:  # a raising gate decides "no" and says so, never a guess
            text = bounded_error(str(exc), self.secrets, self.limits.max_error_bytes)
            self._emit("observational-memory:compaction-trigger-error", {"error": text})
            due = False
        if due:
            self._compact()
            state.ran.append("compaction")
            state.compacted = True

    # -- helpers ----------------------------------------------------------------------------

    def _worker(self, name: str, state: FlushState) -> ResolvedWorker | None:
        groups = {
            "observer": self.settings.observation,
            "reflector": self.settings.reflection,
            "dropper": self.settings.dropper,
        }
        resolved = resolve_worker(
            self._configs[name],
            groups[name],
            providers=self._providers,
            fallback_provider=self._configs["observer"].provider,
            session_model=self._session_model,
            credentials=self._credentials,
        )
        if isinstance(resolved, str):
            state.skip(name, resolved)
            return None
        return resolved

    def _entries(self) -> Sequence[SessionEntry]:
        return self.session.get_entries()

    def _leaf_id(self) -> str | None:
        entries = self._entries()
        return entries[-1].id if entries else None

    def _append_record(self, record: Record, state: FlushState) -> None:
        self._append_payload(record, state)

    def _append_payload(self, payload: Record | ScopeBound, state: FlushState) -> None:
        """Append one custom entry at the leaf (see :func:`append_checked`)."""
        entry = SessionEntry(
            id=self._new_entry_id(),
            session_id=self.session.id,
            parent_id=None,
            kind="custom",
            created_at=self._now() if self._now else None,
            data=payload.to_json_dict(),
        )
        append_checked(self._append, self._entries, entry)
        state.appended.append(entry.id)

    def _call_options(self, worker: ResolvedWorker) -> dict[str, Any]:
        """What every observer/reflector/dropper call takes from the runtime and the worker."""
        return {
            "session_id": self.session.id,
            "model": worker.model,
            "limits": self.limits,
            "secrets": self.secrets,
            "instructions": worker.instructions,
            "options": worker.options,
            "credential": worker.credential,
        }

    def _emit(self, event: str, data: Mapping[str, Any]) -> None:
        if self._debug is not None:
            self._debug(event, data)


__all__ = [
    "FlushResult",
    "ObservationalMemoryRuntime",
    "SessionSource",
    "WorkerConfig",
    "WorkerSkip",
    "default_compaction_due",
    "estimated_input_tokens",
]
