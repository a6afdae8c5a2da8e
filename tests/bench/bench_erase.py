"""11. Erasure: erasing a 100,000-entry session, and another tenant's context reads meanwhile.

A session of 100,000 messages is loaded through the store (batches of 5,000 appends), hidden
with ``DELETE``'s store call, and erased by ``om_workers.jobs.erase.run_erasure_job`` in a
separate process, as a worker would (chunks of ``OM_ERASE_CHUNK_ENTRIES``, then the WAL
checkpoint). Figure 1: the erasure's time, against writing the same entries. Figure 2: the p99
of another tenant's context reads (``om_workers.reads.session_context`` on a 200-message
session, read back to back in this process) during the erasure, against the same reads
alone, measured just before with the worker process waiting (goal: at most 1.5 times). Three
rounds, pooled. Figure 3: erasing one end user (``DELETE /v1/subjects/{subject}``'s store call)
in a tenant of 100,000 sessions against one of 1,000: it reads the subject's rows of the
metadata pairs index, so it must not grow with the tenant. SQLite, and PostgreSQL when
reachable (``OM_TEST_DATABASE_URL``, else a fresh database on 127.0.0.1:5432).
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from om_core import resolve_settings
from om_core.ledger.models import Message, SessionEntry
from om_workers.config import DEFAULT_CONTEXT_MAX_TOKENS, Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.jobs.erase import run_erasure_job
from om_workers.reads import session_context
from om_workers.store import AccountStore, SqlStore, upgrade

from .bench_history import _analyze, postgres_url
from .bench_narrowing import SESSION_COUNTS, narrowed_tenant
from .common import Section, percentile

ENTRIES = 100_000
LOAD_BATCH = 5_000
READER_MESSAGES = 200
ALONE_READS = 150
ROUNDS = 3
LEAD_S = 0.3
"""The reader runs alone this long after the worker is told to go, before the erasure begins."""
GOAL = 1.5
SUBJECT_ERASURES = 60
"""Subjects erased in each tenant of :func:`measure_subjects`, one session each."""


def _messages(session_id: str, count: int, start: int = 0) -> list[SessionEntry]:
    return [
        SessionEntry(
            id=f"{session_id}-{i}",
            session_id=session_id,
            kind="message",
            message=Message(
                role="user" if i % 2 == 0 else "assistant",
                content=f"message {i} about the deployment of service {i % 97} in region {i % 7}",
            ),
        )
        for i in range(start, start + count)
    ]


def _load(store: SqlStore, tenant: str, session_id: str, count: int) -> float:
    store.create_session(tenant, session_id)
    began = time.perf_counter()
    for start in range(0, count, LOAD_BATCH):
        store.append_entries(tenant, session_id, _messages(session_id, LOAD_BATCH, start))
        if start == 0:
            _analyze(store)
    _analyze(store)
    return time.perf_counter() - began


def _erase_in_process(
    url: str, redis_url: str, job_id: str, chunk: int, pause_s: float, done: Any, go: Any
) -> None:
    """The worker's side, in its own process, warmed up (connected, statements compiled) like
    a running worker: says ``ready`` on ``done``, waits for ``go``, lets the reader run alone
    for ``LEAD_S``, runs the job, then puts its wall-clock start and end on ``done``."""
    store = SqlStore.from_url(url)
    client = connect(redis_url)
    store.erasure.get_job(None, job_id)
    done.put("ready")
    go.wait()
    time.sleep(LEAD_S)
    began = time.time()
    run = run_erasure_job(store, client, job_id, chunk=chunk, pause_s=pause_s)
    ended = time.time()
    if run.outcome != "succeeded":
        raise RuntimeError(f"erasure {job_id}: {run}")
    done.put((began, ended))
    client.close()
    store.close()


@dataclass
class Round:
    """One round's figures: the load and erase times, reads alone and during (seconds)."""

    load_s: float
    erase_s: float
    alone: list[float]
    during: list[float]


def _round(store: SqlStore, url: str, redis_url: str, tenants: tuple[str, str], n: int) -> Round:
    """Load a session, read alone, erase it in a worker process while reading back to back.

    A read counts as "during" when it started after the erasure began and before it ended (by
    the worker's clock); the reads of the lead-in before it began count as alone."""
    big_tenant, reader = tenants
    settings = resolve_settings()
    load_s = _load(store, big_tenant, f"big{n}", ENTRIES)

    def read() -> tuple[float, float]:
        began = time.time()
        session_context(
            store, reader, "r", settings=settings, max_tokens=DEFAULT_CONTEXT_MAX_TOKENS
        )
        return began, time.time() - began

    job = store.erasure.erase_session(big_tenant, f"big{n}", None)
    context = multiprocessing.get_context("spawn")
    done = context.Queue()
    go = context.Event()
    erasure = Settings().erasure
    args = (url, redis_url, job.id, erasure.chunk_entries, erasure.pause_s, done, go)
    worker = context.Process(target=_erase_in_process, args=args)
    worker.start()
    if done.get(timeout=120) != "ready":
        raise RuntimeError("the erasure process did not start")
    for _ in range(20):
        read()
    # Alone: the worker process waiting, as a deployment's workers do between jobs.
    alone = [read()[1] for _ in range(ALONE_READS)]
    go.set()
    reads: list[tuple[float, float]] = []
    while worker.is_alive() and done.empty():
        reads.append(read())
    worker.join(600)
    if worker.exitcode != 0:
        raise RuntimeError(f"the erasure process exited with {worker.exitcode}")
    began, ended = done.get(timeout=5)
    during = [seconds for start, seconds in reads if began <= start <= ended]
    alone += [seconds for start, seconds in reads if start < began]
    return Round(load_s, ended - began, alone, during)


