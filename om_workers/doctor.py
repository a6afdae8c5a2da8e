"""``om doctor``'s checks: is this deployment healthy right now, and if not, what to do.

Each check reads the same ``OM_*`` settings the service's processes read and says, in one line,
what it found; a failed check names its fix. In order: the configuration, the database (reachable,
migrated to this code's revision), Redis, the broker, the workers alive and their task slots,
beat (the reconciler's last pass, which beat schedules), the provider (reachable, the key
accepted) and the clocks (this host's, the database's and the last reconciling worker's against
Redis's, the reference locks and the worker pool run on). A check that needs something that
failed is reported ``skip`` instead of guessing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis
from alembic.runtime.migration import MigrationContext
from kombu.connection import Connection
from pydantic import ValidationError
from pydantic_settings.exceptions import SettingsError
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from om_workers.config import Settings
from om_workers.coordination import clock, pool
from om_workers.coordination.connection import connect
from om_workers.errors import OMWorkersError
from om_workers.providers.probe import probe_provider
from om_workers.store import head_revision, normalize_database_url
from om_workers.store.migrate import VERSION_TABLE

Status = Literal["ok", "fail", "skip"]
TIMEOUT_S = 3.0
"""Seconds any one check waits for an answer."""
MAX_SKEW_MS = 2000
"""The clock skew from Redis's clock a process may have: job timings and marker ages stay
right to within it."""
BEAT_MISSED_PASSES = 3
"""Reconciler intervals without a pass after which beat counts as stopped."""


@dataclass(frozen=True)
class Check:
    """One line of the report: the check's ``name``, its ``status``, what it found and, when it
    failed, what to do."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


def diagnose(load: Callable[[], Settings] = Settings) -> list[Check]:
    """Every check, in order (see the module docstring). Never raises for what it checks: a
    failure is a ``fail`` line. ``load`` reads the settings (from the environment)."""
    try:
        settings = load()
    except (ValidationError, SettingsError, ValueError) as exc:
        first = str(exc).splitlines()[0:3]
        return [
            Check(
                "configuration",
                "fail",
                " ".join(first)[:300],
                "correct the OM_* variable named (docs/settings.md lists each)",
            )
        ]
    checks = [Check("configuration", "ok", f"settings read; provider {settings.llm.provider}")]
    checks.append(_database(settings.store.url))
    client, redis_check = _redis(settings.redis.url)
    checks.append(redis_check)
    checks.append(_broker(settings.redis.broker_url, client))
    checks.append(_workers(client))
    checks.append(_beat(client, settings.delivery.reconcile_interval_s))
    checks.append(_provider(settings))
    checks.append(_clocks(client, settings.store.url))
    if client is not None:
        client.close()
    return checks


def _database(url: str) -> Check:
    name = "database"
    try:
        parsed = make_url(normalize_database_url(url))
    except (ValueError, SQLAlchemyError, OMWorkersError):
        # The parser's message quotes the URL, password included: not repeated here.
        return Check(name, "fail", "OM_DATABASE_URL is not a database URL", _DB_URL_FIX)
    where = parsed.render_as_string(hide_password=True)
    sqlite_file = parsed.get_backend_name() == "sqlite" and parsed.database not in (
        None,
        "",
        ":memory:",
    )
    if sqlite_file and not Path(str(parsed.database)).exists():
        return Check(
            name,
            "fail",
            f"{where}: the SQLite file does not exist",
            "point OM_DATABASE_URL at the service's database file, or create a new one "
            "(om db upgrade)",
        )
    try:
        current = _revision(parsed.render_as_string(hide_password=False))
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return Check(name, "fail", f"{where}: unreachable: {reason[:200]}", _DB_URL_FIX)
    head = head_revision()
    if current == head:
        return Check(name, "ok", f"{where}: reachable, schema at revision {head} (this code's)")
    if current is None:
        fix = "migrate it (om db upgrade)"
        return Check(name, "fail", f"{where}: reachable, never migrated", fix)
    return Check(
        name,
        "fail",
        f"{where}: schema at revision {current}, this code wants {head}",
        "migrate it with this version of the code (om db upgrade)",
    )


_DB_URL_FIX = "start the database, or fix OM_DATABASE_URL (host, port, name, credentials)"


def _revision(url: str) -> str | None:
    connect_args = {} if url.startswith("sqlite") else {"connect_timeout": int(TIMEOUT_S)}
    engine = create_engine(url, connect_args=connect_args)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()
    finally:
        engine.dispose()


def _redis(url: str | None) -> tuple[redis.Redis | None, Check]:
    if not url:
        fix = "set OM_REDIS_URL to the deployment's Redis (om up prints it for its own)"
        return None, Check("redis", "fail", "OM_REDIS_URL is not set", fix)
    where = url.split("@")[-1]
    try:
        client = connect(url, socket_timeout_s=TIMEOUT_S, connect_timeout_s=TIMEOUT_S, retries=0)
        client.ping()
    except (redis.exceptions.RedisError, OMWorkersError) as exc:
        fix = "start Redis, or fix OM_REDIS_URL (host, port, password)"
        return None, Check("redis", "fail", f"{where}: unreachable: {exc}", fix)
    policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "?")
    if policy != "noeviction":
        fix = "set maxmemory-policy noeviction: an evicted lock or marker loses work"
        return client, Check("redis", "fail", f"{where}: maxmemory-policy is {policy}", fix)
    return client, Check("redis", "ok", f"{where}: reachable, maxmemory-policy noeviction")


