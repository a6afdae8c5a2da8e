"""Export and import of one session: the store's side of :mod:`om_core.portability`.

**Export** reads in pages, each its own short read transaction: the branch's seq ranges are
fixed when the export starts (the leaf of that moment), and every page is one keyset range
``seq > last`` over them, so a 100k-entry session streams with one page in memory, and
entries appended meanwhile (after that leaf) are not part of it. Nothing is ever deleted
from a branch but by erasure; an erased session ends the stream early (without its end
record, which an import then refuses as truncated).

**Import** is one write transaction: every line is checked by
:class:`~om_core.portability.ImportReader` as it is read, and entries are appended in batches
through the same append plan as ``POST .../entries``
(:func:`~om_workers.store.funnel.append_with_copies`), each batch under the session's write
lock; any refusal rolls everything back, the session's creation included. Ids are kept: an id
already stored in another session of the tenant refuses the import (409), and an id already
stored in this session with the same content is a duplicate, so importing a file twice leaves
one copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

from om_core.errors import EntryConflictError, ImportClashError, ImportLineError
from om_core.ledger.append_plan import iso_timestamp
from om_core.ledger.models import SessionEntry
from om_core.portability import (
    EXPORT_VERSION,
    EntryCheck,
    ExportEnd,
    ExportHeader,
    ImportedEntry,
    ImportedRecord,
    ImportReader,
    LinkRecord,
    MemoryItemRecord,
    TombstoneRecord,
    recorded_memory_ids,
)
from om_workers.store.branch import Segment
from om_workers.store.funnel import append_with_copies
from om_workers.store.records import ImportResult, SessionInfo
from om_workers.store.repositories import tombstone_scope
from om_workers.store.service import Service
from om_workers.store.unit_of_work import SqlUnitOfWork

EXPORT_PAGE = 1000
"""Entries (and memory items) an export reads per transaction."""

IMPORT_BATCH = 1000
"""Entries an import hands to one append plan (all in the import's one transaction)."""

ExportItem = (
    ExportHeader | SessionEntry | TombstoneRecord | MemoryItemRecord | LinkRecord | ExportEnd
)
"""What an export yields, in order: the header, the entries, the records, the end."""


class PortabilityService(Service):
    """Export and import of a tenant's sessions (see :class:`~om_workers.store.SqlStore`)."""

    def export_session(
        self, tenant_id: str, session_id: str, *, page_size: int = EXPORT_PAGE
    ) -> Iterator[ExportItem]:
        """The session's export, item by item (reads lazily: see the module docstring).
        Raises :class:`~om_workers.errors.SessionNotFoundError` at the first item."""
        with self._units.read() as uow:
            info = uow.sessions.info(tenant_id, session_id)
            head = uow.sessions.head(tenant_id, session_id)
            segments = uow.entries.segments(head.pk, head.leaf_id)
            tombstones = uow.tombstones.of_scope(tenant_id, tombstone_scope(session_id))
            now = uow.now()
        yield _header(info, now)
        entries = 0
        recorded: set[str] = set()
        for page in self._entry_pages(head.pk, segments, page_size):
            entries += len(page)
            for entry in page:
                recorded.update(recorded_memory_ids(entry))
            yield from page
        records = 0
        for tombstone in tombstones:
            records += 1
            yield TombstoneRecord(entry_id=tombstone.entry_id, corrected=tombstone.corrected)
        for item in self._memory_items(head.pk, page_size):
            if item.id in recorded:
                records += 1
                yield item
        if info.workspace_id is not None:
            records += 1
            yield LinkRecord(workspace=info.workspace_id)
        yield ExportEnd(entries=entries, records=records)

    def _entry_pages(
        self, session_pk: int, segments: Sequence[Segment], page_size: int
    ) -> Iterator[tuple[SessionEntry, ...]]:
        after_seq = 0
        while True:
            with self._units.read() as uow:
                after_seq, page = uow.entries.page(session_pk, segments, after_seq, page_size)
            if not page:
                return
            yield page

    def _memory_items(self, session_pk: int, page_size: int) -> Iterator[MemoryItemRecord]:
        after = ("", "")
        while True:
            with self._units.read() as uow:
                page = uow.memory.items_page(session_pk, after, page_size)
            if not page:
                return
            after = (page[-1].kind, page[-1].item_id)
            for item in page:
                yield MemoryItemRecord.model_validate(
                    {
                        "kind": item.kind,
                        "id": item.item_id,
                        "item": item.payload,
                        "dropped": item.dropped,
                    }
                )

    def import_session(
        self,
        tenant_id: str,
        session_id: str,
        lines: Iterable[tuple[int, bytes]],
        *,
        check_entry: EntryCheck | None = None,
    ) -> ImportResult:
        """Import an export's ``lines`` (``(number, bytes)``, each with its newline) into the
        session, created with the header's metadata when the tenant has none of that id.
        One transaction: on any error nothing is stored."""
        reader = ImportReader(session_id, check_entry)
        with self._units.write() as uow:
            uow.sessions.require_tenant(tenant_id)
            importer = _Importer(uow, tenant_id, session_id)
            for number, raw in lines:
                item = reader.read(number, raw)
                if reader.header is not None and not importer.started:
                    importer.start(reader.header)
                if item is not None:
                    importer.add(item)
            reader.finish()
            result = importer.finish()
            uow.commit()
        return result


def _header(info: SessionInfo, now: datetime) -> ExportHeader:
    return ExportHeader(
        version=EXPORT_VERSION,
        session_id=info.id,
        metadata=dict(info.metadata),
        leaf_id=info.leaf_id,
        exported_at=iso_timestamp(now),
    )


class _Importer:
    """The write side of one import, inside its unit of work."""

    def __init__(self, uow: SqlUnitOfWork, tenant_id: str, session_id: str) -> None:
        self._uow = uow
        self._tenant_id = tenant_id
        self._session_id = session_id
        self._batch: list[ImportedEntry] = []
        self._tombstones: list[TombstoneRecord] = []
        self.started = False
        self._created = False
        self._imported = 0
        self._duplicates = 0

    def start(self, header: ExportHeader) -> None:
        """Create the session (with the header's metadata) unless the tenant has it."""
        self.started = True
        uow = self._uow
        if not uow.sessions.exists(self._tenant_id, self._session_id):
            uow.sessions.insert(
                self._tenant_id,
                self._session_id,
                metadata=header.metadata,
                workspace_id=None,
                now=uow.now(),
            )
            self._created = True

    def add(self, item: ImportedEntry | ImportedRecord) -> None:
        """Take one checked line: entries go in batches, records after them."""
        if isinstance(item, ImportedEntry):
            self._batch.append(item)
            if len(self._batch) >= IMPORT_BATCH:
                self._append()
            return
        self._append()
        if isinstance(item.record, TombstoneRecord):
            self._tombstones.append(item.record)

    def finish(self) -> ImportResult:
        """Write what is left and the tombstones; the import's result."""
        self._append()
        uow = self._uow
        scope = tombstone_scope(self._session_id)
        known = uow.tombstones.withheld(self._tenant_id, scope)
        fresh = list(dict.fromkeys(t.entry_id for t in self._tombstones if t.entry_id not in known))
        corrected = {t.entry_id for t in self._tombstones if t.corrected}
        now = uow.now()
        for flag in (False, True):
            ids = [entry_id for entry_id in fresh if (entry_id in corrected) == flag]
            if ids:
                uow.tombstones.insert(self._tenant_id, scope, ids, corrected=flag, now=now)
        return ImportResult(
            session=uow.sessions.info(self._tenant_id, self._session_id),
            created=self._created,
            imported=self._imported,
            duplicates=self._duplicates,
            tombstones=len(fresh),
        )

    def _append(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        uow = self._uow
        session = uow.sessions.lock(self._tenant_id, self._session_id)
        for item in batch:
            parent = item.entry.parent_id
            if (
                not item.parent_in_file
                and parent is not None
                and uow.entries.position(session.pk, parent) is None
            ):
                raise ImportLineError(
                    item.line, f"parent {parent!r} is in neither the file nor the session"
                )
        try:
            result = append_with_copies(uow, session, [i.entry for i in batch], now=uow.now())
        except EntryConflictError as exc:
            raise self._clash(batch, exc.entry_id) from None
        self._imported += len(result.appended_ids)
        self._duplicates += len(result.duplicate_ids)

    def _clash(self, batch: Sequence[ImportedEntry], entry_id: str) -> Exception:
        line = next(item.line for item in batch if item.entry.id == entry_id)
        session = self._uow.sessions.lock(self._tenant_id, self._session_id)
        stored, _ = self._uow.entries.look_up(session, [entry_id], [])
        found = stored.get(entry_id)
        if found is not None and not found.in_session:
            return ImportClashError(line, entry_id)
        return ImportLineError(
            line, f"entry id {entry_id!r} is already stored in this session with other content"
        )
