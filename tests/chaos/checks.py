"""What the harness checks after quiescence, read from the store (a direct connection, not the
proxy) and from the API: messages, observations, job runs, the unobserved tail, recall, and
secrets in logs, rows and Redis.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
import json
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from om_api.client import OMClient
from om_workers.jobs.reconcile import LOST_JOB_ERROR
from om_workers.store import SqlStore
from om_workers.store.jobs import STUCK_JOB_ERROR
from tests.chaos.load import MEMORY_REF, SessionLoad
from tests.deploy.rehearsal import PG
from tests.e2e.support import covered_sources, observation_ids
from tests.e2e.workers import FINAL, RunRow, runs_of

SWEPT_MARK = "swept by the reconciler"
"""In the error of every job the reconciler failed because its worker died (its
``finished_at`` is the sweep, not the end of the run)."""
assert SWEPT_MARK in LOST_JOB_ERROR and SWEPT_MARK in STUCK_JOB_ERROR


@dataclass
class Verdict:
    """What the checks found for some sessions; every list names the offending items."""

    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    unrecallable: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)
    jobs: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def merge(self, other: Verdict) -> None:
        for name in ("lost", "duplicates", "out_of_order", "unexpected", "overlaps", "stuck"):
            getattr(self, name).extend(getattr(other, name))
        for name in ("tail", "unrecallable", "anomalies"):
            getattr(self, name).extend(getattr(other, name))
        self.jobs.update(other.jobs)
        self.errors.update(other.errors)

    def problems(self) -> dict[str, list[str]]:
        """The non-empty lists that must be empty."""
        names = ("lost", "duplicates", "out_of_order", "unexpected", "overlaps", "stuck")
        names += ("tail", "unrecallable", "anomalies")
        return {name: getattr(self, name) for name in names if getattr(self, name)}


def stored_messages(store: SqlStore, tenant: str, session: str) -> list[str]:
    """Message entry ids of the session's current branch, in branch order."""
    return [e.id for e in store.read_branch(tenant, session) if e.kind == "message"]


def fully_observed(store: SqlStore, load: SessionLoad) -> bool:
    """Every confirmed message of the session is cited by an observation."""
    return set(load.acked) <= set(covered_sources(store, load.tenant, load.session))


def settled(database_url: str, load: SessionLoad) -> bool:
    """No job of the session is queued or running."""
    return all(run.state in FINAL for run in runs_of(database_url, load.session))


def check_memory(store: SqlStore, load: SessionLoad) -> Verdict:
    """Messages stored once and in order, each observed once, no observation id twice."""
    verdict = Verdict(anomalies=list(load.anomalies))
    name = f"{load.tenant}/{load.session}"
    stored = stored_messages(store, load.tenant, load.session)
    counts = Counter(stored)
    maybe = set(load.unconfirmed)
    verdict.lost += [f"{name}: {m} not stored" for m in load.acked if m not in counts]
    verdict.duplicates += [f"{name}: {m} stored {n} times" for m, n in counts.items() if n > 1]
    verdict.unexpected += [
        f"{name}: {m} stored, never appended" for m in counts if m not in [*load.acked, *maybe]
    ]
    confirmed_order = [m for m in stored if m in set(load.acked)]
    if confirmed_order != [m for m in load.acked if m in counts]:
        verdict.out_of_order.append(f"{name}: branch order differs from the append order")
    sources = Counter(covered_sources(store, load.tenant, load.session))
    verdict.lost += [
        f"{name}: {m} never observed" for m in load.acked if m in counts and not sources[m]
    ]
    verdict.duplicates += [f"{name}: {m} cited {n} times" for m, n in sources.items() if n > 1]
    verdict.unexpected += [f"{name}: observation cites {m}" for m in sources if m not in counts]
    ids = Counter(observation_ids(store, load.tenant, load.session))
    verdict.duplicates += [
        f"{name}: observation {i} recorded {n} times" for i, n in ids.items() if n > 1
    ]
    return verdict


