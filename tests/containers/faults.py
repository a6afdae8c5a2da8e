"""Faults on the running containers, judged by the local fault matrix's own checks
(:mod:`tests.chaos.checks`): the matrix's mixed load of agent runs from two tenants goes on
while a fault strikes, then stops; healing is the system's own. Time to heal runs from the
fault (the kill, or Redis answering again) to the first poll at which every message the API
confirmed is observed. Then: every confirmed message stored once and in order and observed
once, no job left queued or running, no two runs of a session overlapping, the context's
unobserved tail and recall right, no secret in a container's log, a database row or a Redis
key, and no 5xx outside the fault's window.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from om_workers.store import SqlStore
from tests.chaos import checks
from tests.chaos.load import Exchange, Load, Recorder, SessionLoad, client_for
from tests.containers.host import podman
from tests.containers.stack import PROJECT_FILTER, TENANTS, ComposeStack

SESSIONS_PER_TENANT: Final = 3
THREADS: Final = 3
PAUSE_S: Final = 0.5
WARMUP_S: Final = 4.0
GIVE_UP_S: Final = 30.0
HEAL_TIMEOUT_S: Final = 180.0
GRACE_S: Final = 3.0
POLL_S: Final = 0.5
_TASK: Final = re.compile(r"Task om\.flush\[([0-9a-f-]+)\] (\w+)")


@dataclass
class Outcome:
    """What one fault did and what the checks found afterwards."""

    description: str
    heal_s: float | None
    settled: bool
    verdict: checks.Verdict
    leaks: list[str] = field(default_factory=list)
    five_xx: list[Exchange] = field(default_factory=list)
    in_window: Counter[str] = field(default_factory=Counter)
    messages: int = 0

    def failures(self) -> dict[str, list[str]]:
        """Every problem, by check; empty when the fault healed with nothing lost."""
        found = self.verdict.problems()
        if self.heal_s is None or not self.settled:
            found["not healed"] = [f"heal_s={self.heal_s}, all jobs final={self.settled}"]
        if self.leaks:
            found["leaks"] = self.leaks
        if self.five_xx:
            found["5xx"] = [f"{e.status} {e.method} {e.path}" for e in self.five_xx]
        return found

    def summary(self) -> dict[str, object]:
        jobs = dict(self.verdict.jobs)
        return {
            "fault": self.description,
            "heal_s": None if self.heal_s is None else round(self.heal_s, 1),
            "messages": self.messages,
            "jobs": jobs,
            "in_window": dict(self.in_window),
            "problems": {k: len(v) for k, v in self.failures().items()},
        }


class FaultHarness:
    """The load and the checks for one fault at a time on ``stack``."""

    def __init__(self, stack: ComposeStack) -> None:
        self.stack = stack
        self.recorder = Recorder(self.secrets())
        self.known_leaks: set[str] = set()
        self._phases = 0

    def secrets(self) -> dict[str, str]:
        """Every secret of the run, by what it is."""
        stack = self.stack
        found = {
            "provider key": stack.secrets["OM_PROVIDER_API_KEY"],
            "admin token": stack.secrets["OM_ADMIN_TOKEN"],
            "Flower password": stack.secrets["OM_FLOWER_BASIC_AUTH"].partition(":")[2],
            "PostgreSQL password": stack.secrets["POSTGRES_PASSWORD"],
            "Redis password": stack.secrets["REDIS_PASSWORD"],
        }
        for tenant, key in stack.keys.items():
            found[f"API key of {tenant}"] = key
            found[f"API key secret of {tenant}"] = key.rsplit("_", 1)[-1]
        return {label: value for label, value in found.items() if len(value) >= 8}

    @contextmanager
    def load(self, slug: str) -> Iterator[Load]:
        """Fresh sessions of both tenants driven by the matrix's load from now until the block
        ends (then each thread finishes its run)."""
        self._phases += 1
        sessions = [
            (tenant, f"c{self._phases:02d}-{slug}-{tenant[-1]}{i}")
            for tenant in TENANTS
            for i in range(SESSIONS_PER_TENANT)
        ]
        load = Load(
            self.stack.api_url,
            self.stack.keys,
            sessions,
            self.recorder,
            threads=THREADS,
            pause_s=PAUSE_S,
            give_up_s=GIVE_UP_S,
            seed=self._phases,
        )
        load.start()
        try:
            time.sleep(WARMUP_S)
            yield load
        finally:
            load.stop()

    def busy_worker(self, timeout_s: float) -> tuple[str, int]:
        """The worker container with the most flushes in flight, by its log (waits up to
        ``timeout_s`` for one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            busy = max((self._in_flight(name), name) for name in self.stack.workers())
            if busy[0] > 0 or time.monotonic() > deadline:
                return busy[1], busy[0]
            time.sleep(0.1)

    def _in_flight(self, name: str) -> int:
        last: dict[str, str] = {}
        for task_id, event in _TASK.findall(self.stack.logs(name)):
            last[task_id] = event
        return sum(1 for event in last.values() if event == "received")

    def judge(
        self,
        description: str,
        sessions: Sequence[SessionLoad],
        end: float,
        began: float,
        windows: Sequence[tuple[float, float]] = (),
        kills: Sequence[datetime] = (),
    ) -> Outcome:
        """Wait for quiescence from ``end`` (a wall time), then run every check on the
        sessions; ``windows`` are the spans in which API errors are expected."""
        heal_s, settled = self._quiesce(sessions, end)
        verdict = self._check(sessions, kills)
        outcome = Outcome(description, heal_s, settled, verdict, leaks=self._new_leaks())
        outcome.messages = sum(len(s.acked) for s in sessions)
        spans = [(start, stop + GRACE_S) for start, stop in windows]
        for exchange in self.recorder.between(began, time.time()):
            inside = any(exchange.at <= stop and exchange.done >= start for start, stop in spans)
            if inside:
                outcome.in_window[_label(exchange)] += 1
            elif exchange.status is not None and exchange.status >= 500:
                outcome.five_xx.append(exchange)
        return outcome

    def _quiesce(self, sessions: Sequence[SessionLoad], end: float) -> tuple[float | None, bool]:
        deadline = end + HEAL_TIMEOUT_S
        heal_s: float | None = None
        url = self.stack.database_url
        store = SqlStore.from_url(url)
        try:
            while time.time() < deadline:
                if all(checks.fully_observed(store, s) for s in sessions):
                    heal_s = max(0.0, time.time() - end)
                    break
                time.sleep(POLL_S)
        finally:
            store.close()
        while True:
            settled = all(checks.settled(url, s) for s in sessions)
            if settled or time.time() >= deadline:
                return heal_s, settled
            time.sleep(POLL_S)

    def _check(self, sessions: Sequence[SessionLoad], kills: Sequence[datetime]) -> checks.Verdict:
        verdict = checks.Verdict()
        url = self.stack.database_url
        store = SqlStore.from_url(url)
        clients = {
            t: client_for(self.stack.api_url, k, self.recorder) for t, k in self.stack.keys.items()
        }
        try:
            for load in sessions:
                verdict.merge(checks.check_memory(store, load))
                verdict.merge(checks.check_runs(url, load, kills))
                verdict.merge(checks.check_context(clients[load.tenant], store, load))
        finally:
            store.close()
            for client in clients.values():
                client.close()
        return verdict

    def _new_leaks(self) -> list[str]:
        """Secrets found since the last call in the containers' logs, the database's rows
        (``pg_dump`` inside the PostgreSQL container) and every Redis key, or in a response."""
        stack = self.stack
        names = podman("ps", "-a", "--filter", PROJECT_FILTER, "--format", "{{.Names}}").split()
        texts = [(f"log of {name}", stack.logs(name).encode()) for name in names]
        dump = podman("exec", stack.name("postgres"), "pg_dump", "-U", "om", "--data-only", "om")
        texts.append(("database om", dump.encode()))
        texts += list(checks.redis_texts(stack.redis_url))
        found = checks.find_secrets(self.recorder.secrets, texts) | set(self.recorder.leaks)
        new = sorted(found - self.known_leaks)
        self.known_leaks |= found
        return new


def _label(exchange: Exchange) -> str:
    if exchange.status is None:
        return f"no answer ({exchange.error})"
    if exchange.status == 503:
        return "503 + Retry-After" if exchange.retry_after else "503 without Retry-After"
    return str(exchange.status)
