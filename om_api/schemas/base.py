"""The wire format's foundations: the id patterns and page caps, the two base models
(:class:`WireModel` for responses, :class:`RequestModel` for requests, which refuses
unstorable text) and :class:`ErrorBody`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar, Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
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


def parse_json_body(body: bytes) -> tuple[Any, bool]:
    """``body`` parsed as JSON, and whether it is *plainly storable*: its text alone shows
    that nothing in it is refused by :func:`find_unstorable` (UTF-8 with no ``\\u`` escape
    and no encoded surrogate, so no U+0000 or lone surrogate; no ``NaN``, ``Infinity`` or
    number too large for a float; fewer brackets than :data:`MAX_JSON_DEPTH`), so a model
    validated under :func:`storable_vouched` need not walk it. Raises what
    :func:`json.loads` raises for text that is not JSON."""
    # No zero byte: the text is UTF-8 (json.loads would read UTF-16 and UTF-32 too). No 0xED:
    # json.loads takes UTF-8-encoded surrogates as they are (and Hangul's rarer half falls
    # back to the walk, harmlessly).
    plain = (
        b"\\u" not in body
        and b"\x00" not in body
        and b"\xed" not in body
        and body.count(b"[") + body.count(b"{") < MAX_JSON_DEPTH
    )
    if not plain:
        return json.loads(body), False
    odd: list[str] = []  # the numbers find_unstorable would refuse

    def number(text: str) -> float:
        value = float(text)  # as json.loads reads a float, and NaN, Infinity, -Infinity
        if not math.isfinite(value):
            odd.append(text)
        return value

    return json.loads(body, parse_float=number, parse_constant=number), not odd


@contextmanager
def storable_vouched(vouched: bool) -> Iterator[None]:
    """With ``vouched`` (the value was walked, or :func:`parse_json_body` vouched for its
    text), request models validated inside the block skip their walk for unstorable values;
    without it, nothing changes."""
    if not vouched:
        yield
        return
    token = _STORABLE_CHECKED.set(True)
    try:
        yield
    finally:
        _STORABLE_CHECKED.reset(token)


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
        with storable_vouched(True):
            return handler(data)


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
