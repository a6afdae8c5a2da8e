"""Where a replayed conversation goes: the in-process runtime, or a running om stack.

Both targets take the same calls: ``run`` appends one agent run's messages and flushes
through the real pipeline, ``context`` reads the two context blocks (with what the read
reports of unobserved messages and a budget gap), ``sources`` recalls what each memory id
cites and returns. The in-process target runs :class:`ObservationalMemoryRuntime`
over an in-memory branch with the provider ``OM_PROVIDER`` names (the offline extractive
heuristic by default); the API target drives :class:`~om_api.client.OMClient` (append, flush,
wait for the job, context, recall), so the stack's workers and settings do the memory work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from om_api.evaluation.grounding import Recalled
from om_core import (
    Message,
    ObservationalMemoryRuntime,
    ObservationalMemorySettings,
    SessionEntry,
    WorkerConfig,
)
from om_core.errors import ObservationalMemoryError
from om_core.flush.prompts import DEFAULT_PROMPTS, PromptSet
from om_core.flush.provider import Provider
from om_core.ledger.models import Role
from om_core.read.context import build_context
from om_core.read.recall import recall_memory
from om_workers.config import DEFAULT_CONTEXT_MAX_TOKENS

T = TypeVar("T")


class EvalError(ObservationalMemoryError, RuntimeError):
    """A replay could not go on: a flush failed, or the API refused a call (message says why;
    the client's error, when there was one, is the ``__cause__``)."""


@dataclass(frozen=True)
class ReplayMessage:
    """One message to append: its entry id, role, text and, in process, its ``created_at``."""

    entry_id: str
    role: Role
    text: str
    created_at: str | None = None


@dataclass(frozen=True)
class ContextView:
    """The context an agent would get: memory block text, recent block text and the ids it
    shows (in block order), and what the read reports of messages memory does not cover
    yet (``unobserved_*``) and of those the budget left out (``gap_*``)."""

    memory_text: str
    recent_text: str
    recent_ids: tuple[str, ...]
    unobserved_messages: int = 0
    unobserved_tokens: int = 0
    gap_messages: int = 0
    gap_tokens: int = 0


class MemoryTarget(Protocol):
    """What the runner drives; see the module docstring."""

    def start(self, session_id: str) -> None: ...

    def run(self, session_id: str, messages: Sequence[ReplayMessage]) -> None: ...

    def context(self, session_id: str) -> ContextView: ...

    def sources(self, session_id: str, refs: Sequence[str]) -> dict[str, Recalled]: ...


class _Branch:
    """A linear in-memory session: what the runtime reads and appends to."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.entries: list[SessionEntry] = []

    def get_entries(self) -> list[SessionEntry]:
        return list(self.entries)

    def append(self, entry: SessionEntry) -> None:
        self.entries.append(entry)

    @property
    def leaf(self) -> str | None:
        return self.entries[-1].id if self.entries else None


class InProcessTarget:
    """The runtime in this process, one in-memory branch per session.

    The context is read with a ``max_tokens`` budget (the service's default unless given).

    ``provider`` does the observer/reflector/dropper work (``models`` may name a model per
    worker, else ``model``). Memory records carry the replayed session's date as their
    ``created_at``/``observedAt``, so the ledger reads as if written at the time. ``prompts``
    are the observer's and reflector's instructions; :attr:`prompt_versions` says which version
    the flushes ran with (one, unless the memory settings name instructions: ``custom``).
    """

    def __init__(
        self,
        settings: ObservationalMemorySettings,
        provider: Provider,
        *,
        model: str = "extractive",
        models: Mapping[str, str] | None = None,
        force: bool = False,
        max_tokens: int = DEFAULT_CONTEXT_MAX_TOKENS,
        prompts: PromptSet = DEFAULT_PROMPTS,
    ) -> None:
        self.settings = settings
        self.max_tokens = max_tokens
        self.prompts = prompts
        self.prompt_versions: set[str] = set()
        self._provider = provider
        self._model = model
        self._models = dict(models or {})
        self._force = force
        self._branches: dict[str, _Branch] = {}
        self._runtimes: dict[str, ObservationalMemoryRuntime] = {}
        self._now: str | None = None

    def start(self, session_id: str) -> None:
        """Open an empty session (a second start of the same id starts it over)."""
        branch = _Branch(session_id)
        self._branches[session_id] = branch
        self._runtimes[session_id] = ObservationalMemoryRuntime(
            branch,
            append_entry=branch.append,
            settings=self.settings,
            observation=WorkerConfig(provider=self._provider, model=self._models.get("observer")),
            reflection=WorkerConfig(model=self._models.get("reflector")),
            dropper=WorkerConfig(model=self._models.get("dropper")),
            session_model=self._model,
            now=lambda: self._now or "",
            prompts=self.prompts,
        )

    def entries(self, session_id: str) -> list[SessionEntry]:
        """The session's branch so far (KeyError for a session never started)."""
        return self._branches[session_id].get_entries()

    def run(self, session_id: str, messages: Sequence[ReplayMessage]) -> None:
        """Append the job's messages and flush; :class:`EvalError` when the flush reports one."""
        branch = self._branches[session_id]
        for message in messages:
            branch.append(
                SessionEntry(
                    id=message.entry_id,
                    session_id=session_id,
                    parent_id=branch.leaf,
                    kind="message",
                    created_at=message.created_at,
                    message=Message(role=message.role, content=message.text),
                )
            )
        self._now = next((m.created_at for m in messages if m.created_at), None)
        runtime = self._runtimes[session_id]
        self.prompt_versions.add(runtime.prompt_version)
        result = runtime.flush(force=self._force)
        if result.error:
            raise EvalError(f"flush of {session_id} failed: {result.error}")

    def context(self, session_id: str) -> ContextView:
        """The context the service would hand the next turn (:func:`build_context` within
        ``max_tokens``): memory, then every unobserved message and the last few."""
        runtime = self._runtimes[session_id]
        entries = self.entries(session_id)
        context = build_context(
            entries, self.settings, ledger=runtime.ledger(), max_tokens=self.max_tokens
        )
        memory, recent = context.blocks
        return ContextView(
            memory.text,
            recent.text,
            tuple(recent.entry_ids or ()),
            unobserved_messages=context.unobserved.messages,
            unobserved_tokens=context.unobserved.tokens,
            gap_messages=context.gap.messages if context.gap else 0,
            gap_tokens=context.gap.tokens if context.gap else 0,
        )

    def sources(self, session_id: str, refs: Sequence[str]) -> dict[str, Recalled]:
        """What one :func:`recall_memory` of each memory id cites and returns (entry ids)."""
        entries = self.entries(session_id)
        ledger = self._runtimes[session_id].ledger()
        found: dict[str, Recalled] = {}
        for ref in refs:
            out = recall_memory(entries, ref, ledger=ledger)
            found[ref] = Recalled(
                frozenset(out.source_entry_ids), frozenset(e.id for e in out.sources)
            )
        return found


class ApiTarget:
    """A running om stack through :class:`~om_api.client.OMClient`.

    Each run is one append request then ``flush`` and ``wait_for_job`` (``job_timeout_s`` per
    job); the context is read within ``max_tokens`` (the server's default when ``None``). A
    failed job, a timeout or a refused call raises :class:`EvalError`; a ``skipped``
    job (below the stack's ``observation.messageTokens``) is the pipeline's own choice and is
    not an error. Entry ids are unique per tenant, so callers give each replay a fresh session
    id and derive entry ids from it. :attr:`prompt_versions` collects the prompt version each
    job that ran reports (the stack's ``OM_PROMPTS_FILE``, not this process's).
    """

    def __init__(
        self,
        url: str,
        key: str,
        *,
        force: bool = False,
        job_timeout_s: float = 300.0,
        max_tokens: int | None = None,
    ) -> None:
        from om_api.client import OMClient

        self._client = OMClient(url, key)
        self._max_tokens = max_tokens
        self._force = force
        self._timeout = job_timeout_s
        self.prompt_versions: set[str] = set()

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def start(self, session_id: str) -> None:
        """Create the session on the stack."""
        self._call(lambda: self._client.create_session(session_id, {"source": "om eval locomo"}))

    def run(self, session_id: str, messages: Sequence[ReplayMessage]) -> None:
        """Append the run, request a flush and wait for its job."""
        body: list[Any] = [
            {"id": m.entry_id, "kind": "message", "message": {"role": m.role, "content": m.text}}
            for m in messages
        ]
        self._call(lambda: self._client.append(session_id, body))
        accepted = self._call(lambda: self._client.flush(session_id, force=self._force))
        job = self._call(lambda: self._client.wait_for_job(accepted.job_id, self._timeout))
        if job.state == "failed":
            raise EvalError(f"flush job {job.id} of {session_id} failed: {job.error}")
        if job.prompt_version:
            self.prompt_versions.add(job.prompt_version)

    def context(self, session_id: str) -> ContextView:
        """``GET .../context`` (``max_tokens`` when given, else the server's default)."""
        out = self._call(lambda: self._client.context(session_id, max_tokens=self._max_tokens))
        by_id = {block.id: block for block in out.blocks}
        memory, recent = by_id.get("observational-memory"), by_id.get("recent-messages")
        return ContextView(
            memory.text if memory else "",
            recent.text if recent else "",
            tuple(recent.entry_ids or ()) if recent else (),
            unobserved_messages=out.unobserved.messages,
            unobserved_tokens=out.unobserved.tokens,
            gap_messages=out.gap.messages if out.gap else 0,
            gap_tokens=out.gap.tokens if out.gap else 0,
        )

    def sources(self, session_id: str, refs: Sequence[str]) -> dict[str, Recalled]:
        """One recall request per memory id shown: the ids it cites and the ones it returns."""
        found: dict[str, Recalled] = {}
        for ref in refs:
            out = self._call(partial(self._client.recall, session_id, ref))
            found[ref] = Recalled(
                frozenset(out.source_entry_ids), frozenset(e.id for e in out.sources)
            )
        return found

    def _call(self, fn: Callable[[], T]) -> T:
        from om_api.client import OMClientError

        try:
            return fn()
        except OMClientError as exc:
            raise EvalError(f"om API: {exc}") from exc