def check_runs(database_url: str, load: SessionLoad, kills: Sequence[datetime]) -> Verdict:
    """No job left queued/running, and no two runs of the session overlapping in time.

    A job the reconciler swept (its worker died) ran until the first kill after its start, not
    until the sweep: that is the end used for it.
    """
    verdict = Verdict()
    runs = runs_of(database_url, load.session)
    name = f"{load.tenant}/{load.session}"
    verdict.jobs.update(run.state for run in runs)
    verdict.errors.update(_error_kind(run) for run in runs if run.state == "failed")
    verdict.stuck += [f"{name}: job {r.id} still {r.state}" for r in runs if r.state not in FINAL]
    spans = sorted(
        (run.started_at, _end(run, kills), run.id)
        for run in runs
        if run.started_at is not None and run.finished_at is not None
    )
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if end > start:
            overlap = (end - start).total_seconds()
            verdict.overlaps.append(
                f"{name}: jobs {first} and {second} ran together {overlap:.2f} s"
            )
    return verdict


def _end(run: RunRow, kills: Sequence[datetime]) -> datetime:
    assert run.finished_at is not None and run.started_at is not None
    if run.error and SWEPT_MARK in run.error:
        after = [k for k in kills if k >= run.started_at]
        if after:
            return min(min(after), run.finished_at)
    return run.finished_at


def _error_kind(run: RunRow) -> str:
    """A failed job's error without its ids and counts, to group them in the notes."""
    error = run.error or "(no error)"
    return error if len(error) <= 90 else error[:89] + "…"


def check_context(client: OMClient, store: SqlStore, load: SessionLoad) -> Verdict:
    """The context's ``unobserved`` count is the branch's uncovered suffix, and every memory
    id it shows recalls its stored sources."""
    verdict = Verdict()
    name = f"{load.tenant}/{load.session}"
    stored = stored_messages(store, load.tenant, load.session)
    sources = set(covered_sources(store, load.tenant, load.session))
    uncovered = [m for m in stored if m not in sources]
    if uncovered != stored[len(stored) - len(uncovered) :]:
        verdict.tail.append(
            f"{name}: uncovered messages are not the branch's tail: {uncovered[:3]}"
        )
    context = client.context(load.session)
    if context.unobserved.messages != len(uncovered):
        verdict.tail.append(
            f"{name}: context says {context.unobserved.messages} unobserved, "
            f"the store {len(uncovered)}"
        )
    for memory_id in MEMORY_REF.findall(context.blocks[0].text):
        recalled = client.recall(load.session, memory_id)
        if not recalled.found or not set(recalled.source_entry_ids) <= set(stored):
            verdict.unrecallable.append(f"{name}: {memory_id} (found={recalled.found})")
    verdict.unrecallable += [f"{name}: {m} (during the load)" for m in load.unrecallable]
    return verdict


# Secrets ------------------------------------------------------------------------------------


def find_secrets(secrets: Mapping[str, str], texts: Iterable[tuple[str, bytes]]) -> set[str]:
    """``"<label> in <where>"`` for every secret found in any of the texts."""
    needles = {label: value.encode() for label, value in secrets.items() if value}
    return {
        f"{label} in {where}"
        for where, text in texts
        for label, needle in needles.items()
        if needle in text
    }


def log_texts(log_dir: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(log_dir.glob("*.log")):
        yield f"log {path.name}", path.read_bytes()


def database_text(database: str) -> Iterator[tuple[str, bytes]]:
    """Every row of the database, as ``pg_dump --data-only`` prints it."""
    done = subprocess.run(
        ["pg_dump", *PG, "--data-only", database], capture_output=True, timeout=120, check=True
    )
    yield f"database {database}", done.stdout


def redis_texts(url: str) -> Iterator[tuple[str, bytes]]:
    """Every key and value of the Redis at ``url`` (Celery's base64 message bodies decoded)."""
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(count=500):
            for value in (key, *_values(client, key)):
                yield f"redis key {key.decode(errors='replace')}", value
                yield from ((f"redis message in {key!r}", b) for b in _bodies(value))
    finally:
        client.close()


def _values(client: redis.Redis, key: bytes) -> list[bytes]:
    kind = client.type(key)
    if kind == b"string":
        return [client.get(key) or b""]
    if kind == b"hash":
        return [part for pair in client.hgetall(key).items() for part in pair]
    if kind == b"list":
        return list(client.lrange(key, 0, -1))
    if kind == b"set":
        return list(client.smembers(key))
    if kind == b"zset":
        return [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
    return []


def _bodies(value: bytes) -> Iterator[bytes]:
    try:
        parsed: Any = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return
    stack = [parsed]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack += item
        elif isinstance(item, dict):
            encoding = (item.get("properties") or {}).get("body_encoding")
            if encoding == "base64" and isinstance(item.get("body"), str):
                with contextlib.suppress(binascii.Error, ValueError):
                    yield base64.b64decode(item["body"])
            stack += list(item.values())
