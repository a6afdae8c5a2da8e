"""The export format (JSON Lines) and reading it back, line by line, before anything is stored.

An export is one JSON object a line, in this order:

1. ``om.export.header``: the format's name and version, the session's id and metadata;
2. the session's current branch, root to leaf, one entry a line in the ledger's wire format
   (camelCase keys: ``id``, ``sessionId``, ``parentId``, ``kind``, ``createdAt``,
   ``message``/``data``/``summary``; ``om.*`` memory records are ``custom`` entries);
3. the service's own records, each a ``type`` the ledger never uses: ``om.export.tombstone``
   (an entry a revocation withholds), ``om.export.memoryItem`` (an observation or reflection
   of the stored ledger, derived from the entries above), ``om.export.link`` (the funnel's
   workspace);
4. ``om.export.end``, with the counts of entries and records: a file cut at a line boundary
   is told from a whole one.

A line with a ``type`` key is a record, a line without one an entry (an entry has no ``type``
field). :class:`ImportReader` checks each line as it comes, so an import holds one batch at a
time; every refusal is an :class:`~om_core.errors.ImportLineError` naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from om_core.errors import ImportLineError
from om_core.ledger.erasure import ERASED_TYPE
from om_core.ledger.models import (
    FOLDED,
    OBSERVATIONS_DROPPED,
    OBSERVATIONS_RECORDED,
    REFLECTIONS_RECORDED,
    CompactionEntry,
    Frozen,
    ObservationsDropped,
    ObservationsRecorded,
    ReflectionsRecorded,
    SessionEntry,
)
from om_core.scopes.records import scope_record_models

EXPORT_FORMAT: Final = "om.export"
EXPORT_VERSION: Final = 1
HEADER: Final = "om.export.header"
TOMBSTONE: Final = "om.export.tombstone"
MEMORY_ITEM: Final = "om.export.memoryItem"
LINK: Final = "om.export.link"
END: Final = "om.export.end"
RECORD_TYPES: Final = frozenset({HEADER, TOMBSTONE, MEMORY_ITEM, LINK, END})


class ExportHeader(Frozen):
    """The first line: which format, which version, the exported session."""

    type: Literal["om.export.header"] = HEADER
    format: Literal["om.export"] = EXPORT_FORMAT
    version: int
    session_id: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    leaf_id: str | None = None
    exported_at: str | None = None


class TombstoneRecord(Frozen):
    """An entry the session withholds from reads and flushes (a revocation)."""

    type: Literal["om.export.tombstone"] = TOMBSTONE
    entry_id: str = Field(min_length=1, max_length=256)
    corrected: bool = False


class MemoryItemRecord(Frozen):
    """An observation or reflection of the session's stored ledger. Derived from the entries:
    an import checks it and derives its own."""

    type: Literal["om.export.memoryItem"] = MEMORY_ITEM
    kind: Literal["observation", "reflection"]
    id: str
    item: dict[str, Any]
    dropped: bool = False


class LinkRecord(Frozen):
    """The workspace the session's observable messages were copied to (the funnel)."""

    type: Literal["om.export.link"] = LINK
    workspace: str


class ExportEnd(Frozen):
    """The last line: how many entries and records (not counting header and end) came."""

    type: Literal["om.export.end"] = END
    entries: int = Field(ge=0)
    records: int = Field(ge=0)


ExportRecord = TombstoneRecord | MemoryItemRecord | LinkRecord
_RECORD_MODELS: dict[str, type[Frozen]] = {
    TOMBSTONE: TombstoneRecord,
    MEMORY_ITEM: MemoryItemRecord,
    LINK: LinkRecord,
    END: ExportEnd,
}


class ErasedPlaceholder(Frozen):
    """An entry whose content was erased (a workspace's copy of an erased child, or memory
    written after it): only its type is left."""

    type: Literal["om.erased"] = ERASED_TYPE


_MEMORY_RECORDS: dict[str, type[Frozen]] = {
    ERASED_TYPE: ErasedPlaceholder,
    OBSERVATIONS_RECORDED: ObservationsRecorded,
    REFLECTIONS_RECORDED: ReflectionsRecorded,
    OBSERVATIONS_DROPPED: ObservationsDropped,
    **scope_record_models(),
}


