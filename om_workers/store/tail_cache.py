"""The last entries of recently read branches, kept parsed between context reads.

An agent server reads a session's context before every turn: the recent window is the branch's
tail, which mostly holds the same entries as the previous read plus the turn's new messages.
Parsing those payloads again cost most of a context read. Entries never change once stored
(but for an erasure's placeholders, which mark the session row's ``rewritten_at``: a tail
cached before that is read again), so a tail read earlier stays true of every branch that
*continues* it: :class:`TailCache` then
reads only the entries after the cached ones (``seq`` past the cached leaf) and parses those.

Whether the branch continues the cached one is decided from the branch's segments, read in the
caller's transaction: the new segments clipped at the cached leaf's seq must equal the cached
segments. A branch that forked off, or a tail longer than what is cached, is read from the
store as before. So a read never answers from a stale branch, on any number of API processes.

An append that continues a cached tail's leaf extends it once committed
(:meth:`TailCache.continued`): an agent reads its context right after appending its run, and
that read then finds the new entries here instead of reading them back.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row

from om_core.ledger.append_plan import PlannedRow
from om_core.ledger.models import SessionEntry
from om_workers.store.branch import Segment, read_branch_payloads, to_entries

MAX_ENTRIES = 50_000
"""Entries kept over every session (least recently read sessions go first)."""
MAX_PER_SESSION = 4_096
"""Entries kept of one session's tail."""


@dataclass(frozen=True)
class _Tail:
    segments: tuple[Segment, ...]
    seqs: tuple[int, ...]
    entries: tuple[SessionEntry, ...]
    complete: bool  # the whole branch, root included
    rewritten_at: datetime | None  # the session row's when read (see sessions.rewritten_at)


def _clip(segments: Sequence[Segment], last_seq: int) -> tuple[Segment, ...]:
    return tuple((lo, min(hi, last_seq)) for lo, hi in segments if lo <= last_seq)


class TailCache:
    """Parsed branch tails by session, thread-safe; shared by a store's read units of work."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._items: OrderedDict[int, _Tail] = OrderedDict()
        self._held = 0
        self._max = max_entries
        self._lock = threading.Lock()

    def tail(
        self,
        connection: Connection,
        session_pk: int,
        segments: Sequence[Segment],
        limit: int,
        rewritten_at: datetime | None = None,
    ) -> tuple[SessionEntry, ...]:
        """The last ``limit`` entries of the branch ``segments`` describe, in branch order, as
        :func:`~om_workers.store.branch.read_branch_payloads` with ``newest_first`` reads them.
        ``rewritten_at``: the session row's; a tail cached before a rewrite in place (an
        erasure's placeholders) is read again."""
        return self.tail_and_seqs(connection, session_pk, segments, limit, rewritten_at)[0]

    def tail_and_seqs(
        self,
        connection: Connection,
        session_pk: int,
        segments: Sequence[Segment],
        limit: int,
        rewritten_at: datetime | None = None,
    ) -> tuple[tuple[SessionEntry, ...], tuple[int, ...]]:
        """:meth:`tail`, and its entries' seqs (ascending): a caller counting what lies before
        the tail, or looking for an entry of known seq in it, needs no lookup of positions."""
        if not segments:
            return (), ()
        with self._lock:
            cached = self._items.get(session_pk)
        if cached is not None and cached.seqs and cached.rewritten_at == rewritten_at:
            grown = self._extend(connection, session_pk, segments, cached)
            if grown is not None and (len(grown.entries) >= limit or grown.complete):
                self._keep(session_pk, grown)
                return grown.entries[-limit:], grown.seqs[-limit:]
        rows = read_branch_payloads(
            connection, session_pk, segments, limit=limit, newest_first=True
        )
        entries = to_entries(rows)
        tail = self._tail(segments, rows, entries, complete=len(rows) < limit)
        self._keep(session_pk, replace(tail, rewritten_at=rewritten_at))
        return entries, tail.seqs

    @staticmethod
    def _tail(
        segments: Sequence[Segment],
        rows: Sequence[Row[Any]],
        entries: tuple[SessionEntry, ...],
        *,
        complete: bool,
    ) -> _Tail:
        return _Tail(tuple(segments), tuple(int(r.seq) for r in rows), entries, complete, None)

    def _extend(
        self, connection: Connection, session_pk: int, segments: Sequence[Segment], cached: _Tail
    ) -> _Tail | None:
        """The cached tail plus the entries appended after it; ``None`` when the branch does
        not continue the cached one."""
        last = cached.seqs[-1]
        if _clip(segments, last) != _clip(cached.segments, last):
            return None
        rows = read_branch_payloads(connection, session_pk, segments, after_seq=last)
        if not rows:
            return replace(cached, segments=tuple(segments))
        added = to_entries(rows)
        return replace(
            cached,
            segments=tuple(segments),
            seqs=cached.seqs + tuple(int(r.seq) for r in rows),
            entries=cached.entries + added,
        )

    def continued(self, session_pk: int, leaf_id: str, rows: Sequence[PlannedRow]) -> None:
        """Extend the session's cached tail by ``rows``, committed after ``leaf_id``, when the
        cached tail ends at that leaf and each row is the child of the one before (the first
        of ``leaf_id``); else leave the cache as it is (a read then reads what it lacks).

        Entries are parsed from the rows' stored payloads, as a read would parse them. The
        segments are extended as the rows' ``segment_start`` say, so a later read compares
        them with the branch it reads exactly as for a tail it read itself."""
        with self._lock:
            cached = self._items.get(session_pk)
        if not rows or cached is None or not cached.seqs or not cached.segments:
            return
        last = cached.seqs[-1]
        if cached.entries[-1].id != leaf_id or cached.segments[-1][1] != last:
            return
        segments, parent = list(cached.segments), leaf_id
        for row in rows:
            if row.parent_id != parent:
                return  # a fork inside the batch: the branch holds only part of it
            parent = row.id
            if row.segment_start == row.seq:
                segments.append((row.seq, row.seq))
            elif row.segment_start == segments[-1][0] and row.seq == segments[-1][1] + 1:
                segments[-1] = (row.segment_start, row.seq)
            else:
                return  # not a continuation of this tail's branch
        added = tuple(SessionEntry.model_validate(row.payload) for row in rows)
        grown = replace(
            cached,
            segments=tuple(segments),
            seqs=cached.seqs + tuple(row.seq for row in rows),
            entries=cached.entries + added,
        )
        self._keep(session_pk, grown)

    def _keep(self, session_pk: int, tail: _Tail) -> None:
        if len(tail.entries) > MAX_PER_SESSION:
            tail = replace(
                tail,
                seqs=tail.seqs[-MAX_PER_SESSION:],
                entries=tail.entries[-MAX_PER_SESSION:],
                complete=False,
            )
        with self._lock:
            old = self._items.pop(session_pk, None)
            self._held -= len(old.entries) if old is not None else 0
            self._items[session_pk] = tail
            self._held += len(tail.entries)
            while self._held > self._max and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._held -= len(dropped.entries)


def holds_entry(
    tail: Sequence[SessionEntry], seqs: Sequence[int], entry_id: str | None, seq: int
) -> bool:
    """Whether ``tail`` (with its entries' ``seqs``, ascending along a branch) holds the
    entry ``entry_id`` whose seq is ``seq``: found by the seq and checked by the id, so a
    long tail is not walked (``False`` for an unknown ``seq``, 0, even if the entry is
    there: the caller then looks by id)."""
    if entry_id is None or seq <= 0:
        return False
    at = bisect_left(seqs, seq)
    return at < len(seqs) and seqs[at] == seq and tail[at].id == entry_id
