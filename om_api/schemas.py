"""Wire models of the HTTP API (``/v1``): every request body and every response body.

These are the stable contract the Python client builds on. Conventions:

* JSON keys are snake_case everywhere (``leaf_id``, ``job_id``, ``tool_call_id``); the core's
  camelCase ledger payloads appear only inside an entry's free-form ``data``.
* Request models forbid unknown keys at every level (an entry's ``message``, its tool calls
  and content parts too), so a typo is a 422 naming the key, not a silent no-op. Response
  models ignore unknown keys (a client reading a newer server keeps working).
* Every string of a request body, object keys inside free-form JSON (``data``, ``metadata``,
  tool-call ``arguments``) included, must be storable text: U+0000 (NUL) and lone surrogates
  (U+D800-U+DFFF not part of a pair) are a 422 naming the field (``body.entries[0].message.
  content: text holds U+0000 (NUL) ...``), on every store: PostgreSQL cannot store them, and
  on SQLite a stored lone surrogate made every later read of the session fail. So are
  non-finite numbers (``NaN``, ``Infinity``: not JSON; PostgreSQL kept them as ``null``) and
  JSON nested deeper than :data:`MAX_JSON_DEPTH`. See :func:`find_unstorable`.
* Ids are checked against the patterns below before anything is read or written:
  :data:`PATH_ID_PATTERN` for every id that travels in a URL path (session, tenant, job, API
  key and work-scope ids), :data:`ENTRY_ID_PATTERN` for entry ids, :data:`MEMORY_ID_PATTERN`
  for observation/reflection ids. An id refused at creation is a 422 naming the field, so
  every id the API accepted works in every route that takes it.
* Every error is an :class:`ErrorBody` with a machine ``error`` code and a human ``detail``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import Annotated, Any, ClassVar, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    Tag,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from om_core.policy.storable import char_problem

ENTRY_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""Entry ids: 1-128 of ASCII letters, digits and ``. _ : -``.

Narrower than the store's 256-character column on purpose: ids travel in query strings and
logs, so no ``/``, ``%``, whitespace or control characters, and a length a human can still
read. Generated ids (``uuid4().hex``, ``create_memory_id()``) fit it."""

_ID_CHAR = "A-Za-z0-9._:-"
_NOT_DOT = "A-Za-z0-9_:-"
PATH_ID_PATTERN = (
    rf"^(?:[{_NOT_DOT}][{_ID_CHAR}]{{0,127}}"  # starts with anything but a dot: "a", "a.b"
    rf"|\.[{_NOT_DOT}][{_ID_CHAR}]{{0,126}}"  # a dot, then not a dot: ".env"
    rf"|\.\.[{_ID_CHAR}]{{1,126}})$"  # two dots and more: "...", "..x"
)
"""Ids that travel in URL paths (session, tenant, job, API key and work-scope ids): what
:data:`ENTRY_ID_PATTERN` allows, except ``.`` and ``..`` as whole ids.

Clients, proxies and URL libraries resolve ``/v1/sessions/./entries`` to ``/v1/sessions/
entries``, so such an id would reach another route or none; ``/`` (even as ``%2F``) is
excluded for the same reason. The three branches say "1-128 id characters, not ``.`` nor
``..``" without a look-ahead, which the schema's regex engine does not have."""

MEMORY_ID_PATTERN = r"^(om:|reflection:)?[a-f0-9]{12}$"
"""Observation/reflection ids: 12 lowercase hex, optionally written as a ``om:`` or
``reflection:`` reference."""

SCOPE_ID_PATTERN = PATH_ID_PATTERN
"""Work-scope ids (in ``.../scopes/{scope_id}/...`` paths). Narrower than the core's scope ids,
which also allow ``/`` (any ``..`` is refused by the core, with a reason)."""

