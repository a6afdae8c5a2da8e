"""Malformed input against a running ``om api`` on each store: every probe must be refused with
a 4xx, never answered with a 5xx, and nothing of it stored.

The probes: text no store can hold (NUL, lone high and low surrogates, sent as the JSON escapes
a client sends) in every kind of field an agent or an operator sends (message content and
parts, tool names, ids and arguments, custom data keys and values, notes, entry ids, session
ids and metadata, scope labels, tenant names, key labels, a key of the body itself); the same
as raw bytes (a raw NUL, UTF-8 encoded surrogates, invalid UTF-8); non-finite numbers (NaN,
Infinity, 1e400); JSON nested one level past the limit and 100,000 levels deep; unknown keys at
every level of the nested models; wrong types and shapes; bodies that are not JSON; ids and
query parameters holding NUL or surrogates.

Each store gets an API process of its own (``om api``, as deployed) on a fresh database (a
PostgreSQL database of its own, a SQLite file) and a private Redis.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import httpx

from om_api.schemas import MAX_JSON_DEPTH
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.store import AccountStore, SqlStore, upgrade
from tests.api.processes import ApiProcess, api_process
from tests.deploy.rehearsal import HOST, PG

Backend = Literal["postgresql", "sqlite"]
BACKENDS: Final[tuple[Backend, ...]] = ("postgresql", "sqlite")
START_TIMEOUT_S: Final = 60.0
VERY_DEEP: Final = 100_000
"""Nesting levels of the deepest probe: far past any recursion limit of a JSON parser."""

BAD_TEXT: Final = {"NUL": "\x00", "lone high surrogate": "\ud800", "lone low surrogate": "\udfff"}
SESSION: Final = "probe"
"""The probes' session: it must hold nothing once they have all run."""

Entry = Callable[[str], dict[str, Any]]


def _message(content: Any, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"kind": "message", "message": {"role": role, "content": content, **extra}}


def _tool_call(**call: Any) -> dict[str, Any]:
    return {"kind": "message", "message": {"role": "assistant", "tool_calls": [call]}}


ENTRY_FIELDS: Final[dict[str, Entry]] = {
    "message content": lambda bad: _message(f"a{bad}b"),
    "content part text": lambda bad: _message([{"type": "text", "text": f"x{bad}"}]),
    "content part data": lambda bad: _message([{"type": "image", "data": {"url": bad}}]),
    "tool name": lambda bad: _tool_call(id="c1", name=f"t{bad}"),
    "tool call id": lambda bad: _tool_call(id=bad, name="t"),
    "tool arguments value": lambda bad: _tool_call(id="c1", name="t", arguments={"q": [bad]}),
    "tool arguments key": lambda bad: _tool_call(id="c1", name="t", arguments={f"k{bad}": 1}),
    "tool result name": lambda bad: _message("r", role="tool", tool_call_id="c1", tool_name=bad),
    "custom data value": lambda bad: {"kind": "custom", "data": {"items": [{"v": bad}]}},
    "custom data key": lambda bad: {"kind": "custom", "data": {f"k{bad}": 1}},
    "note summary": lambda bad: {"kind": "note", "summary": f"s{bad}"},
    "entry kind": lambda bad: {"kind": f"note{bad}"},
    "entry id": lambda bad: {"id": f"e{bad}", **_message("x")},
    "parent id": lambda bad: {"parent_id": bad, **_message("x")},
}


@dataclass(frozen=True)
class Probe:
    """One malformed request: ``body`` is sent as is (``None``: no body); ``admin`` sends the
    admin token instead of the tenant's key."""

    kind: str
    name: str
    method: str
    path: str
    body: bytes | None = None
    content_type: str = "application/json"
    admin: bool = False


def _json(value: Any) -> bytes:
    # ensure_ascii: a lone surrogate travels as the escape \ud800, as a JavaScript client
    # writes it (it has no UTF-8 encoding); allow_nan writes NaN/Infinity literals.
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode("ascii")


def _nested(levels: int, leaf: str = "0") -> str:
    return "[" * levels + leaf + "]" * levels


