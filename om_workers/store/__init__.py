"""The SQL session store (SQLAlchemy 2.x; SQLite by default, PostgreSQL via psycopg 3).

``SqlStore`` is the session store (session operations, reads, flush jobs); ``AccountStore``
administers tenants and API keys on the same engine; ``upgrade(database_url)`` migrates a
database to the schema they need. ``SqlUnitOfWork`` owns one transaction and hands out the
repositories the service layer runs on (``SqlReadUnitOfWork`` for reads);
``SqlMemoryUnitOfWork`` binds one tenant's session to ``om_core``'s memory unit of work (and
to the entry callbacks in-process helpers take).
"""

from om_workers.store.accounts import AccountStore
from om_workers.store.audit import AuditEvent
from om_workers.store.engine import create_store_engine, normalize_database_url
from om_workers.store.listing import MAX_SESSIONS_LIMIT
from om_workers.store.memory_unit_of_work import SqlMemoryUnitOfWork
from om_workers.store.migrate import (
    current_revision,
    head_revision,
    upgrade,
    upgrade_when_reachable,
)
from om_workers.store.reconcile_queries import (
    FailureStreak,
    JobRef,
    SessionRef,
    failure_streak,
    queued_jobs_before,
    running_jobs_before,
    sessions_of_jobs,
    sessions_over_unobserved,
)
from om_workers.store.records import (
    ApiKeyInfo,
    AppendResult,
    ContextParts,
    ContextState,
    ContextVersion,
    CreatedApiKey,
    DailyUsage,
    FlushJob,
    JobState,
    ModelUsage,
    SessionInfo,
    SessionsListing,
    StoredPage,
    StoredTombstone,
    Tenant,
)
from om_workers.store.repositories import tombstone_scope
from om_workers.store.repositories.erasure import ErasureJob, ErasureKind, ErasureTarget
from om_workers.store.store import MAX_PAGE_LIMIT, SqlStore
from om_workers.store.unit_of_work import SqlReadUnitOfWork, SqlUnitOfWork

__all__ = [
    "MAX_PAGE_LIMIT",
    "MAX_SESSIONS_LIMIT",
    "AccountStore",
    "ApiKeyInfo",
    "AppendResult",
    "AuditEvent",
    "ContextParts",
    "ContextState",
    "ContextVersion",
    "CreatedApiKey",
    "DailyUsage",
    "ErasureJob",
    "ErasureKind",
    "ErasureTarget",
    "FailureStreak",
    "FlushJob",
    "JobRef",
    "JobState",
    "ModelUsage",
    "SessionInfo",
    "SessionRef",
    "SessionsListing",
    "SqlMemoryUnitOfWork",
    "SqlReadUnitOfWork",
    "SqlStore",
    "SqlUnitOfWork",
    "StoredPage",
    "StoredTombstone",
    "Tenant",
    "create_store_engine",
    "current_revision",
    "failure_streak",
    "head_revision",
    "normalize_database_url",
    "queued_jobs_before",
    "running_jobs_before",
    "sessions_of_jobs",
    "sessions_over_unobserved",
    "tombstone_scope",
    "upgrade",
    "upgrade_when_reachable",
]
