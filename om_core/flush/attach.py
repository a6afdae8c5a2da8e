"""``ObservationalMemory(...).attach(session, ...)``: one activation for a host session.

Attaching wires what the TypeScript package's ``createObservationalMemory().attach()`` wires:
a proxied session whose ``run`` / ``prompt`` / ``stream`` / ``compact`` flush memory after they
complete, the runtime (observe/reflect/drop/bind, then the compact-when gate), the compaction
strategy, and a context provider rendering the ``observational-memory`` and
``recent-messages`` blocks.
Constructing or attaching starts nothing; only a completed proxied call (or an explicit
``flush()``) runs workers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationError

from om_core.errors import InvalidInputError, InvalidTriggerError
from om_core.flush.compaction import ObservationalMemoryCompactionStrategy
from om_core.flush.provider import Provider
from om_core.flush.runtime import (
    DebugSink,
    FlushResult,
    ObservationalMemoryRuntime,
    WorkerSkip,
    estimated_input_tokens,
)
from om_core.flush.unit_of_work import AppendEntry, SessionSource
from om_core.flush.workers.selection import CredentialResolver, WorkerConfig
from om_core.ledger.appending import append_checked
from om_core.ledger.ids import create_memory_id
from om_core.ledger.models import ContextBlock, Frozen, SessionEntry
from om_core.policy.limits import WorkerLimits
from om_core.read.context import build_context_blocks
from om_core.settings import ObservationalMemorySettings, resolve_settings

RUN_ACTIVE = "run_active"
_PROXIED = ("run", "prompt")


class TokensTrigger(Frozen):
    """Compact once the estimated input reaches ``tokens``."""

    type: Literal["tokens"] = "tokens"
    tokens: int = Field(gt=0)


class EntriesTrigger(Frozen):
    """Compact once the current branch has ``entries`` entries since the last compaction."""

    type: Literal["entries"] = "entries"
    entries: int = Field(gt=0)


class InputRatioTrigger(Frozen):
    """Compact once estimated input / input cap reaches ``ratio``; needs a resolvable cap."""

    type: Literal["input_ratio"] = "input_ratio"
    ratio: float = Field(gt=0, le=1)


Trigger = TokensTrigger | EntriesTrigger | InputRatioTrigger
_TRIGGERS: dict[str, type[Trigger]] = {
    "tokens": TokensTrigger,
    "entries": EntriesTrigger,
    "input_ratio": InputRatioTrigger,
}


def parse_trigger(value: Trigger | Mapping[str, Any]) -> Trigger:
    """A trigger model from a model or mapping; :class:`InvalidTriggerError` otherwise."""
    if isinstance(value, TokensTrigger | EntriesTrigger | InputRatioTrigger):
        return value
    if not isinstance(value, Mapping):
        raise InvalidTriggerError(f"trigger must be a mapping, got {type(value).__name__}")
    model = _TRIGGERS.get(str(value.get("type")))
    if model is None:
        raise InvalidTriggerError(f"unknown compaction trigger type {value.get('type')!r}")
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        raise InvalidTriggerError(f"invalid compaction trigger: {exc.errors()[0]['msg']}") from None


class CompactionGateContext:
    """What a ``should_compact`` callback sees. Token numbers resolve lazily on first read.

    ``entry_count`` counts current-branch entries from the latest compaction on (so a count
    gate does not fire on every flush after its first); ``estimated_input_tokens`` sums
    :func:`om_core.ledger.tokens.estimate_entry_tokens` from the latest compaction on;
    ``input_cap_tokens`` is the cap given to ``attach`` and raises
    :class:`InvalidInputError` when none was given (the gate then decides false).
    """

    def __init__(self, entries: Sequence[SessionEntry], input_cap_tokens: int | None) -> None:
        self._entries = entries
        self._cap = input_cap_tokens
        self._tokens: int | None = None
        self.entry_count = len(entries)

    @property
    def estimated_input_tokens(self) -> int:
        if self._tokens is None:
            self._tokens = estimated_input_tokens(self._entries)
        return self._tokens

    @property
    def input_cap_tokens(self) -> int:
        if self._cap is None:
            raise InvalidInputError("the session model declares no input cap (context window)")
        return self._cap


ShouldCompact = Callable[[CompactionGateContext], bool]


class ObservationalMemory:
    """Settings, worker configs and the compact-when gate, ready to attach to sessions.

    ``trigger`` (a :data:`Trigger` or its mapping) or ``should_compact(context)`` replaces
    ``context.compactAfterTokens``; an unknown trigger type or a non-callable
    ``should_compact`` raises :class:`InvalidTriggerError` here, before any session work.
    """

    def __init__(
        self,
        settings: ObservationalMemorySettings | Mapping[str, Any] | None = None,
        *,
        observation: WorkerConfig | None = None,
        reflection: WorkerConfig | None = None,
        dropper: WorkerConfig | None = None,
        providers: Mapping[str, Provider] | None = None,
        trigger: Trigger | Mapping[str, Any] | None = None,
        should_compact: ShouldCompact | None = None,
        limits: WorkerLimits | None = None,
        secrets: Iterable[str] = (),
        credentials: CredentialResolver | None = None,
        debug: DebugSink | None = None,
        now: Callable[[], str] | None = None,
    ) -> None:
        if should_compact is not None and not callable(should_compact):
            raise InvalidTriggerError("should_compact must be callable")
        self.settings = (
            settings
            if isinstance(settings, ObservationalMemorySettings)
            else resolve_settings(settings)
        )
        self.trigger = parse_trigger(trigger) if trigger is not None else None
        self.should_compact = should_compact
        self.workers = {"observation": observation, "reflection": reflection, "dropper": dropper}
        self.providers = dict(providers or {})
        self.limits = limits
        self.secrets = tuple(secrets)
        self.credentials = credentials
        self.debug = debug
        self.now = now

    def attach(
        self,
        session: Any,
        *,
        append_entry: AppendEntry,
        session_model: str | None = None,
        input_cap_tokens: int | None = None,
        new_entry_id: Callable[[], str] = create_memory_id,
    ) -> AttachedMemory:
        """Attach to ``session`` (``id`` and ``get_entries()``; optionally ``run``, ``prompt``,
        ``stream``, ``compact``). ``append_entry`` must append to that session's current branch.
        An ``input_ratio`` trigger without ``input_cap_tokens`` raises :class:`InvalidTriggerError`.
        """
        if isinstance(self.trigger, InputRatioTrigger) and input_cap_tokens is None:
            raise InvalidTriggerError("an input_ratio trigger needs input_cap_tokens")
        return AttachedMemory(
            self,
            session,
            append_entry=append_entry,
            session_model=session_model,
            input_cap_tokens=input_cap_tokens,
            new_entry_id=new_entry_id,
        )


class AttachedMemory:
    """The result of :meth:`ObservationalMemory.attach`: session proxy, runtime, strategy,
    context provider and an explicit ``flush``."""

    def __init__(
        self,
        memory: ObservationalMemory,
        session: SessionSource,
        *,
        append_entry: AppendEntry,
        session_model: str | None,
        input_cap_tokens: int | None,
        new_entry_id: Callable[[], str],
    ) -> None:
        self._memory = memory
        self._host = session
        self._append = append_entry
        self._cap = input_cap_tokens
        self._new_entry_id = new_entry_id
        self._active = 0
        self._active_lock = threading.Lock()
        self.last_flush: FlushResult | None = None
        self.strategy = ObservationalMemoryCompactionStrategy(
            keep_recent_entries=memory.settings.context.recent_messages,
            settings=memory.settings,
        )
        self.runtime = ObservationalMemoryRuntime(
            session,
            append_entry=append_entry,
            settings=memory.settings,
            observation=memory.workers["observation"],
            reflection=memory.workers["reflection"],
            dropper=memory.workers["dropper"],
            providers=memory.providers,
            session_model=session_model,
            limits=memory.limits,
            secrets=memory.secrets,
            credentials=memory.credentials,
            compact=lambda: self.compact_now("threshold"),
            should_compact=self._gate() if self._has_host_gate() else None,
            now=memory.now,
            new_entry_id=new_entry_id,
            debug=memory.debug,
        )
        self.session = SessionProxy(session, self)

    @property
    def run_active(self) -> bool:
        """True while a proxied run/prompt/stream/compact is in flight."""
        return self._active > 0

    def flush(self, full_reflection_rebuild: bool = False) -> FlushResult:
        """Flush now; skipped with ``run_active`` while a proxied call is in flight."""
        if self.run_active:
            return FlushResult(skipped=(WorkerSkip(worker="flush", reason=RUN_ACTIVE),))
        self.last_flush = self.runtime.flush(full_reflection_rebuild)
        return self.last_flush

    def context_provider(self, invalidated_ids: Iterable[str] = ()) -> tuple[ContextBlock, ...]:
        """The ``observational-memory`` and ``recent-messages`` blocks for the next turn."""
        entries = self._host.get_entries()
        return build_context_blocks(
            entries,
            self._memory.settings,
            invalidated_ids,
            self._memory.secrets,
            ledger=self.runtime.ledger(entries),
        )

    def compact_now(self, trigger: str = "manual") -> SessionEntry:
        """Append one compaction entry built by :attr:`strategy` (no provider call).

        Raises :class:`AppendNotVisibleError` when the entry does not become the leaf, and
        the strategy's :class:`~om_core.errors.CapExceededError` when memory cannot fit.
        """
        entries = self._host.get_entries()
        result = self.strategy.compact(entries, trigger=trigger, secrets=self._memory.secrets)
        entry = result.to_entry(
            entry_id=self._new_entry_id(), session_id=self._host.id, parent_id=None
        )
        append_checked(self._append, self._host.get_entries, entry, "compaction entry")
        return entry

    # -- proxy support ---------------------------------------------------------------------

    def call_proxied(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a host method as a proxied run, then flush once it completed normally."""
        with self._running():
            result = method(*args, **kwargs)
        if isinstance(result, Iterator):
            return self._stream(result)
        self.flush()
        return result

    def _stream(self, iterator: Iterator[Any]) -> Iterator[Any]:
        with self._running():
            yield from iterator
        self.flush()

    def _running(self) -> _Running:
        return _Running(self)

    def _has_host_gate(self) -> bool:
        return self._memory.should_compact is not None or self._memory.trigger is not None

    def _gate(self) -> Callable[[Sequence[SessionEntry]], bool]:
        def decide(entries: Sequence[SessionEntry]) -> bool:
            context = CompactionGateContext(entries_since_compaction(entries), self._cap)
            if self._memory.should_compact is not None:
                return bool(self._memory.should_compact(context))
            return trigger_due(self._memory.trigger, context)

        return decide