def probes(tenant_id: str) -> list[Probe]:
    """Every probe, on the session :data:`SESSION` of ``tenant_id`` (which must exist)."""
    entries = f"/v1/sessions/{SESSION}/entries"
    found: list[Probe] = []

    def post(kind: str, name: str, path: str, body: Any, admin: bool = False) -> None:
        raw = body if isinstance(body, bytes) else _json(body)
        found.append(Probe(kind, name, "POST", path, raw, admin=admin))

    for bad_name, bad in BAD_TEXT.items():
        kind = f"unstorable text ({bad_name})"
        for field_name, build in ENTRY_FIELDS.items():
            # A good entry first: the batch must be refused whole.
            post(kind, field_name, entries, {"entries": [_message("fine"), build(bad)]})
        post(kind, "key of the body", entries, {"entries": [_message("x")], f"x{bad}": 1})
        post(kind, "session id", "/v1/sessions", {"id": f"s{bad}"})
        post(kind, "session metadata value", "/v1/sessions", {"id": "m1", "metadata": {"a": bad}})
        post(kind, "session metadata key", "/v1/sessions", {"id": "m2", "metadata": {bad: 1}})
        for scope_field in ("label", "kind"):
            body = {"id": "task:x", scope_field: f"v{bad}"}
            post(kind, f"scope {scope_field}", f"/v1/sessions/{SESSION}/scopes", body)
        post(kind, "tenant name", "/v1/admin/tenants", {"id": "t-bad", "name": bad}, admin=True)
        keys = f"/v1/admin/tenants/{tenant_id}/keys"
        post(kind, "key label", keys, {"label": f"l{bad}"}, admin=True)

    kind = "raw bytes"
    post(kind, "raw NUL byte", entries, b'{"entries": [{"kind": "note", "summary": "a\x00b"}]}')
    post(
        kind,
        "UTF-8 encoded surrogate",
        entries,
        b'{"entries": [{"kind": "note", "summary": "\xed\xa0\x80"}]}',
    )
    post(kind, "invalid UTF-8", entries, b'{"entries": [{"kind": "note", "summary": "\xff\xfe"}]}')
    post(kind, "lone surrogate as the body", entries, b'"\\ud800"')

    kind = "non-finite numbers"
    for literal in ("NaN", "Infinity", "-Infinity", "1e400"):
        raw = f'{{"entries": [{{"kind": "custom", "data": {{"x": [1, {literal}]}}}}]}}'
        post(kind, f"{literal} in custom data", entries, raw.encode())
    post(kind, "NaN in session metadata", "/v1/sessions", b'{"id": "m3", "metadata": {"x": NaN}}')

    kind = "deep JSON"
    over = _nested(MAX_JSON_DEPTH)
    post(kind, f"{MAX_JSON_DEPTH} levels in custom data", entries, _deep_entry(over))
    post(kind, f"{VERY_DEEP:,} levels in custom data", entries, _deep_entry(_nested(VERY_DEEP)))
    post(kind, f"{VERY_DEEP:,} levels as the body", entries, _nested(VERY_DEEP).encode())
    objects = '{"a": ' * VERY_DEEP + "0" + "}" * VERY_DEEP
    post(kind, f"{VERY_DEEP:,} levels of objects in metadata", "/v1/sessions", _deep_meta(objects))

    kind = "unknown keys"
    post(kind, "message.contnet", entries, {"entries": [_message_typo("contnet")]})
    part = _message([{"type": "text", "txt": "hi"}])
    post(kind, "content part .txt", entries, {"entries": [part]})
    call = _tool_call(id="c", name="t", argumnets={})
    post(kind, "tool_calls[0].argumnets", entries, {"entries": [call]})
    post(kind, "entry .mesage", entries, {"entries": [{"kind": "message", "mesage": {}}]})
    post(kind, "body .entrys", entries, {"entrys": [_message("x")]})
    post(kind, "session .metdata", "/v1/sessions", {"id": "m4", "metdata": {}})
    post(kind, "flush .forse", f"/v1/sessions/{SESSION}/flush", {"forse": True})
    post(kind, "scope .lable", f"/v1/sessions/{SESSION}/scopes", {"id": "task:y", "lable": "x"})
    post(kind, "tenant .nmae", "/v1/admin/tenants", {"id": "t-typo", "nmae": "x"}, admin=True)

    kind = "wrong types and shapes"
    post(kind, "entries not a list", entries, {"entries": "x"})
    post(kind, "no entries", entries, {"entries": []})
    post(kind, "1,001 entries", entries, {"entries": [_message(str(i)) for i in range(1001)]})
    post(kind, "content a number", entries, {"entries": [_message(5)]})
    post(kind, "unknown role", entries, {"entries": [_message("x", role="wizard")]})
    post(
        kind,
        "entry id of 300 characters",
        entries,
        {"entries": [{"id": "e" * 300, **_message("x")}]},
    )
    post(kind, "metadata a string", "/v1/sessions", {"id": "m5", "metadata": "x"})
    post(kind, "flush force a list", f"/v1/sessions/{SESSION}/flush", {"force": [1]})
    post(kind, "session id '..'", "/v1/sessions", {"id": ".."})

    kind = "not JSON"
    post(kind, "truncated", entries, b'{"entries": [')
    post(kind, "empty body", entries, b"")
    post(kind, "null", entries, b"null")
    post(kind, "a list", entries, b"[]")
    found.append(
        Probe(
            kind, "form-encoded", "POST", entries, b"entries=x", "application/x-www-form-urlencoded"
        )
    )
    found.append(Probe(kind, "plain text", "POST", entries, b"hello", "text/plain"))

    kind = "ids and query parameters"
    for bad in ("%00", "a%00b", "%ED%A0%80", "%ED%BF%BF"):
        for name, path in (
            ("session id", f"/v1/sessions/{bad}"),
            ("entries after", f"{entries}?after={bad}"),
            ("messages cursor", f"/v1/sessions/{SESSION}/messages?cursor={bad}"),
            ("context scope", f"/v1/sessions/{SESSION}/context?scope={bad}"),
            ("memory id", f"/v1/sessions/{SESSION}/memory/{bad}"),
            ("job id", f"/v1/jobs/{bad}"),
            ("sessions cursor", f"/v1/sessions?cursor={bad}"),
        ):
            found.append(Probe(kind, f"{name} {bad}", "GET", path))
        found.append(
            Probe(kind, f"scope id {bad}", "POST", f"/v1/sessions/{SESSION}/scopes/{bad}/enter")
        )
    for name, path in (
        ("entries limit -1", f"{entries}?limit=-1"),
        ("entries limit abc", f"{entries}?limit=abc"),
        ("entries limit 10^30", f"{entries}?limit={10**30}"),
        ("context max_tokens NaN", f"/v1/sessions/{SESSION}/context?max_tokens=NaN"),
        ("sessions updated_since garbage", "/v1/sessions?updated_since=yesterday%00"),
    ):
        found.append(Probe(kind, name, "GET", path))
    return found