PRINCIPAL_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""Principals named in grants: session ids of the same tenant."""

MAX_BATCH_ENTRIES = 1000
"""Most entries one append may carry; a larger batch is a 422."""

MAX_ENTRIES_PAGE = 1000
"""Largest ``limit`` of ``GET .../entries`` (the store's page cap)."""

MAX_MESSAGES_PAGE = 100
"""Largest ``limit`` of ``GET .../messages`` (the core's recall page cap)."""

MAX_REVOCATION_IDS = 1000
"""Most entry ids one revocation may name."""

EntryId = Annotated[str, Field(pattern=ENTRY_ID_PATTERN, examples=["msg-0001"])]
PathId = Annotated[str, Field(pattern=PATH_ID_PATTERN, examples=["support-4711"])]
MemoryId = Annotated[str, Field(pattern=MEMORY_ID_PATTERN, examples=["0123456789ab"])]
ScopeId = Annotated[str, Field(pattern=SCOPE_ID_PATTERN, examples=["task:cleanup"])]
PrincipalId = Annotated[str, Field(pattern=PRINCIPAL_ID_PATTERN)]
Role = Literal["user", "assistant", "tool", "system"]
JobState = Literal["queued", "running", "succeeded", "failed", "skipped"]


class WireModel(BaseModel):
    """Base of every response model: snake_case keys, unknown keys ignored (forward compatible
    for a client reading a newer server)."""

    model_config = ConfigDict(extra="ignore")


MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of objects and arrays a request body may have, counted from the body
itself (``{"entries": [{"data": {}}]}`` is 4 deep). Far above any real tool-call argument, and
far below the depth at which serializing an entry fails (about 255)."""

JsonPath = tuple[str | int, ...]


def find_unstorable(value: Any, max_depth: int = MAX_JSON_DEPTH) -> tuple[JsonPath, str] | None:
    """The first (in document order) place of a JSON-like ``value`` that no store can keep
    and give back as JSON, with the reason; ``None`` when every part is storable.

    Refused: a string or object key holding U+0000 or a lone surrogate, a non-finite float
    (``NaN``/``Infinity``, which Python's JSON parser accepts), and objects/arrays nested
    deeper than ``max_depth``. The reason never quotes the offending value (it may be large,
    a secret, or not encodable as UTF-8). Iterative, so a deep value cannot exhaust the stack.
    """
    stack: list[tuple[JsonPath, Any, int]] = [((), value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, str):
            problem = char_problem(item)
            if problem is not None:
                return path, f"text holds {problem}, which cannot be stored"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, "a non-finite number (NaN or Infinity) is not JSON"
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return path, f"JSON nested deeper than {max_depth} levels"
            children: list[tuple[JsonPath, Any, int]] = []
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str):
                        problem = char_problem(key)
                        if problem is not None:
                            return path, f"an object key holds {problem}, which cannot be stored"
                    children.append(((*path, key), child, depth + 1))
            else:
                children = [((*path, i), child, depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
    return None


_STORABLE_CHECKED: ContextVar[bool] = ContextVar("om_storable_checked", default=False)
"""Set while the models nested in a checked value are validated."""


class RequestModel(BaseModel):
    """Base of every request body and of every model nested in one: unknown keys are a 422
    naming them, and so is any text no store can keep (see :func:`find_unstorable`), before
    any field is validated, so nothing is written."""

    model_config = ConfigDict(extra="forbid")
    _checks_storable: ClassVar[bool] = True

    @model_validator(mode="wrap")
    @classmethod
    def _refuse_unstorable(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # The outermost model walks the whole value once; the models nested in it (validated
        # inside ``handler``) have nothing left to find.
        if not cls._checks_storable or isinstance(data, BaseModel) or _STORABLE_CHECKED.get():
            return handler(data)
        found = find_unstorable(data)
        if found is not None:
            path, reason = found
            error = PydanticCustomError("unstorable_value", "{reason}", {"reason": reason})
            # ``input`` is a placeholder: the value itself may not even be encodable as UTF-8.
            detail = InitErrorDetails(type=error, loc=path, input="<refused>")
            raise ValidationError.from_exception_data(cls.__name__, [detail])
        checked = _STORABLE_CHECKED.set(True)
        try:
            return handler(data)
        finally:
            _STORABLE_CHECKED.reset(checked)


# Errors ------------------------------------------------------------------------------------


class ErrorBody(WireModel):
    """Every 4xx/5xx answer. ``error`` is stable (``not_found``, ``invalid_input``,
    ``conflict``, ``unauthorized``, ``payload_too_large``, ``unavailable`` ...); ``detail`` is
    the reason, with secrets redacted."""

    error: str
    detail: str
    request_id: str | None = None
    line: int | None = Field(
        default=None,
        description="For a refused import: the 1-based number of the first bad line.",
    )
    errors: list[dict[str, Any]] | None = Field(
        default=None,
        description="Field-level validation problems, for 422s from the schema: each has "
        "``loc`` (list), ``path`` (``body.entries[0].message.content``), ``msg`` and ``type``.",
    )


# Messages and entries ----------------------------------------------------------------------


class ToolCallWire(RequestModel):
    """A tool call an assistant message asks for (unknown keys refused)."""

    id: str = Field(min_length=1, max_length=256)
    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ContentPartWire(RequestModel):
    """One part of a multi-part message: ``text`` parts carry ``text``, others ``data``
    (unknown keys refused)."""

    type: str = Field(min_length=1, max_length=64)
    text: str | None = None
    data: dict[str, Any] | None = None


def _content_form(value: Any) -> str:
    # One branch per input, so a bad part is one error (``content.parts[0].txt``), not a
    # second "should be a valid string" for the other branch.
    return "text" if isinstance(value, str) else "parts"


ContentIn = Annotated[
    Annotated[str, Tag("text")] | Annotated[Sequence[ContentPartWire], Tag("parts")],
    Discriminator(_content_form),
]


class MessageWire(RequestModel):
    """A chat message to append; unknown keys (``contnet`` ...) are refused here too.

    Responses carry the same shape as :class:`MessageOut`, a subclass that ignores unknown
    keys, so a message read back can be appended again as it is.
    """

    role: Role
    content: ContentIn = ""
    tool_calls: Sequence[ToolCallWire] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False


class ToolCallOut(ToolCallWire):
    """A tool call as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False


class ContentPartOut(ContentPartWire):
    """A content part as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False


ContentOut = Annotated[
    Annotated[str, Tag("text")] | Annotated[Sequence[ContentPartOut], Tag("parts")],
    Discriminator(_content_form),
]


class MessageOut(MessageWire):
    """A chat message as stored (response: unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore")
    _checks_storable: ClassVar[bool] = False

    content: ContentOut = ""
    tool_calls: Sequence[ToolCallOut] = Field(default_factory=list)


class EntryIn(RequestModel):
    """One entry to append.

    ``id`` defaults to a fresh random id; send your own to make retries idempotent.
    ``parent_id`` defaults to the previous entry (the first: the session's leaf). ``kind`` is
    ``message`` (needs ``message``), ``custom`` (needs ``data``), ``compaction`` (needs
    ``summary``) or another bookkeeping kind.
    """

    id: EntryId | None = None
    parent_id: EntryId | None = None
    kind: str = Field(min_length=1, max_length=64, examples=["message"])
    message: MessageWire | None = None
    data: dict[str, Any] | None = None
    summary: str | None = None


class EntryOut(WireModel):
    """An entry as stored (``parent_id`` and ``created_at`` filled in)."""

    id: str
    session_id: str
    parent_id: str | None = None
    kind: str
    created_at: str | None = None
    message: MessageOut | None = None
    data: dict[str, Any] | None = None
    summary: str | None = None


class AppendEntriesRequest(RequestModel):
    """``POST /v1/sessions/{sid}/entries``: 1 to 1,000 entries, appended atomically in order."""

    entries: list[EntryIn] = Field(min_length=1, max_length=MAX_BATCH_ENTRIES)


class AppendEntriesResponse(WireModel):
    """What an append did: ``appended_ids`` were written now, ``duplicate_ids`` were already
    stored with the same content (a retried append) and were not written again."""

    appended_ids: list[str]
    duplicate_ids: list[str]
    leaf_id: str | None


class EntriesPage(WireModel):
    """Current-branch entries in order; pass ``next_cursor`` as ``after`` for the next page
    (``None`` on the last page)."""

    entries: list[EntryOut]
    next_cursor: str | None


class ImportOut(WireModel):
    """What ``POST /v1/sessions/{sid}/import`` stored: the session afterwards, whether the
    import created it (201) or found it (200), the entries written now, those already stored
    with the same content (a repeated import writes none), and the tombstones added."""

    session: SessionOut
    created: bool
    imported: int
    duplicates: int
    tombstones: int


# Sessions ----------------------------------------------------------------------------------


SUBJECT_KEY: Final = "subject"
"""The session metadata key naming the end user a session is about: ``DELETE
/v1/subjects/{subject}`` erases every session of the tenant whose ``metadata.subject`` is it."""
SUBJECT_PATTERN: Final = r"^(?:[^/\s.][^/\s]{0,255}|\.[^/\s.][^/\s]{0,254}|\.\.[^/\s]{1,254})$"
"""A subject: 1-256 characters, no ``/`` and no whitespace (it travels in a URL path), never
``.`` or ``..`` (clients resolve those away). ``user@example.com`` and ``u_42`` both fit."""
_SUBJECT_RE: Final = re.compile(SUBJECT_PATTERN)


class CreateSessionRequest(RequestModel):
    """``POST /v1/sessions``: ``id`` defaults to a random hex id; ``workspace`` links the new
    session to a workspace session at once (see :class:`LinkRequest`); ``metadata`` is the
    tenant's own, except ``metadata.subject`` (:data:`SUBJECT_KEY`), which names the end
    user the session is about, for erasure by subject, and must then fit
    :data:`SUBJECT_PATTERN`."""

    id: PathId | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _subject_fits(cls, value: dict[str, Any]) -> dict[str, Any]:
        subject = value.get(SUBJECT_KEY)
        if subject is not None and not (
            isinstance(subject, str) and _SUBJECT_RE.fullmatch(subject)
        ):
            raise ValueError(
                "metadata.subject must be a string of 1-256 characters without '/' or "
                "whitespace (it names the end user for DELETE /v1/subjects/{subject})"
            )
        return value

    workspace: PathId | None = Field(
        default=None,
        description="Copy every observable message appended to this session onto this "
        "workspace session of the same tenant (the delegation funnel).",
    )


class LinkRequest(RequestModel):
    """``PUT /v1/sessions/{sid}/link``: from now on, every observable message (user, assistant
    or tool) appended to the session is also appended to ``workspace``, a session of the same
    tenant, with a new id and ``data.funnelOrigin`` naming the original. Memory records are
    never copied. The workspace cannot itself be linked (funnels do not chain)."""

    workspace: PathId


class SessionOut(WireModel):
    """A session's bookkeeping; ``workspace`` is the session its observable messages are
    copied onto (``None``: not linked)."""

    id: str
    leaf_id: str | None
    entry_count: int
    unobserved_tokens: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    workspace: str | None = None


MAX_SESSIONS_PAGE = 100
"""Largest ``limit`` of ``GET /v1/sessions``."""


class SessionsPage(WireModel):
    """``GET /v1/sessions``: the tenant's sessions, newest first (by ``created_at``, then id).

    Pass ``next_cursor`` as ``cursor`` for the next page (``None`` on the last page). Paging
    is by position (keyset), so sessions created meanwhile never shift a page: they are newer
    than the first page and show up in the next listing, not in this one, and no session is
    skipped or repeated."""

    sessions: list[SessionOut]
    next_cursor: str | None


# Flush and jobs ----------------------------------------------------------------------------


class FlushRequest(RequestModel):
    """``POST /v1/sessions/{sid}/flush`` (the body is optional).

    ``force`` observes whatever is unscanned now, below ``observation.messageTokens`` too.
    ``full_reflection_rebuild`` reflects over every active observation, not only the new ones.
    Both are kept in the job row; a request that coalesces into a pending job adds its options
    to that job's.
    """

    force: bool = False
    full_reflection_rebuild: bool = False


class ErasureTicket(WireModel):
    """The answer to an erasure request (202): the erasure job ``job_id`` exists and what it
    erases is already gone to the tenant (404 on every route); read the job at
    ``GET /v1/jobs/{job_id}`` until it has ``succeeded``, when nothing of it is stored."""

    job_id: str


class FlushTicket(WireModel):
    """The answer to a flush request (202): the job row of ``job_id`` exists. ``coalesced``: a
    job that existed already answers this request (nothing new was published): one pending
    for the session, or, when the request had nothing to do (the session's unobserved tokens
    below ``observation.messageTokens`` and no option set), the session's newest job,
    running or finished. ``state`` is that job's state when the request was answered
    (``queued`` for a new or pending job; ``running`` or ``succeeded`` for a request with
    nothing to do). The wire form of the worker's ``ServingJob``."""

    job_id: str
    coalesced: bool
    state: JobState = "queued"


ErasureKind = Literal["session", "subject", "tenant", "retention"]


class ModelUsageOut(WireModel):
    """One model's usage: ``calls`` that reported usage, their input (prompt) and output
    (completion) tokens as the provider reported them, and their ``cost`` at ``OM_PRICES``
    (``null``: the model has no price)."""

    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None


class JobUsageOut(WireModel):
    """A flush job's model usage: totals, then by model. ``cost`` sums the priced models
    (``null`` when none is priced); ``unpriced_models`` names the others. All zero for a job
    whose provider reports no usage (the offline extractive provider calls no model)."""

    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None
    unpriced_models: list[str] = Field(default_factory=list)
    models: list[ModelUsageOut] = Field(default_factory=list)


class JobOut(WireModel):
    """A flush job, or an erasure job (``kind``). ``error`` (failed or skipped jobs) is
    redacted of every known secret. For an erasure job ``session_id`` is what it erases (the
    session id, the subject, the tenant id; empty for retention), ``erases`` says which, and
    ``counts`` has ``sessions``, ``entries`` and ``workspace_entries`` (placeholders written on
    workspaces that held funnel copies)."""

    id: str
    kind: Literal["flush", "erasure"] = "flush"
    erases: ErasureKind | None = None
    session_id: str
    state: JobState
    force: bool
    full_reflection_rebuild: bool
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None = Field(description="finished_at - started_at, once finished.")
    counts: dict[str, int]
    error: str | None
    reason: str | None = Field(
        default=None,
        description="Why a job that recorded nothing did nothing, e.g. "
        "'observer below threshold: 12 of 10000 tokens'.",
    )
    prompt_version: str | None = Field(
        default=None,
        description="Version of the observer/reflector instructions the job used, e.g. "
        "'observer-2/reflector-2' ('custom': set in the memory settings); null until it ran.",
    )
    usage: JobUsageOut | None = Field(
        default=None,
        description="A flush job's model usage as the provider reported it, written when the "
        "job finished; null for an erasure job.",
    )


# Context, recall, paging, status and view --------------------------------------------------


class ContextBlockOut(WireModel):
    """A block of provider context: ``observational-memory`` (no ``entry_ids``) or
    ``recent-messages`` (with the ids of the exact messages it shows)."""

    id: Literal["observational-memory", "recent-messages"]
    text: str
    entry_ids: list[str] | None = None


MAX_CONTEXT_TOKENS = 1_000_000
"""The largest budget a context read accepts (estimated tokens)."""


class UnobservedOut(WireModel):
    """Messages memory does not cover yet (shown in the recent block unless ``gap`` says
    otherwise): how many, their estimated tokens, the oldest one's id."""

    messages: int
    tokens: int
    first_id: str | None = None


class GapOut(WireModel):
    """Unobserved messages the token budget left out: page them backward from ``cursor``
    (``GET .../messages?cursor=...&direction=backward``). A flush was requested for them."""

    messages: int
    tokens: int
    first_id: str
    cursor: str


class ContextOut(WireModel):
    """``GET .../context``: always two blocks, memory first; either text may be empty.

    Every message is either covered by memory or in the recent block, unless the budget
    (``max_tokens``, estimated tokens) left older unobserved ones out: ``gap`` then names
    them, and the memory block says so too.
    """

    blocks: list[ContextBlockOut]
    unobserved: UnobservedOut
    gap: GapOut | None = None
    max_tokens: int

    def as_text(self) -> str:
        """The memory block, then the recent-messages block under a heading, as one text for a
        model's prompt; ``""`` when the session holds nothing yet."""
        memory, recent = self.blocks
        sections = [memory.text] if memory.text else []
        if recent.text:
            sections.append(f"## Recent messages\n\n{recent.text}")
        return "\n\n".join(sections)


class ObservationOut(WireModel):
    """A source-backed observation."""

    id: str
    text: str
    source_entry_ids: list[str]
    relevance: float
    observed_at: str | None = None


class RecallOut(WireModel):
    """``GET .../memory/{memory_id}``: what a memory id rests on (the core's recall result).

    ``found`` is false for an unknown id (``reason: not_found``) and a revoked one
    (``reason: revoked``, no derived text). For a reflection, supporting observations come
    from the full ledger; dropped supports still contribute their sources.
    """

    id: str
    kind: Literal["observation", "reflection"] | None
    found: bool
    reason: Literal["not_found", "revoked"] | None
    text: str | None
    dropped: bool
    source_entry_ids: list[str]
    missing_source_entry_ids: list[str]
    sources: list[EntryOut]
    supporting_observations: list[ObservationOut]
    supporting_observation_ids: list[str]
    dropped_supporting_observation_ids: list[str]
    missing_supporting_observation_ids: list[str]


class PageItemOut(WireModel):
    """One message of a branch page; ``message`` only with ``detail=full``."""

    entry_id: str
    role: str
    summary: str
    message: MessageOut | None = None


class MessagesPage(WireModel):
    """``GET .../messages``: messages strictly after (``forward``) or before (``backward``)
    ``cursor``; ``next_cursor`` continues in the same direction while ``has_more``."""

    cursor: str
    direction: Literal["forward", "backward"]
    items: list[PageItemOut]
    next_cursor: str | None
    has_more: bool


class SearchHitOut(WireModel):
    """One search hit: an entry id (``kind`` ``message``) or an observation/reflection id
    (recall it by id for the exact sources), its session, a snippet with the matches between
    ``«`` and ``»`` (secrets redacted), the relevance ``score`` (higher is better; comparable
    within one search only), the entry's time and, for memory, the ids it rests on."""

    id: str
    session_id: str
    kind: Literal["message", "observation", "reflection"]
    snippet: str
    score: float
    created_at: str | None = None
    source_ids: list[str] | None = None


class SearchPage(WireModel):
    """``GET /v1/search``, ``GET .../search``: hits best first; ``next_cursor`` (``null`` at the
    end) continues the same order. A page may be shorter than ``limit`` when hits were
    withheld from it."""

    hits: list[SearchHitOut]
    next_cursor: str | None


class StatusOut(WireModel):
    """``GET .../status`` (om:status): session-local memory counts and the rendered text."""

    recorded_observations: int
    dropped_observations: int
    active_observations: int
    visible_observations: int
    recorded_reflections: int
    visible_reflections: int
    active_pool_tokens: int
    visible_pool_tokens: int
    pool_max_tokens: int
    in_flight: bool
    last_error: str | None
    text: str


class ViewOut(WireModel):
    """``GET .../view`` (om:view): rendered memory, ``visible`` (default) or ``full``."""

    mode: Literal["visible", "full"]
    text: str


class CompactRequest(RequestModel):
    """``POST .../compact`` (the body is optional): how many recent messages stay verbatim."""

    keep_recent_entries: int = Field(default=8, ge=0, le=1000)


# Scopes and revocations --------------------------------------------------------------------


class OpenScopeRequest(RequestModel):
    """``POST .../scopes``: open a work scope under ``parent_id`` (default: the ``session``
    root)."""

    id: ScopeId
    parent_id: ScopeId | None = None
    kind: str | None = Field(default=None, max_length=512)
    label: str | None = Field(default=None, max_length=512)


class ScopeRefsRequest(RequestModel):
    """``bind`` / ``unbind``: ``om:<12-hex>`` or ``reflection:<12-hex>`` references."""

    refs: list[Annotated[str, Field(pattern=r"^(om|reflection):[a-f0-9]{12}$")]] = Field(
        min_length=1, max_length=4096
    )


class ScopePrincipalsRequest(RequestModel):
    """``grant`` / ``revoke``: the principals (session ids) to grant or revoke."""

    principal_ids: list[PrincipalId] = Field(min_length=1, max_length=1024)


class ScopeRecordOut(WireModel):
    """The scope record a scope operation appended; ``appended`` is false (and ``entry``
    null) when the request changed nothing (already bound/granted, nothing entered)."""

    appended: bool
    entry: EntryOut | None


class RevocationRequest(RequestModel):
    """``POST .../revocations``: entry ids whose derived memory must be withheld."""

    entry_ids: list[EntryId] = Field(min_length=1, max_length=MAX_REVOCATION_IDS)


class RevocationOut(WireModel):
    """``dropped_observation_ids``: active observations resting on the revoked entries, now
    dropped; ``tombstoned_ids``: entry ids newly withheld (already withheld ones are not
    repeated)."""

    dropped_observation_ids: list[str]
    tombstoned_ids: list[str]


# Health and admin --------------------------------------------------------------------------


class HealthOut(WireModel):
    """``/healthz`` and ``/readyz``: ``status`` is ``ok`` or ``unavailable``; ``checks`` names
    each dependency's state (readiness only)."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, bool] = Field(default_factory=dict)


class CreateTenantRequest(RequestModel):
    """``POST /v1/admin/tenants``."""

    id: PathId
    name: str | None = Field(default=None, max_length=256)


class TenantOut(WireModel):
    """A tenant."""

    id: str
    name: str
    created_at: datetime


class RateLimitIn(RequestModel):
    """One request class's limit: ``rate_per_s`` sustained, ``burst`` at once from idle."""

    rate_per_s: float = Field(gt=0, le=1_000_000, allow_inf_nan=False)
    burst: int = Field(ge=1, le=1_000_000)


class SetRateLimitsRequest(RequestModel):
    """``PUT /v1/admin/tenants/{id}/limits``: the tenant's overrides, replacing the old ones.
    An absent or null class uses the ``OM_RATE_*`` default."""

    appends: RateLimitIn | None = None
    flushes: RateLimitIn | None = None
    reads: RateLimitIn | None = None


class RateLimitOut(WireModel):
    """One request class's limit per API key."""

    rate_per_s: float
    burst: int


class RateLimitsOut(WireModel):
    """A tenant's rate limits per API key: its ``overrides`` (absent class: none) and the
    ``effective`` limit of every class (override, else the deployment's default). Replicas
    apply a change within ``OM_RATE_LIMIT_CACHE_S``."""

    tenant_id: str
    overrides: dict[str, RateLimitOut]
    effective: dict[str, RateLimitOut]


class TenantLoadOut(WireModel):
    """One tenant's flush jobs in the fair queue (``waiting`` for a place, ``queued`` in the
    broker, ``running``) and its ``throttled`` requests (refused by a rate limit since Redis
    started)."""

    tenant_id: str
    waiting: int
    queued: int
    running: int
    throttled: int


class FlushQueueOut(WireModel):
    """``GET /v1/admin/queue``: the fair queue's ``backlog`` (flush jobs waiting, queued or
    running, all tenants) and each tenant with jobs or throttled requests, busiest first."""

    backlog: int
    tenants: list[TenantLoadOut]


class CreateKeyRequest(RequestModel):
    """``POST /v1/admin/tenants/{id}/keys`` (the body is optional)."""

    label: str = Field(default="", max_length=256)


class KeyOut(WireModel):
    """A new API key; ``key`` is shown once (only its hash is stored)."""

    key_id: str
    tenant_id: str
    key: str


class ApiKeyOut(WireModel):
    """An API key as listed: never the key itself, only its id and ``prefix``, the part every
    key starts with (``om_<key_id>_``) that tells keys apart in a config file or a log.
    ``revoked`` is ``revoked_at is not None`` (computed; ignored when read back).

    Built from any object with these attributes (``ApiKeyOut.model_validate(info,
    from_attributes=True)``), such as the store's ``ApiKeyInfo``."""

    key_id: str
    tenant_id: str
    prefix: str
    label: str
    created_at: datetime
    revoked_at: datetime | None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def revoked(self) -> bool:
        """Whether the key is revoked (every request with it is a 401)."""
        return self.revoked_at is not None


class ApiKeysOut(WireModel):
    """``GET /v1/admin/tenants/{id}/keys``: the tenant's keys, oldest first, revoked ones too."""

    keys: list[ApiKeyOut]


# Erasure, retention and the audit trail (admin) --------------------------------------------

MAX_RETENTION_DAYS = 36_500
"""The longest retention period an admin may set (days; a hundred years)."""
MAX_AUDIT_EVENTS = 1000
"""Largest ``limit`` of ``GET /v1/admin/audit``."""
MAX_RETENTION_LISTING = 1000
"""Largest ``limit`` of a retention dry run."""


class RetentionRequest(RequestModel):
    """``PUT /v1/admin/tenants/{id}/retention``: erase the tenant's sessions once they have
    been idle (no write) for ``days`` days; ``null`` keeps everything (the default)."""

    days: int | None = Field(ge=1, le=MAX_RETENTION_DAYS)


class RetentionOut(WireModel):
    """A tenant's retention period and the dry run: the sessions a retention pass would erase
    now (idle since before ``cutoff``), longest idle first, at most the asked ``limit``."""

    tenant_id: str
    retention_days: int | None
    cutoff: datetime | None
    would_erase: list[str]


class AuditEventOut(WireModel):
    """One audit record: who (``key_id``; null for an admin or the retention pass), what
    (``action``: erase, retention, export, import ...), which session, subject or tenant
    (``target``), when, and the ``outcome`` (accepted, succeeded, failed ...). Never content."""

    tenant_id: str
    key_id: str | None
    action: str
    target: str
    outcome: str
    job_id: str | None
    created_at: datetime


class AuditOut(WireModel):
    """The newest audit events, newest first."""

    events: list[AuditEventOut]


class DailyUsageOut(WireModel):
    """A tenant's usage of one model on one UTC ``day`` (``YYYY-MM-DD``); ``cost`` at
    ``OM_PRICES``, ``null`` for a model without a price."""

    tenant_id: str
    day: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None


class UsageReportOut(WireModel):
    """Model usage per tenant per day, days ``since`` to ``until`` inclusive (UTC), by tenant,
    day and model; totals over the rows (``cost`` sums the priced rows, ``null`` when none is
    priced; ``unpriced_models`` names the models without a price)."""

    since: str
    until: str
    tenant_id: str | None
    rows: list[DailyUsageOut]
    calls: int
    input_tokens: int
    output_tokens: int
    cost: float | None = None
    unpriced_models: list[str] = Field(default_factory=list)


WebhookEventType = Literal["flush.succeeded", "flush.failed", "session.erased"]
_WEBHOOK_EVENT_TYPES: Final[tuple[WebhookEventType, ...]] = (
    "flush.succeeded",
    "flush.failed",
    "session.erased",
)
MAX_WEBHOOK_URL_CHARS: Final = 2048
MAX_WEBHOOK_DELIVERIES: Final = 1000
"""Most deliveries one listing answers."""
WEBHOOK_SECRET_PATTERN: Final = r"^whsec_[A-Za-z0-9+/]{32,88}={0,2}$"


class CreateWebhookRequest(RequestModel):
    """``POST /v1/admin/tenants/{id}/webhooks``: the receiver's ``url`` (http or https, a
    public address unless the operator allows private ones), the ``event_types`` it wants
    (default: all), and its ``secret`` (``whsec_`` + base64 of 24 to 64 bytes; generated when
    absent)."""

    url: str = Field(min_length=1, max_length=MAX_WEBHOOK_URL_CHARS)
    event_types: list[WebhookEventType] = Field(
        default_factory=lambda: list(_WEBHOOK_EVENT_TYPES),
        min_length=1,
        max_length=3,
    )
    secret: str | None = Field(default=None, pattern=WEBHOOK_SECRET_PATTERN, repr=False)


class WebhookEndpointOut(WireModel):
    """A webhook endpoint. ``secret`` is in the creating answer only, never in a listing."""

    id: str
    tenant_id: str
    url: str
    event_types: list[WebhookEventType]
    enabled: bool
    created_at: datetime
    secret: str | None = Field(default=None, repr=False)


class WebhookEndpointsOut(WireModel):
    """A tenant's webhook endpoints, oldest first (no secrets)."""

    endpoints: list[WebhookEndpointOut]


class WebhookDeliveryOut(WireModel):
    """One event for one endpoint: ``id`` is its ``webhook-id``; ``state`` pending, delivered
    or failed (its attempts used up); the last attempt's HTTP ``last_status`` or
    ``last_error``; when it is due again (``next_attempt_at``). Never the payload."""

    id: str
    endpoint_id: str
    event_type: WebhookEventType
    session_id: str | None
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveriesOut(WireModel):
    """A tenant's newest webhook deliveries, newest first."""

    deliveries: list[WebhookDeliveryOut]