def _broker(broker_url: str | None, client: redis.Redis | None) -> Check:
    if not broker_url:
        if client is None:
            return Check("broker", "skip", "the broker is Redis (OM_REDIS_URL), unreachable")
        return Check("broker", "ok", "Redis (OM_REDIS_URL) is the broker")
    where = broker_url.split("@")[-1]
    # kombu is untyped: its Connection is called through Any.
    open_connection: Any = Connection
    try:
        with open_connection(broker_url, connect_timeout=TIMEOUT_S) as connection:
            connection.ensure_connection(max_retries=1, timeout=TIMEOUT_S)
    except Exception as exc:  # kombu raises the transport's own errors
        fix = "start the broker, or fix OM_BROKER_URL (host, port, credentials, vhost)"
        return Check("broker", "fail", f"{where}: unreachable: {type(exc).__name__}", fix)
    return Check("broker", "ok", f"{where}: reachable")


def _workers(client: redis.Redis | None) -> Check:
    if client is None:
        return Check("workers", "skip", "needs Redis")
    try:
        live = pool.live_slots(client)
    except OMWorkersError as exc:
        return Check("workers", "fail", str(exc), "fix Redis first")
    if not live:
        fix = "start a worker (om worker) with the API's OM_REDIS_URL and OM_DATABASE_URL"
        return Check("workers", "fail", "no live worker process", fix)
    slots = sum(live.values())
    return Check("workers", "ok", f"{len(live)} live worker process(es), {slots} task slots")


def _beat(client: redis.Redis | None, interval_s: float) -> Check:
    if client is None:
        return Check("beat", "skip", "needs Redis")
    try:
        last = clock.last_reconcile_pass(client)
        now_ms = clock.redis_time_ms(client)
    except OMWorkersError as exc:
        return Check("beat", "fail", str(exc), "fix Redis first")
    fix = "run beat (om beat), exactly one per deployment, beside a live worker"
    if last is None:
        return Check("beat", "fail", "no reconciler pass recorded", fix)
    age_s = max(0.0, (now_ms - last.redis_ms) / 1000)
    allowed_s = BEAT_MISSED_PASSES * interval_s + 30
    if age_s > allowed_s:
        detail = f"last reconciler pass {age_s:.0f} s ago (due every {interval_s:.0f} s)"
        return Check("beat", "fail", detail, fix)
    return Check("beat", "ok", f"last reconciler pass {age_s:.0f} s ago")


def _provider(settings: Settings) -> Check:
    try:
        result = probe_provider(settings, TIMEOUT_S)
    except OMWorkersError as exc:
        return Check("provider", "fail", str(exc), "fix OM_PROVIDER")
    return Check("provider", "ok" if result.ok else "fail", result.detail, result.fix)


def _clocks(client: redis.Redis | None, database_url: str) -> Check:
    if client is None:
        return Check("clocks", "skip", "needs Redis (the reference clock)")
    try:
        before = time.time()
        redis_ms = clock.redis_time_ms(client)
        local_ms = int((before + time.time()) / 2 * 1000)
        last = clock.last_reconcile_pass(client)
    except OMWorkersError as exc:
        return Check("clocks", "fail", str(exc), "fix Redis first")
    skews = {"this host": local_ms - redis_ms}
    if last is not None:
        skews["the last reconciling worker"] = last.skew_ms
    database = _database_skew_ms(database_url, redis_ms, client)
    if database is not None:
        skews["the database"] = database
    off = {who: ms for who, ms in skews.items() if abs(ms) > MAX_SKEW_MS}
    shown = ", ".join(f"{who} {ms:+d} ms" for who, ms in skews.items())
    if off:
        fix = "run NTP (chrony, systemd-timesyncd) on every host of the deployment"
        return Check("clocks", "fail", f"skew from Redis's clock: {shown}", fix)
    return Check("clocks", "ok", f"skew from Redis's clock: {shown}")


def _database_skew_ms(url: str, redis_ms: int, client: redis.Redis) -> int | None:
    """PostgreSQL's clock against Redis's (SQLite has none of its own), ``None`` when it
    cannot be read (the database check reports why)."""
    try:
        normalized = normalize_database_url(url)
    except OMWorkersError:
        return None
    if not normalized.startswith("postgresql"):
        return None
    engine = create_engine(normalized, connect_args={"connect_timeout": int(TIMEOUT_S)})
    try:
        with engine.connect() as connection:
            db_s = connection.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar()
        after_ms = clock.redis_time_ms(client)
    except (SQLAlchemyError, OMWorkersError):
        return None
    finally:
        engine.dispose()
    return int(float(db_s or 0) * 1000) - (redis_ms + after_ms) // 2


def failed(checks: list[Check]) -> bool:
    """Whether any check failed (``om doctor`` then exits 1)."""
    return any(check.status == "fail" for check in checks)


__all__ = ["MAX_SKEW_MS", "Check", "diagnose", "failed"]