def _memory_ids_of(record: Frozen) -> list[str]:
    """Observation and reflection ids a parsed memory record (or a compaction's snapshot)
    carries."""
    if isinstance(record, CompactionEntry):
        record = record.memory
    return [
        item.id for found in ("observations", "reflections") for item in getattr(record, found, ())
    ]


def recorded_memory_ids(entry: SessionEntry) -> list[str]:
    """The observation and reflection ids ``entry`` records (``om.observations.recorded``,
    ``om.reflections.recorded``, a compaction's folded snapshot); none for any other entry or
    a malformed record. An export lists only memory items its entries record: items a flush
    committed after the export's leaf belong to a later export."""
    if entry.kind == "compaction" and entry.data is not None and "memory" in entry.data:
        model: type[Frozen] | None = CompactionEntry
    else:
        kind = entry.record_type
        model = (
            _MEMORY_RECORDS.get(kind)
            if kind in (OBSERVATIONS_RECORDED, REFLECTIONS_RECORDED)
            else None
        )
    if model is None:
        return []
    try:
        return _memory_ids_of(model.model_validate(entry.data))
    except ValidationError:
        return []


def dump_line(value: Frozen | Mapping[str, Any]) -> bytes:
    """One line of an export: compact JSON, UTF-8, ending in a newline."""
    data = value.to_json_dict() if isinstance(value, Frozen) else value
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


@dataclass(frozen=True, slots=True)
class ImportedEntry:
    """An entry line, checked: ``parent_in_file`` is false when its parent is not an earlier
    line, so the store must find the parent in the session."""

    line: int
    entry: SessionEntry
    parent_in_file: bool


@dataclass(frozen=True, slots=True)
class ImportedRecord:
    """A record line, checked."""

    line: int
    record: ExportRecord


EntryCheck = Callable[[SessionEntry], None]
"""The edge's own checks of an entry (id patterns, storable text ...): raises ``ValueError``."""


