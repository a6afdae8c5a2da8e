"""One name per concept: ``flush_runs`` becomes ``flush_jobs``, ``entries.run_start`` becomes
``entries.segment_start``.

A flush request that got its own id is a *job* everywhere (the API's ``job_id``, the Celery
message, the row); a stretch of consecutive seqs of one session is a *segment*. Renames only:
no data moves.
"""

from __future__ import annotations

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"

_INDEXES = {
    "session_pk_queued_at": ["session_pk", "queued_at"],
    "state_started_at": ["state", "started_at"],
}


def upgrade() -> None:
    _rename("flush_runs", "flush_jobs", "run_start", "segment_start")


def downgrade() -> None:
    _rename("flush_jobs", "flush_runs", "segment_start", "run_start")


def _rename(old: str, new: str, old_column: str, new_column: str) -> None:
    op.execute(f"ALTER TABLE entries RENAME COLUMN {old_column} TO {new_column}")
    op.rename_table(old, new)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT pk_{old} TO pk_{new}")
        for referred in ("tenant_id_tenants", "session_pk_sessions"):
            op.execute(
                f"ALTER TABLE {new} RENAME CONSTRAINT fk_{old}_{referred} TO fk_{new}_{referred}"
            )
        for suffix in _INDEXES:
            op.execute(f"ALTER INDEX ix_{old}_{suffix} RENAME TO ix_{new}_{suffix}")
        return
    # SQLite renames neither indexes nor constraints; the indexes are rebuilt under their names.
    for suffix, columns in _INDEXES.items():
        op.drop_index(f"ix_{old}_{suffix}", table_name=new)
        op.create_index(f"ix_{new}_{suffix}", new, columns)
