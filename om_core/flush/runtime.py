"""``ObservationalMemoryRuntime``: the flush pipeline of one session.

``flush()`` reads one :class:`~om_core.flush.unit_of_work.MemoryView` and runs, in order: observe
(chunked backlog, each chunk its own coverage), reflect, drop, bind new ids to the leaf work
scope, and (in process) the compaction gate. Each step appends at most one record per
chunk/run through the unit of work and folds it onto the view it holds, so no step reads the
session again. Exactly one flush runs at a time per runtime; a concurrent call returns at once
with the ``busy`` skip.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from om_core.errors import AppendNotVisibleError
from om_core.flush.prompts import CUSTOM_PROMPTS_VERSION, DEFAULT_PROMPTS, PromptSet
from om_core.flush.provider import Provider
from om_core.flush.unit_of_work import (
    AppendEntry,
    InMemoryUnitOfWork,
    MemoryUnitOfWork,
    MemoryView,
    SessionSource,
)
from om_core.flush.workers.chunking import max_sources_per_chunk, plan_chunks, prompt_budget
from om_core.flush.workers.dropper import drop_lowest_relevance, observation_tokens, run_dropper
from om_core.flush.workers.flush_state import (
    FlushResult,
    FlushState,
    WorkerSkip,
    default_compaction_due,
    estimated_input_tokens,
)
from om_core.flush.workers.jsonvalue import bounded_error
from om_core.flush.workers.observer import observer_system, run_observer
from om_core.flush.workers.reflector import run_reflector
from om_core.flush.workers.selection import (
    CredentialResolver,
    ResolvedWorker,
    WorkerConfig,
    resolve_worker,
)
from om_core.flush.workers.tool_loop import WorkerCall
from om_core.ledger.appending import record_entry
from om_core.ledger.fold import (
    Record,
    fold_ledger,
    is_eligible_observation_source,
    observations_uncovered_by_reflection,
)
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import (
    ObservationalMemoryLedger,
    ObservationsDropped,
    SessionEntry,
)
from om_core.ledger.tokens import estimate_entry_tokens
from om_core.policy.limits import WorkerLimits
from om_core.policy.redaction import normalize_secrets
from om_core.scopes.index import ScopeFold
from om_core.scopes.records import ScopeBound
from om_core.scopes.work_memory import has_host_scopes
from om_core.settings import ObservationalMemorySettings, resolve_settings

DebugSink = Callable[[str, Mapping[str, Any]], None]
DEFAULT_BACKOFF_AFTER = 3
BUSY = "busy"
BACKOFF = "backoff"
BELOW_THRESHOLD = "below_threshold"
HOST_SCOPES = "host_scopes"
NOTHING_REFLECTED = "nothing_reflected"


class ObservationalMemoryRuntime:
    """Explicit flush of one session's observational memory (see the module docstring).

    ``session`` is either a host's session (with ``append_entry``, which must append to the
    same branch ``session.get_entries()`` reads) or, without ``append_entry``, any
    :class:`~om_core.flush.unit_of_work.MemoryUnitOfWork` (the distributed store's). An append that
    does not land on the branch fails the flush closed (:class:`AppendNotVisibleError`,
    reported in ``FlushResult.error`` and ``last_error``). ``providers`` resolves provider
    names from settings groups; the reflector and dropper fall back to the observer's provider.
    ``compact`` (with ``should_compact`` deciding, else ``context.compactAfterTokens``) is the
    compaction step; it reads the host's branch, so it needs the host-session form. After
    ``backoff_after`` consecutive flushes that ran a worker but did not advance, flushes skip
    with ``backoff`` until the branch leaf changes. ``invalidated_ids`` (read once per flush:
    the tombstone port's withheld ids) keeps revoked entries out of the observer's input.
    ``prompts`` are the observer's and reflector's instructions when neither the worker
    config nor its settings group names its own (default:
    :data:`om_core.flush.prompts.DEFAULT_PROMPTS`).
    Raises :class:`TypeError` for a ``session`` that is neither.
    """

    def __init__(
        self,
        session: SessionSource | MemoryUnitOfWork,
        *,
        append_entry: AppendEntry | None = None,
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
        prompts: PromptSet = DEFAULT_PROMPTS,
    ) -> None:
        self.prompts = prompts
        self.unit_of_work = _unit_of_work(session, append_entry, invalidated_ids)
        self.settings = (
            settings
            if isinstance(settings, ObservationalMemorySettings)
            else resolve_settings(settings)
        )
        self.limits = limits or WorkerLimits(max_turns=self.settings.agent_max_turns)
        self.secrets = normalize_secrets(secrets)
        self._configs = {
            "observer": observation or WorkerConfig(),
            "reflector": reflection or WorkerConfig(),
            "dropper": dropper or WorkerConfig(),
        }
        self._providers = dict(providers or {})
        self._session_model = session_model
        self._credentials = credentials
        self._backoff_after = max(1, backoff_after)
        if compact is not None and not isinstance(self.unit_of_work, InMemoryUnitOfWork):
            raise TypeError("compact needs a host session (session with append_entry)")
        self._compact = compact
        self._should_compact = should_compact
        self._now = now
        self._new_entry_id = new_entry_id
        self._debug = debug
        self._lock = threading.Lock()
        self._stalled = 0
        self._stalled_leaf: str | None = None
        self.last_error: str | None = None

    @property
    def prompt_version(self) -> str:
        """The version of the instructions the observer and reflector run with: that of
        ``prompts``, or ``custom`` when a worker config or settings group replaces either."""
        groups = {"observer": self.settings.observation, "reflector": self.settings.reflection}
        if any(self._configs[name].instructions or g.instructions for name, g in groups.items()):
            return CUSTOM_PROMPTS_VERSION
        return self.prompts.version

    @property
    def session_id(self) -> str:
        """The session this runtime consolidates."""
        return self.unit_of_work.session_id

    def ledger(self, entries: Sequence[SessionEntry] | None = None) -> ObservationalMemoryLedger:
        """The folded ledger of the current branch (or of ``entries``), folded incrementally.

        For a host session this is the whole ledger, dropped observations and reflections
        included; over another unit of work it is the working ledger of its view.
        """
        uow = self.unit_of_work
        if isinstance(uow, InMemoryUnitOfWork):
            return uow.ledger(entries)
        return fold_ledger(entries) if entries is not None else uow.read().ledger

    @property
    def in_flight(self) -> bool:
        """True while a flush holds the pipeline."""
        return self._lock.locked()

    def flush(self, full_reflection_rebuild: bool = False, *, force: bool = False) -> FlushResult:
        """Run the pipeline once; never raises for worker, provider or append failures.

        ``full_reflection_rebuild`` reflects over every active observation instead of only
        those recorded after the last reflection coverage, below
        ``reflection.observationTokens`` too. ``force`` observes whatever is
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
        view = self.unit_of_work.read()
        if self._stalled >= self._backoff_after and view.leaf_id == self._stalled_leaf:
            state.skip("flush", BACKOFF)
            return state.result()
        steps: list[Callable[[FlushState, MemoryView], MemoryView]] = [
            lambda st, v: self._observe(st, v, force),
            lambda st, v: self._reflect(st, v, full_rebuild),
            self._drop,
            self._bind,
        ]
        for step in steps:
            try:
                view = step(state, view)
            except Exception as exc:  # a failed step wrote nothing; report it, go on
                self._report(state, exc)
                if isinstance(exc, AppendNotVisibleError):
                    break  # appends land elsewhere: no further step may write
        else:
            self._guarded(state, self._compaction_gate)
        self._track_progress(state, view)
        return state.result()

    def _guarded(self, state: FlushState, step: Callable[[FlushState], None]) -> None:
        try:
            step(state)
        except Exception as exc:
            self._report(state, exc)

    def _report(self, state: FlushState, exc: Exception) -> None:
        text = bounded_error(
            f"{type(exc).__name__}: {exc}", self.secrets, self.limits.max_error_bytes
        )
        state.errors.append(text)
        self.last_error = text
        self._emit("observational-memory:flush-error", {"error": text})

    def _track_progress(self, state: FlushState, view: MemoryView) -> None:
        workers_ran = any(name != "compaction" for name in state.ran)
        if state.appended and not state.errors:
            self._stalled = 0
        elif workers_ran or state.errors:
            self._stalled += 1
            self._stalled_leaf = view.leaf_id

    # -- steps: each takes the view and returns it with its own appends folded in -----------

    def _observe(self, state: FlushState, view: MemoryView, force: bool) -> MemoryView:
        # A revoked source never reaches the observer (nor, so, any new memory).
        withheld = view.invalidated_ids
        backlog = [e for e in view.unobserved if e.id not in withheld]
        pending = sum(
            estimate_entry_tokens(e) for e in backlog if is_eligible_observation_source(e)
        )
        threshold = 1 if force else self.settings.observation.message_tokens
        if pending < threshold:
            state.skip("observer", BELOW_THRESHOLD, f"{pending} of {threshold} tokens")
            return view
        worker = self._worker("observer", state)
        if worker is None:
            return view
        system = observer_system(worker.instructions, self.limits)
        chunks = plan_chunks(
            backlog,
            budget_bytes=prompt_budget(self.limits, system),
            max_sources=max_sources_per_chunk(self.limits),
            secrets=self.secrets,
        )
        state.ran.append("observer")
        state.observed_messages += sum(1 for e in backlog if is_eligible_observation_source(e))
        for chunk in chunks:
            record = run_observer(
                worker.provider,
                chunk,
                **self._call_options(worker),
                observed_at=self._now() if self._now else None,
            )
            view = self._append(record, state, view)
            state.observations.extend(o.id for o in record.observations)
        return view

    def _reflect(self, state: FlushState, view: MemoryView, full_rebuild: bool) -> MemoryView:
        ledger = view.ledger
        window = ledger.active_observations if full_rebuild else None
        window = window if window is not None else observations_uncovered_by_reflection(ledger)
        tokens, threshold = observation_tokens(window), self.settings.reflection.observation_tokens
        # A rebuild is asked for (a context that had to leave memory out): it runs now.
        if not window or (tokens < threshold and not full_rebuild):
            state.skip("reflector", BELOW_THRESHOLD, f"{tokens} of {threshold} tokens")
            return view
        worker = self._worker("reflector", state)
        if worker is None:
            return view
        state.ran.append("reflector")
        record = run_reflector(
            worker.provider,
            window,
            active=ledger.active_observations,
            **self._call_options(worker),
            reflected_at=self._now() if self._now else None,
            covers_up_to_id=view.leaf_id,
        )
        view = self._append(record, state, view)
        state.reflections.extend(r.id for r in record.reflections)
        return view

    def _drop(self, state: FlushState, view: MemoryView) -> MemoryView:
        active = view.ledger.active_observations
        pool, cap = observation_tokens(active), self.settings.context.observations_pool_max_tokens
        if pool <= cap:
            state.skip("dropper", BELOW_THRESHOLD, f"pool {pool} of {cap} tokens")
            return view
        if has_host_scopes(view.scope_map):
            state.skip("dropper", HOST_SCOPES)
            return view
        # Only observations a reflection has gone over may go: a reflection's recall still
        # returns a dropped support's messages, while an observation dropped before any
        # reflection would leave its messages neither shown nor one recall away. The rest of
        # the pool counts against the target but is kept until a reflection covers it.
        pending = set(view.ledger.pending_reflection_observation_ids)
        candidates = [o for o in active if o.id not in pending]
        if not candidates:
            state.skip("dropper", NOTHING_REFLECTED, f"pool {pool} of {cap} tokens")
            return view
        kept = pool - observation_tokens(candidates)
        target = max(1, self.settings.dropper.target_tokens - kept)
        record: ObservationsDropped | None
        if self.settings.dropper.policy == "lowest-relevance":
            state.ran.append("dropper")
            record = drop_lowest_relevance(candidates, target)
        else:
            worker = self._worker("dropper", state)
            if worker is None:
                return view
            state.ran.append("dropper")
            record = run_dropper(
                worker.provider,
                candidates,
                target_tokens=target,
                **self._call_options(worker),
            )
        if record is None:
            return view
        view = self._append(record, state, view)
        state.dropped.extend(record.observation_ids)
        return view

    def _bind(self, state: FlushState, view: MemoryView) -> MemoryView:
        """Bind this flush's new ids, once, to the current leaf scope (when scopes exist)."""
        refs = [f"om:{oid}" for oid in state.observations]
        refs += [f"reflection:{rid}" for rid in state.reflections]
        if not refs or not has_host_scopes(view.scope_map):
            return view
        record = ScopeBound(scope_id=view.scope_map.leaf, refs=tuple(refs))
        # The fold ignores a bind that breaks a rule (the 4,096-binds cap): fail loudly instead.
        ScopeFold.start(view.scope_map).check(record)
        return self._append(record, state, view)

    def _compaction_gate(self, state: FlushState) -> None:
        if self._compact is None:
            return
        assert isinstance(self.unit_of_work, InMemoryUnitOfWork)  # checked at construction
        entries = self.unit_of_work.entries()
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
        defaults = {"observer": self.prompts.observer, "reflector": self.prompts.reflector}
        if resolved.instructions is None and name in defaults:
            return dataclasses.replace(resolved, instructions=defaults[name])
        return resolved

    def _append(
        self, payload: Record | ScopeBound, state: FlushState, view: MemoryView
    ) -> MemoryView:
        """Append one memory record at the leaf; the view with it folded in."""
        now = self._now() if self._now else None
        entry = record_entry(payload, self.session_id, self._new_entry_id(), now)
        leaf = self.unit_of_work.append([entry])
        state.appended.append(entry.id)
        return view.after_append([entry], leaf)

    def _call_options(self, worker: ResolvedWorker) -> WorkerCall:
        """What every observer/reflector/dropper call takes from the runtime and the worker."""
        return {
            "session_id": self.session_id,
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


def _unit_of_work(
    session: SessionSource | MemoryUnitOfWork,
    append_entry: AppendEntry | None,
    invalidated_ids: Callable[[], Iterable[str]] | None,
) -> MemoryUnitOfWork:
    if append_entry is not None:
        return InMemoryUnitOfWork(session, append_entry, invalidated_ids)  # type: ignore[arg-type]
    if invalidated_ids is not None:
        raise TypeError("invalidated_ids goes with a host session; a unit of work reads its own")
    if not callable(getattr(session, "read", None)) or not callable(
        getattr(session, "append", None)
    ):
        raise TypeError("session needs append_entry, or must be a MemoryUnitOfWork")
    return session  # type: ignore[return-value]


__all__ = [
    "FlushResult",
    "MemoryUnitOfWork",
    "ObservationalMemoryRuntime",
    "SessionSource",
    "WorkerConfig",
    "WorkerSkip",
    "default_compaction_due",
    "estimated_input_tokens",
]
