"""The edge of export and import: export items as redacted JSON lines, an import body spooled
and read back line by line, and the append's own entry checks applied to every imported line.

Kept apart from the routes so the admin's tenant export and the session routes share it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Iterator
from tempfile import SpooledTemporaryFile
from typing import IO, Final

from pydantic import ValidationError

from om_api.schemas import EntryIn, find_unstorable
from om_core.ledger.models import SessionEntry
from om_core.policy.redaction import normalize_secrets, redact_value
from om_core.portability import ExportHeader, MemoryItemRecord, dump_line
from om_core.read.recall import redact_entry
from om_workers.store import SqlStore
from om_workers.store.portability import ExportItem

NDJSON: Final = "application/x-ndjson"
"""The media type of an export and of an import's body."""

SPOOL_IN_MEMORY: Final = 1024 * 1024
"""Bytes of an import body kept in memory; the rest of it goes to a temporary file."""


def export_lines(items: Iterable[ExportItem], secrets: Iterable[str]) -> Iterator[bytes]:
    """Each export item as one line, every exact secret redacted (entries' payloads, the
    session's metadata, memory items' text), as every other read of the API redacts them."""
    known = normalize_secrets(secrets)
    for item in items:
        if isinstance(item, SessionEntry):
            yield dump_line(redact_entry(item, known).to_json_dict())
        elif isinstance(item, ExportHeader):
            metadata = redact_value(item.metadata, known)
            yield dump_line(item.model_copy(update={"metadata": metadata}))
        elif isinstance(item, MemoryItemRecord):
            yield dump_line(item.model_copy(update={"item": redact_value(item.item, known)}))
        else:
            yield dump_line(item)


def tenant_export_lines(store: SqlStore, tenant_id: str, secrets: Iterable[str]) -> Iterator[bytes]:
    """Every session of the tenant, newest first, one export after the other (each from its
    header to its end line). A session erased meanwhile is left out."""
    known = tuple(secrets)
    cursor: str | None = None
    while True:
        listing = store.list_sessions(tenant_id, limit=100, cursor=cursor)
        for info in listing.sessions:
            yield from export_lines(store.export_session(tenant_id, info.id), known)
        cursor = listing.next_cursor
        if cursor is None:
            return


def check_entry(entry: SessionEntry) -> None:
    """The checks ``POST .../entries`` applies to an entry, for an imported one: storable
    text, the id patterns, the caps of kinds, tool calls and content parts. Raises
    ``ValueError`` with the first reason."""
    found = find_unstorable(entry.to_json_dict())
    if found is not None:
        path, reason = found
        raise ValueError(f"{'.'.join(str(p) for p in path) or 'entry'}: {reason}")
    fields = entry.model_dump(exclude={"session_id", "created_at"}, exclude_none=True)
    try:
        EntryIn.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where}: {first['msg']}") from None


async def spool_body(chunks: AsyncIterable[bytes]) -> IO[bytes]:
    """The request body in a spooled temporary file (in memory up to
    :data:`SPOOL_IN_MEMORY`, then on disk), rewound. The body-size limit is the request
    middleware's (``OM_MAX_BODY_BYTES``): it stops the stream once the body passes it."""
    spool: IO[bytes] = SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
    try:
        async for chunk in chunks:
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def numbered_lines(body: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """The body's lines with their 1-based numbers, each with its newline (the last one
    without, when the body does not end in one)."""
    yield from enumerate(body, start=1)