class _Running:
    """Counts a proxied call as in flight for the duration of a ``with`` block."""

    def __init__(self, attached: AttachedMemory) -> None:
        self._attached = attached

    def __enter__(self) -> None:
        with self._attached._active_lock:
            self._attached._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._attached._active_lock:
            self._attached._active -= 1


def trigger_due(trigger: Trigger | None, context: CompactionGateContext) -> bool:
    """Whether a parsed trigger says compact now (``None`` never does)."""
    if isinstance(trigger, TokensTrigger):
        return context.estimated_input_tokens >= trigger.tokens
    if isinstance(trigger, EntriesTrigger):
        return context.entry_count >= trigger.entries
    if isinstance(trigger, InputRatioTrigger):
        return context.estimated_input_tokens / context.input_cap_tokens >= trigger.ratio
    return False


def entries_since_compaction(entries: Sequence[SessionEntry]) -> Sequence[SessionEntry]:
    """The branch suffix starting at the latest compaction entry (all of it when none)."""
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].kind == "compaction":
            return entries[index:]
    return entries


class SessionProxy:
    """The host session with ``run``/``prompt``/``stream``/``compact`` flushing afterwards.

    Every other attribute is the host's own.
    """

    def __init__(self, host: Any, attached: AttachedMemory) -> None:
        self._host = host
        self._attached = attached

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._host, name)
        if name in (*_PROXIED, "stream", "compact") and callable(value):

            def proxied(*args: Any, **kwargs: Any) -> Any:
                return self._attached.call_proxied(value, *args, **kwargs)

            return proxied
        return value