def _message_typo(key: str) -> dict[str, Any]:
    return {"kind": "message", "message": {"role": "user", key: "hi"}}


def _deep_entry(nested: str) -> bytes:
    return f'{{"entries": [{{"kind": "custom", "data": {{"v": {nested}}}}}]}}'.encode()


def _deep_meta(nested: str) -> bytes:
    return f'{{"id": "m6", "metadata": {{"v": {nested}}}}}'.encode()


@dataclass
class ProbeReport:
    """What one store's API answered: statuses by probe kind, and every answer that is not a
    4xx (a 5xx, no answer at all, or a 2xx accepting malformed input)."""

    backend: Backend
    probes: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    five_xx: list[str] = field(default_factory=list)
    no_answer: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)
    """Probes answered 429: refused by a rate limit before their input was looked at."""
    stored: int = 0
    """Entries of the probes' session after every probe (must be 0)."""
    seconds: float = 0.0

    def failures(self) -> list[str]:
        """Everything that must not happen."""
        found = [f"5xx: {p}" for p in self.five_xx] + [f"no answer: {p}" for p in self.no_answer]
        found += [f"accepted: {p}" for p in self.accepted]
        found += [f"leak: {p}" for p in self.leaks]
        found += [f"rate-limited, not judged: {p}" for p in self.unjudged]
        if self.stored:
            found.append(f"{self.stored} entries stored on the probes' session")
        return found