def measure(section: Section, backend: str, url: str, redis_url: str) -> None:
    """``ROUNDS`` rounds of load, read alone, erase while reading; the two figures."""
    upgrade(url)
    store = SqlStore.from_url(url)
    accounts = AccountStore(store.engine)
    try:
        tenants = (accounts.create_tenant("eraser").id, accounts.create_tenant("reader").id)
        store.create_session(tenants[1], "r")
        store.append_entries(tenants[1], "r", _messages("r", READER_MESSAGES))
        rounds = []
        for n in range(ROUNDS):
            rounds.append(_round(store, url, redis_url, tenants, n))
            print(
                f"  {backend} round {n + 1}: loaded in {rounds[-1].load_s:.1f} s, erased in "
                f"{rounds[-1].erase_s:.2f} s, {len(rounds[-1].during)} reads during",
                flush=True,
            )
    finally:
        store.close()
    during = [seconds for r in rounds for seconds in r.during]
    alone = [seconds for r in rounds for seconds in r.alone]
    erase_s = statistics.median(r.erase_s for r in rounds)
    load_s = statistics.median(r.load_s for r in rounds)
    section.add(
        f"{backend}: erase a {ENTRIES:,}-entry session (median of {ROUNDS})",
        erase_s,
        "s",
        f"writing its {ENTRIES:,} entries",
        load_s,
    )
    section.add(
        f"{backend}: other tenant's context p99 during the erasure",
        percentile(during, 0.99) * 1000,
        "ms",
        "the same reads alone",
        percentile(alone, 0.99) * 1000,
    )
    ratio = percentile(during, 0.99) / percentile(alone, 0.99)
    erasure = Settings().erasure
    section.notes.append(
        f"- {backend}: {len(during)} reads during the erasures (chunks of "
        f"{erasure.chunk_entries:,} entries, {erasure.pause_s} s apart), "
        f"{len(alone)} alone; p99 ratio {ratio:.2f} (goal at most {GOAL}: "
        f"{'met' if ratio <= GOAL else 'NOT met'}); load average {os.getloadavg()[0]:.1f} "
        "at the end (the machine is shared)."
    )


def _subject_median(store: SqlStore, tenant: str, count: int) -> float:
    """Median seconds of the store call behind ``DELETE /v1/subjects/{subject}`` (finding the
    subject's sessions, hiding them, opening the job), over subjects of one session each,
    after a few untimed ones (the first writes after a load check its pages in)."""
    times = []
    for n in range(SUBJECT_ERASURES + 5):
        subject = f"user-{(n * 7919) % count}"
        start = time.perf_counter()
        store.erasure.erase_subject(tenant, subject, None)
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:])


def measure_subjects(section: Section, backend: str, url: str) -> None:
    """Erasing one end user's data must cost what their sessions cost, not the tenant's: the
    same erasure in a tenant of 1,000 sessions and of 100,000."""
    upgrade(url)
    store = SqlStore.from_url(url)
    try:
        small, large = (narrowed_tenant(store, count)[0] for count in SESSION_COUNTS)
        _analyze(store)
        large_s = _subject_median(store, large, SESSION_COUNTS[1])
        small_s = _subject_median(store, small, SESSION_COUNTS[0])
    finally:
        store.close()
    section.add(
        f"{backend}: erase a subject (one session) in a tenant of {SESSION_COUNTS[1]:,} "
        f"sessions, median of {SUBJECT_ERASURES}",
        large_s * 1000,
        "ms",
        f"in a tenant of {SESSION_COUNTS[0]:,} sessions",
        small_s * 1000,
    )


def run() -> Section:
    section = Section("11. Erasure of a 100,000-entry session")
    section.notes.append(
        "- The erasure runs in its own process (a worker's), the reads in this one, back to "
        "back; the 2 cores are shared with both."
    )
    with EmbeddedRedis() as redis_server, tempfile.TemporaryDirectory() as tmp:
        measure(section, "sqlite", f"sqlite:///{Path(tmp) / 'om.db'}", redis_server.url)
        measure_subjects(section, "sqlite", f"sqlite:///{Path(tmp) / 'subjects.db'}")
        with postgres_url() as pg:
            if pg is None:
                section.notes.append("- PostgreSQL: not reachable, skipped.")
            else:
                measure(section, "postgresql", pg, redis_server.url)
                measure_subjects(section, "postgresql", pg)
    return section
