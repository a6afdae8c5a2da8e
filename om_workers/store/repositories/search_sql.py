"""SQL shared by the search statements of both stores.

Every candidate has a key ``(rank, source, row)``: ``rank`` the negated score (lower is
better), ``source`` 0 for a message and 1 for a memory item, ``row`` ``session_pk * 2**32``
plus the entry's ``seq`` or the item's ``ord``. Pages follow that key, so they never overlap.
"""

from __future__ import annotations

ROW_SHIFT = 4294967296
"""A session's rows are ``session_pk * ROW_SHIFT`` plus a position (an entry's ``seq``, a
memory item's ``ord``)."""

WITHHELD_ROWS = f"""
    SELECT e.session_pk * {ROW_SHIFT} + e.seq
    FROM tombstones AS t
    JOIN sessions AS ts ON ts.tenant_id = t.tenant_id AND t.scope = 'session:' || ts.id
    JOIN entries AS e
        ON e.tenant_id = t.tenant_id AND e.id = t.entry_id AND e.session_pk = ts.pk
    WHERE t.tenant_id = :tenant_id
"""
"""Rows the tenant's tombstones withhold, as candidate rows: built once per statement (an
uncorrelated subquery), so filtering a match costs one set lookup, not two index probes."""

OF_TENANT = "JOIN sessions AS s ON s.pk = {pk} AND s.tenant_id = :tenant_id AND s.erased_at IS NULL"
"""The tenant's sessions, for a tenant-wide search (a session search is its rowid range); a
session being erased is hidden at once, its rows until the job deletes them."""

AFTER = """AND (rank > :after_rank OR (rank = :after_rank AND (source > :after_source
    OR (source = :after_source AND row > :after_row))))"""
"""Only the keys after the cursor's."""

ROWS = f"""
    SELECT c.source, c.row, c.rank, s.id AS session_id,
        e.id AS entry_id, e.created_at, e.payload AS entry_payload,
        m.kind AS memory_kind, m.payload AS memory_payload
    FROM candidates AS c
    JOIN sessions AS s ON s.pk = c.row / {ROW_SHIFT}
    LEFT JOIN entries AS e
        ON c.source = 0 AND e.session_pk = c.row / {ROW_SHIFT} AND e.seq = c.row % {ROW_SHIFT}
    LEFT JOIN memory_items AS m
        ON c.source = 1 AND m.session_pk = c.row / {ROW_SHIFT} AND m.ord = c.row % {ROW_SHIFT}
    ORDER BY c.rank, c.source, c.row
"""
"""The stored rows of a page's candidates (a ``candidates`` table of keys), best first: joined
once the page is known, so payloads are read for the page alone."""