def _reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class ImportReader:
    """Checks an export's lines in order, for an import into ``session_id``.

    Call :meth:`read` with each line (``bytes``, with its newline) and its 1-based number,
    then :meth:`finish` at the end of the file. Each returns what to store, or raises
    :class:`ImportLineError` naming the first bad line: a line cut short (no newline at the
    end of the file), not UTF-8, not JSON, not an object; no header first, or an unknown
    format version; an unknown record ``type``; an entry that is not a valid entry, a custom
    entry whose ``om.*`` record is unknown or malformed, an id seen on an earlier line;
    ``check_entry`` refusing it (the API's caps and id rules); a tombstone or memory item
    naming nothing of the file; lines after the end record, or a file without one. An entry's
    ``sessionId`` is replaced by ``session_id``: the file may come from another session id.
    """

    def __init__(self, session_id: str, check_entry: EntryCheck | None = None) -> None:
        self._session_id = session_id
        self._check_entry = check_entry
        self._lines_of: dict[str, int] = {}
        self._memory_ids: set[str] = set()
        self.header: ExportHeader | None = None
        self._entries = 0
        self._records = 0
        self._ended = False
        self._last_line = 0

    def read(self, number: int, raw: bytes) -> ImportedEntry | ImportedRecord | None:
        """Check line ``number``; the entry or record it holds (``None``: header, end or a
        blank line). Raises :class:`ImportLineError`."""
        self._last_line = number
        if not raw.endswith(b"\n"):
            raise ImportLineError(number, "truncated: the line does not end with a newline")
        if not raw.strip():
            return None
        if self._ended:
            raise ImportLineError(number, "a line after the om.export.end record")
        value = self._parse(number, raw)
        kind = value.get("type")
        if self.header is None:
            self.header = self._header(number, value)
            return None
        if kind is None:
            return self._entry(number, value)
        return self._record(number, kind, value)

    def finish(self) -> ExportHeader:
        """Check the end of the file: there was a header and an end record. Raises
        :class:`ImportLineError` (naming the line after the last) otherwise."""
        if self.header is None:
            raise ImportLineError(self._last_line + 1, "empty: no om.export.header line")
        if not self._ended:
            raise ImportLineError(
                self._last_line + 1, "truncated: the file ends before its om.export.end line"
            )
        return self.header

    def _parse(self, number: int, raw: bytes) -> dict[str, Any]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportLineError(number, "not UTF-8 text") from None
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise ImportLineError(number, f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ImportLineError(number, "not a JSON object")
        return value

    def _header(self, number: int, value: dict[str, Any]) -> ExportHeader:
        if value.get("type") != HEADER:
            raise ImportLineError(number, f"the first line must be the {HEADER} record")
        version = value.get("version")
        if version != EXPORT_VERSION:
            raise ImportLineError(
                number, f"unsupported export version {version!r} (this service reads 1)"
            )
        try:
            return ExportHeader.model_validate(value)
        except ValidationError as exc:
            raise ImportLineError(number, f"invalid header: {_reason(exc)}") from None

    def _entry(self, number: int, value: dict[str, Any]) -> ImportedEntry:
        if self._records:
            raise ImportLineError(number, "an entry after the service's records")
        try:
            entry = SessionEntry.model_validate({**value, "sessionId": self._session_id})
        except ValidationError as exc:
            raise ImportLineError(number, f"invalid entry: {_reason(exc)}") from None
        if self._check_entry is not None:
            try:
                self._check_entry(entry)
            except ValueError as exc:
                raise ImportLineError(number, f"invalid entry: {exc}") from None
        first = self._lines_of.get(entry.id)
        if first is not None:
            raise ImportLineError(number, f"duplicate entry id {entry.id!r} (line {first})")
        self._check_record(number, entry)
        parent = entry.parent_id
        in_file = parent is None or parent in self._lines_of
        self._lines_of[entry.id] = number
        self._entries += 1
        return ImportedEntry(number, entry, in_file)

    def _check_record(self, number: int, entry: SessionEntry) -> None:
        """An ``om.*`` record must be one the service knows, and well formed: the fold would
        silently skip it, and the memory it carries would be lost."""
        kind = entry.record_type
        if entry.kind == "compaction" and entry.data is not None and "memory" in entry.data:
            model: type[Frozen] | None = CompactionEntry
            kind = FOLDED
        elif kind is None or not kind.startswith("om."):
            return
        else:
            model = _MEMORY_RECORDS.get(kind)
        if model is None:
            raise ImportLineError(number, f"unknown entry kind: custom record {kind!r}")
        try:
            parsed = model.model_validate(entry.data)
        except ValidationError as exc:
            raise ImportLineError(number, f"invalid {kind} record: {_reason(exc)}") from None
        self._memory_ids.update(_memory_ids_of(parsed))

    def _record(self, number: int, kind: Any, value: dict[str, Any]) -> ImportedRecord | None:
        model = _RECORD_MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            raise ImportLineError(number, f"unknown record type {kind!r}")
        try:
            record = model.model_validate(value)
        except ValidationError as exc:
            raise ImportLineError(number, f"invalid {kind} record: {_reason(exc)}") from None
        if isinstance(record, ExportEnd):
            self._end(number, record)
            return None
        self._check_reference(number, record)
        self._records += 1
        assert isinstance(record, TombstoneRecord | MemoryItemRecord | LinkRecord)
        return ImportedRecord(number, record)

    def _check_reference(self, number: int, record: Frozen) -> None:
        if isinstance(record, TombstoneRecord) and record.entry_id not in self._lines_of:
            raise ImportLineError(
                number, f"tombstone of entry {record.entry_id!r}, which the file does not hold"
            )
        if isinstance(record, MemoryItemRecord) and record.id not in self._memory_ids:
            raise ImportLineError(
                number, f"memory item {record.id!r} is recorded by no entry of the file"
            )

    def _end(self, number: int, end: ExportEnd) -> None:
        if (end.entries, end.records) != (self._entries, self._records):
            raise ImportLineError(
                number,
                f"the end record counts {end.entries} entries and {end.records} records, "
                f"the file holds {self._entries} and {self._records}: lines are missing",
            )
        self._ended = True
