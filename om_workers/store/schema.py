"""The store's tables (SQLAlchemy Core), the single source the migrations are checked against.

Why these shapes:

- ``sessions.pk`` is a surrogate key: session ids are chosen by clients and are unique only
  within a tenant, so another tenant may reuse an id without learning that it exists.
- ``(entries.tenant_id, entries.id)`` is the primary key: entry ids are unique across a
  tenant's whole store, which is what makes appends idempotent by id.
- ``entries.seq`` numbers a session's entries in append order; a parent always has a smaller
  seq than its child, so a branch read in seq order is in branch order. ``(session_pk, seq)``
  is unique and indexed, so every read of a session is a range scan of that session alone.
- ``entries.segment_start`` is the seq where the entry's *segment* begins: a segment is a
  stretch of consecutive seqs in which each entry's parent is the entry just before it. A
  branch is then a handful of seq ranges (one per fork on it), found by a recursive query over
  segments instead of one step per entry.
- ``entries.eligible_tokens`` is the entry's token estimate when it is an observable message,
  else 0, so the unobserved-token count is a sum over the branch tail.
- ``(sessions.tenant_id, created_at, id)`` is indexed: listing a tenant's sessions is a range
  scan of that tenant alone, in the listing's order.
- ``sessions.workspace_id`` is the funnel's link: an id, not a foreign key to ``pk``, because
  a link is always within the tenant and is looked up as ``(tenant_id, id)`` like any session.
- ``snapshots`` keeps one folded ledger per session, covering its current branch up to
  ``seq``; reads fold only what follows it. The row holds the ledger's cursors and scope map;
  its observations and reflections are rows of ``memory_items`` (``ord`` is record order,
  ``dropped_ord`` drop order, ``NULL`` while active), so advancing the snapshot after a flush
  writes only what the flush recorded, and a flush reads only the active pool.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

from om_core.read.search_narrowing import MAX_NARROWING_KEY_CHARS, MAX_NARROWING_VALUE_CHARS

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LENGTH = 256
KIND_LENGTH = 64
TENANT_ID_LENGTH = 128

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# SQLite only aliases the rowid (and so autoincrements) for a column typed exactly INTEGER.
SurrogateKey = BigInteger().with_variant(Integer(), "sqlite")
# JSONB on PostgreSQL: compact, and queryable by later features without a migration of data.
Json = JSON().with_variant(JSONB(), "postgresql")


def tenant_id_column(*, primary_key: bool = False, index: bool = False) -> Column[str]:
    """``tenant_id``, never ``NULL``: the row belongs to a tenant and is deleted with it."""
    owner = ForeignKey("tenants.id", ondelete="CASCADE")
    return Column(
        "tenant_id",
        String(TENANT_ID_LENGTH),
        owner,
        primary_key=primary_key,
        nullable=False,
        index=index,
    )


def session_pk_column(*, primary_key: bool = False) -> Column[int]:
    """``session_pk``, never ``NULL``: the row belongs to a session and is deleted with it."""
    owner = ForeignKey("sessions.pk", ondelete="CASCADE")
    return Column("session_pk", SurrogateKey, owner, primary_key=primary_key, nullable=False)


tenants = Table(
    "tenants",
    metadata,
    Column("id", String(TENANT_ID_LENGTH), primary_key=True),
    Column("name", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # Per-class rate-limit overrides set by an admin ({"appends": {"rate_per_s": .., "burst":
    # ..}, ...}); NULL or an absent class: the OM_RATE_* defaults.
    Column("rate_limits", Json, nullable=True),
    # Sessions idle (no append) longer than this many days are erased by the retention pass;
    # NULL: kept for ever (the default).
    Column("retention_days", Integer, nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(32), primary_key=True),
    tenant_id_column(index=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("label", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

sessions = Table(
    "sessions",
    metadata,
    Column("pk", SurrogateKey, primary_key=True, autoincrement=True),
    tenant_id_column(),
    Column("id", String(ID_LENGTH), nullable=False),
    Column("leaf_id", String(ID_LENGTH), nullable=True),
    Column("epoch", BigInteger, nullable=False),
    Column("entry_count", BigInteger, nullable=False),
    Column("unobserved_tokens", BigInteger, nullable=False),
    Column("meta", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # The funnel's link (om_workers/store/funnel.py): the id of a session of the same tenant
    # that receives a copy of every observable message appended here; NULL when unlinked.
    Column("workspace_id", String(ID_LENGTH), nullable=True),
    # Set when the session was erased (om_workers/store/erasure.py): from then on its row
    # carries a name no API id can take, so no route finds it, until a worker deletes it.
    Column("erased_at", DateTime(timezone=True), nullable=True),
    # Set when stored entries of the session were rewritten in place (a workspace's copies of
    # an erased child become placeholders): entries are otherwise immutable, and the API's
    # caches of parsed entries and ledgers are keyed on this, so none outlives the rewrite.
    Column("rewritten_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("tenant_id", "id", name="uq_sessions_tenant_id_id"),
    # Listing a tenant's sessions newest first (om_workers/store/listing.py).
    Index("ix_sessions_tenant_id_created_at_id", "tenant_id", "created_at", "id"),
    # "Is this session some session's workspace?" (funnels do not chain).
    Index("ix_sessions_tenant_id_workspace_id", "tenant_id", "workspace_id"),
)

# The metadata pairs a search can be narrowed by (om_core.read.search_narrowing), one row per
# pair of a live session, written when the session is created and deleted when it is erased:
# finding a narrowing's sessions reads the matching rows, not the tenant's sessions.
session_metadata_pairs = Table(
    "session_metadata_pairs",
    metadata,
    Column("tenant_id", String(TENANT_ID_LENGTH), primary_key=True),
    Column("key", String(MAX_NARROWING_KEY_CHARS), primary_key=True),
    Column("value", String(MAX_NARROWING_VALUE_CHARS), primary_key=True),
    session_pk_column(primary_key=True),
    Index("ix_session_metadata_pairs_session_pk", "session_pk"),
)

entries = Table(
    "entries",
    metadata,
    # Entry ids are unique within a tenant ("unique across the store", where a
    # tenant is the store a host sees): one tenant's ids never collide with, or reveal,
    # another's.
    Column("tenant_id", String(TENANT_ID_LENGTH), primary_key=True),
    Column("id", String(ID_LENGTH), primary_key=True),
    session_pk_column(),
    Column("parent_id", String(ID_LENGTH), nullable=True),
    Column("seq", BigInteger, nullable=False),
    Column("segment_start", BigInteger, nullable=False),
    Column("kind", String(KIND_LENGTH), nullable=False),
    Column("eligible_tokens", BigInteger, nullable=False),
    Column("payload", Json, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("session_pk", "seq", name="uq_entries_session_pk_seq"),
    Index("ix_entries_session_pk_id", "session_pk", "id"),
)

snapshots = Table(
    "snapshots",
    metadata,
    session_pk_column(primary_key=True),
    Column("entry_id", String(ID_LENGTH), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("observation_cursor", String(ID_LENGTH), nullable=True),
    Column("observation_cursor_seq", BigInteger, nullable=False),
    Column("reflection_cursor", String(ID_LENGTH), nullable=True),
    Column("next_ord", BigInteger, nullable=False),
    Column("scope_map", Json, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

memory_items = Table(
    "memory_items",
    metadata,
    session_pk_column(primary_key=True),
    Column("kind", String(16), primary_key=True),
    Column("item_id", String(ID_LENGTH), primary_key=True),
    Column("ord", BigInteger, nullable=False),
    Column("payload", Json, nullable=False),
    Column("pending", Boolean, nullable=False),
    Column("dropped_ord", BigInteger, nullable=True),
    Index("ix_memory_items_active", "session_pk", "kind", "dropped_ord", "ord"),
)

# Vectors of the optional semantic search (migration 0015): a message entry's (source 0,
# position its seq) or a memory item's (source 1, position its ord), of one model.
search_vectors = Table(
    "search_vectors",
    metadata,
    session_pk_column(primary_key=True),
    Column("source", SmallInteger, primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    Column("item_id", String(ID_LENGTH), nullable=False),
    Column("model", String(128), nullable=False),
    Column("dimension", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),
    Index("ix_search_vectors_tenant_id_model", "tenant_id", "model"),
)

flush_jobs = Table(
    "flush_jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    tenant_id_column(),
    session_pk_column(),
    Column("state", String(16), nullable=False),
    Column("force", Boolean, nullable=False),
    Column("full_reflection_rebuild", Boolean, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("counts", Json, nullable=False),
    Column("error", Text, nullable=True),
    Column("reason", Text, nullable=True),
    # Which observer/reflector instructions the job's flush used (om_core.flush.prompts), once it
    # ran.
    Column("prompt_version", String(64), nullable=True),
    Index("ix_flush_jobs_session_pk_queued_at", "session_pk", "queued_at"),
    Index("ix_flush_jobs_state_started_at", "state", "started_at"),
)

tombstones = Table(
    "tombstones",
    metadata,
    tenant_id_column(primary_key=True),
    Column("scope", String(ID_LENGTH), primary_key=True),
    Column("entry_id", String(ID_LENGTH), primary_key=True),
    Column("corrected", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# Erasure jobs are not owned by the tenant row (no foreign key): erasing a whole tenant deletes
# that row, and the job that did it must still be readable by the admin who asked.
erasure_jobs = Table(
    "erasure_jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    # session | subject | tenant | retention
    Column("kind", String(16), nullable=False),
    # The session id, the subject, or the tenant id the job erases ("" for retention).
    Column("target", String(ID_LENGTH), nullable=False),
    Column("key_id", String(32), nullable=True),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("queued_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    # Last progress of the worker running it; the reconciler publishes a job again once this
    # (or queued_at, before any) is older than OM_ERASE_RETRY_AFTER_S.
    Column("touched_at", DateTime(timezone=True), nullable=True),
    Column("counts", Json, nullable=False),
    Column("error", Text, nullable=True),
    Index("ix_erasure_jobs_tenant_id_kind_target", "tenant_id", "kind", "target"),
    Index("ix_erasure_jobs_state_queued_at", "state", "queued_at"),
)

# The sessions an erasure job still has to delete physically: one row per session, written in
# the transaction that hid the session, deleted in the one that removes its last row. The
# session's own id is kept here (its row was renamed) to find its Redis keys and funnel copies.
erasure_targets = Table(
    "erasure_targets",
    metadata,
    Column(
        "job_id",
        String(64),
        ForeignKey("erasure_jobs.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("session_pk", SurrogateKey, primary_key=True),
    Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    Column("session_id", String(ID_LENGTH), nullable=False),
    # "Is this id still being erased?" when a session of that id is created.
    Index("ix_erasure_targets_tenant_id_session_id", "tenant_id", "session_id"),
)

# Who did what to which data, and how it ended; never content. Not owned by the tenant row:
# the record of a tenant's erasure outlives the tenant.
audit_events = Table(
    "audit_events",
    metadata,
    Column("pk", SurrogateKey, primary_key=True, autoincrement=True),
    Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    # The API key that asked; NULL for an admin (OM_ADMIN_TOKEN) or the retention pass.
    Column("key_id", String(32), nullable=True),
    # erase | export | import | retention (an open set: see om_workers/store/audit.py)
    Column("action", String(32), nullable=False),
    Column("target", String(ID_LENGTH), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("job_id", String(64), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_audit_events_tenant_id_created_at", "tenant_id", "created_at"),
)

# What the model calls of each flush job used, as the provider reported it: one row per job
# and model, written in the transaction that finishes the job. Counts only, never text. The
# tenant's erasure deletes its rows (cascade); a session's erasure keeps them, unlinked
# (``session_pk`` set NULL), so a tenant's totals stay true and nothing names the session.
# ``job_id`` is a random id, not a key: the job's row goes with its session.
model_usage = Table(
    "model_usage",
    metadata,
    Column("pk", SurrogateKey, primary_key=True, autoincrement=True),
    tenant_id_column(),
    Column(
        "session_pk",
        SurrogateKey,
        ForeignKey("sessions.pk", ondelete="SET NULL"),
        nullable=True,
        index=True,
    ),
    Column("job_id", String(64), nullable=False, index=True),
    Column("model", String(ID_LENGTH), nullable=False),
    Column("calls", Integer, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    # The UTC day of created_at (YYYY-MM-DD): per-day totals group by it on either database.
    Column("day", String(10), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_model_usage_tenant_id_day", "tenant_id", "day"),
)

# A tenant's webhook endpoints (om_workers/store/webhooks.py). The secret is kept as given
# (the HMAC needs it) and never leaves the store but to sign.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(32), primary_key=True),
    tenant_id_column(index=True),
    Column("url", Text, nullable=False),
    Column("secret", String(128), nullable=False),
    Column("event_types", Json, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# The outbox: one row per (event, endpoint), written in the transaction that ends the job the
# event reports; its id is the Standard Webhooks ``webhook-id``, the same on every attempt.
# ``session_id`` finds an erased session's rows; ``source_id`` (the job id) finds what a job
# just wrote, to publish it; ``next_attempt_at`` is when it is due (NULL: nothing more to do).
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant_id", String(TENANT_ID_LENGTH), nullable=False),
    Column(
        "endpoint_id",
        String(32),
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("event_type", String(32), nullable=False),
    Column("session_id", String(ID_LENGTH), nullable=True),
    Column("source_id", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    # pending | delivered | failed
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("next_attempt_at", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("delivered_at", DateTime(timezone=True), nullable=True),
    Index("ix_webhook_deliveries_endpoint_id_created_at", "endpoint_id", "created_at"),
    Index("ix_webhook_deliveries_next_attempt_at", "next_attempt_at"),
    Index("ix_webhook_deliveries_tenant_id_session_id", "tenant_id", "session_id"),
    Index("ix_webhook_deliveries_source_id", "source_id"),
)
