"""Repositories: small classes bound to one unit of work's connection, each over the rows of one
concern (sessions, entries, memory, jobs, tombstones, links, search, vectors, usage, webhooks). They
run prebuilt statements and never begin, commit or end a transaction:
:class:`~om_workers.store.unit_of_work.SqlUnitOfWork` does.
"""

from om_workers.store.repositories.entries import EntryRepository
from om_workers.store.repositories.erased_rows import ErasedRowsRepository
from om_workers.store.repositories.erasure import ErasureRepository
from om_workers.store.repositories.jobs import JobRepository
from om_workers.store.repositories.links import LinkRepository
from om_workers.store.repositories.memory import MemoryRepository
from om_workers.store.repositories.search import SearchRepository
from om_workers.store.repositories.sessions import LockedSession, SessionHead, SessionRepository
from om_workers.store.repositories.tombstones import TombstoneRepository, tombstone_scope
from om_workers.store.repositories.usage import UsageRepository
from om_workers.store.repositories.vectors import VectorRepository
from om_workers.store.repositories.webhooks import WebhookRepository

__all__ = [
    "EntryRepository",
    "ErasedRowsRepository",
    "ErasureRepository",
    "JobRepository",
    "LinkRepository",
    "LockedSession",
    "MemoryRepository",
    "SearchRepository",
    "SessionHead",
    "SessionRepository",
    "TombstoneRepository",
    "UsageRepository",
    "VectorRepository",
    "WebhookRepository",
    "tombstone_scope",
]