def run_probes(
    url: str, key: str, admin_token: str, tenant_id: str, backend: Backend
) -> ProbeReport:
    """Send every probe to the API at ``url`` (the tenant's session :data:`SESSION` must
    exist and be empty); returns what it answered."""
    report = ProbeReport(backend)
    began = time.monotonic()
    auth = {"Authorization": f"Bearer {key}"}
    admin = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=url, timeout=60) as http:
        for probe in probes(tenant_id):
            label = f"{probe.kind}: {probe.name}"
            headers = {**(admin if probe.admin else auth), "content-type": probe.content_type}
            try:
                answer = http.request(probe.method, probe.path, content=probe.body, headers=headers)
            except httpx.TransportError as exc:
                report.no_answer.append(f"{label} ({type(exc).__name__})")
                continue
            finally:
                report.probes += 1
            status = answer.status_code
            report.statuses[f"{status}"] += 1
            report.by_kind[probe.kind] += 1
            if status >= 500:
                report.five_xx.append(f"{label}: {status} {answer.text[:200]}")
            elif status < 400:
                report.accepted.append(f"{label}: {status}")
            elif status == 429:
                report.unjudged.append(label)
        page = http.get(f"/v1/sessions/{SESSION}", headers=auth)
        page.raise_for_status()
        report.stored = int(page.json()["entry_count"])
    report.seconds = time.monotonic() - began
    return report


@contextlib.contextmanager
def _api_process(database_url: str, redis_url: str, admin_token: str) -> Iterator[ApiProcess]:
    # The probes judge validation: a 429 would answer before the body is even read.
    with api_process(
        database_url, redis_url, OM_ADMIN_TOKEN=admin_token, OM_RATE_LIMITS_ENABLED="false"
    ) as api:
        yield api


@contextlib.contextmanager
def _database(backend: Backend, work_dir: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{work_dir / 'om.db'}"
        return
    name = f"om_probe_{secrets.token_hex(4)}"
    subprocess.run(["createdb", *PG, name], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@{HOST}:5432/{name}"
    finally:
        subprocess.run(["dropdb", *PG, "--if-exists", "--force", name], capture_output=True)


def probe_backend(backend: Backend, say: Callable[[str], None] = print) -> ProbeReport:
    """Start ``om api`` on a fresh database of ``backend`` and a private Redis, run every
    probe, stop it. Raises :class:`RuntimeError` when the API does not start, and what
    ``createdb`` raises without PostgreSQL."""
    admin_token = f"admin-{secrets.token_hex(16)}"
    with (
        tempfile.TemporaryDirectory(prefix="om-probe-") as tmp,
        _database(backend, Path(tmp)) as database_url,
        EmbeddedRedis() as redis_server,
    ):
        upgrade(database_url)
        store = SqlStore.from_url(database_url)
        try:
            accounts = AccountStore(store.engine)
            tenant_id = accounts.create_tenant("probe-tenant").id
            key = accounts.create_api_key(tenant_id, label="probe").plaintext
            store.create_session(tenant_id, SESSION)
        finally:
            store.close()
        with _api_process(database_url, redis_server.url, admin_token) as api:
            say(f"  [{backend}] om api at {api.url}: {len(probes(tenant_id))} probes")
            report = run_probes(api.url, key, admin_token, tenant_id, backend)
        log = "\n".join(api.lines)
        report.leaks += [
            f"the {what} in the API's log"
            for what, secret in (("API key", key), ("admin token", admin_token))
            if secret in log
        ]
    say(
        f"  [{backend}] {report.probes} probes in {report.seconds:.1f} s: "
        f"{dict(report.statuses.most_common())}; failures {report.failures() or 'none'}"
    )
    return report
