"""Running the fault matrix: one phase per fault on one topology (a leg per broker).

A phase starts the mixed load on fresh sessions of both tenants, lets it run (warm-up),
injects the fault (the load goes on through it, or is paused for a quiet fault), stops the
load when the fault ends, then waits for quiescence with no help from the agents: healing is
the system's own (redelivery, lock expiry, the reconciler). Time to heal is from the fault's
end (or the kill) to the first poll at which every confirmed message of the phase is observed.
Then every check of :mod:`tests.chaos.checks` runs on the phase's sessions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tests.chaos import checks
from tests.chaos.faults import Fault, FaultContext, Injected
from tests.chaos.load import Exchange, Load, Recorder, SessionLoad, client_for
from tests.chaos.supervisor import Crash, Supervisor
from tests.chaos.topology import TENANTS, Broker, ChaosTopology


@dataclass
class Row:
    """The outcome of one fault."""

    fault: Fault
    broker: Broker
    injected: Injected
    heal_s: float | None
    settled: bool
    target_s: float | None
    verdict: checks.Verdict
    leaks: list[str]
    five_xx: list[Exchange]
    in_window: Counter[str]
    crashes: list[Crash] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def healed(self) -> bool:
        return self.heal_s is not None and self.settled

    @property
    def met_target(self) -> bool | None:
        if self.target_s is None or self.heal_s is None:
            return None
        return self.heal_s <= self.target_s

    def failures(self) -> dict[str, list[str]]:
        """Everything the assertions of the short form reject, by check."""
        found = self.verdict.problems()
        if not self.healed:
            found["not healed"] = [f"{self.fault.slug}: not healed (settled={self.settled})"]
        if self.leaks:
            found["leaks"] = self.leaks
        if self.crashes:
            found["crashes"] = [f"{c.name} exited {c.code}: {c.reason}" for c in self.crashes]
        if self.five_xx:
            found["5xx"] = [f"{e.status} {e.method} {e.path}" for e in self.five_xx]
        return found


class Leg:
    """The phases of one topology; :meth:`run` each fault in turn."""

    def __init__(
        self,
        topology: ChaosTopology,
        supervisor: Supervisor,
        say: Callable[[str], None] = print,
    ) -> None:
        self.topology = topology
        self.supervisor = supervisor
        self.say = say
        self.recorder = Recorder(self.secrets())
        self.known_leaks: set[str] = set()
        self.rows: list[Row] = []

    def secrets(self) -> dict[str, str]:
        """Every secret of the run, by what it is."""
        topology = self.topology
        found = {"provider key": topology.provider_key}
        for tenant, key in topology.keys.items():
            found[f"API key of {tenant}"] = key
            found[f"API key secret of {tenant}"] = key.rsplit("_", 1)[-1]
        api = topology.process("api").env
        found["admin token"] = api.get("OM_ADMIN_TOKEN", "")
        flower = topology.process("flower").env.get("OM_FLOWER_BASIC_AUTH", "")
        found["Flower password"] = flower.partition(":")[2]
        return {label: value for label, value in found.items() if len(value) >= 8}

    def run(self, fault: Fault) -> Row:
        topology, profile = self.topology, self.topology.profile
        index = len(self.rows) + 1
        sessions = [
            (tenant, f"p{index:02d}-{fault.slug}-{tenant[-1]}{i}")
            for tenant in TENANTS
            for i in range(profile.sessions_per_tenant)
        ]
        load = Load(
            topology.api_url,
            topology.keys,
            sessions,
            self.recorder,
            threads=profile.threads,
            pause_s=profile.pause_s,
            give_up_s=profile.give_up_s,
            seed=index,
        )
        began = time.time()
        load.start()
        time.sleep(profile.warmup_s)
        if fault.quiet:
            # The provider must meet each session about once: the warm-up's work is done first.
            load.stop()
            self._quiesce(load.sessions, time.time())
        injected = fault.inject(FaultContext(topology, profile, load.burst))
        self.say(f"  {fault.slug}: {injected.description}")
        if not fault.quiet:
            load.stop()
        heal_s, settled = self._quiesce(load.sessions, injected.end)
        topology.settle_services()
        verdict = self._check(load.sessions)
        row = Row(
            fault=fault,
            broker=topology.broker,
            injected=injected,
            heal_s=heal_s,
            settled=settled,
            target_s=fault.target(profile, topology.broker),
            verdict=verdict,
            leaks=self._new_leaks(),
            five_xx=[],
            in_window=Counter(),
        )
        self._statuses(row, began)
        row.crashes = self.supervisor.between(began, time.time())
        row.notes += _notes(row, load.sessions, topology)
        self.rows.append(row)
        return row

    def _quiesce(self, sessions: Sequence[SessionLoad], end: float) -> tuple[float | None, bool]:
        """Seconds from ``end`` until every session is observed (``None``: not within the
        heal timeout), and whether every job is final by then."""
        profile = self.topology.profile
        deadline = end + profile.heal_timeout_s
        heal_s: float | None = None
        store = self.topology.store()
        try:
            while time.time() < deadline:
                if all(checks.fully_observed(store, s) for s in sessions):
                    heal_s = max(0.0, time.time() - end)
                    break
                time.sleep(profile.poll_s)
        finally:
            store.close()
        url = self.topology.database_url
        while True:
            settled = all(checks.settled(url, s) for s in sessions)
            if settled or time.time() >= deadline:
                return heal_s, settled
            time.sleep(profile.poll_s)

    def _check(self, sessions: Sequence[SessionLoad]) -> checks.Verdict:
        topology = self.topology
        verdict = checks.Verdict()
        store = topology.store()
        clients = {
            t: client_for(topology.api_url, k, self.recorder) for t, k in topology.keys.items()
        }
        try:
            for load in sessions:
                verdict.merge(checks.check_memory(store, load))
                verdict.merge(checks.check_runs(topology.database_url, load, topology.kills))
                verdict.merge(checks.check_context(clients[load.tenant], store, load))
        finally:
            store.close()
            for client in clients.values():
                client.close()
        return verdict

    def _new_leaks(self) -> list[str]:
        topology = self.topology
        texts = [
            *checks.log_texts(topology.log_dir),
            *checks.database_text(topology.database or ""),
            *checks.redis_texts(topology.redis_url),
        ]
        found = checks.find_secrets(self.recorder.secrets, texts) | set(self.recorder.leaks)
        new = sorted(found - self.known_leaks)
        self.known_leaks |= found
        return new

    def _statuses(self, row: Row, began: float) -> None:
        """5xx of the phase outside the fault's window (plus grace); what the window saw."""
        injected, grace = row.injected, self.topology.profile.grace_s
        spans = injected.windows or ((injected.start, injected.end),)
        windows = [(start, end + grace) for start, end in spans] if injected.outage else []
        for exchange in self.recorder.between(began, time.time()):
            inside = any(exchange.at <= end and exchange.done >= start for start, end in windows)
            if inside:
                row.in_window[_status_label(exchange)] += 1
            elif exchange.status is not None and exchange.status >= 500:
                row.five_xx.append(exchange)


def _status_label(exchange: Exchange) -> str:
    if exchange.status is None:
        return f"no answer ({exchange.error})"
    if exchange.status == 503:
        return "503 + Retry-After" if exchange.retry_after else "503 without Retry-After"
    return str(exchange.status)


def _notes(row: Row, sessions: Sequence[SessionLoad], topology: ChaosTopology) -> list[str]:
    notes = []
    verdict = row.verdict
    messages = sum(len(s.acked) for s in sessions)
    jobs = ", ".join(f"{n} {state}" for state, n in sorted(verdict.jobs.items()))
    notes.append(f"{messages} messages confirmed over {len(sessions)} sessions; jobs: {jobs}")
    for error, n in verdict.errors.most_common(3):
        notes.append(f"failed x{n}: {error}")
    if row.in_window:
        seen = ", ".join(f"{label} x{n}" for label, n in row.in_window.most_common())
        notes.append(f"API during the fault: {seen}")
    for name, items in verdict.problems().items():
        notes.append(f"{name} ({len(items)}): {'; '.join(items[:3])}")
    notes += [f"crash: {c.name} exited {c.code} ({c.reason}); restarted" for c in row.crashes]
    notes += [f"leak: {leak}" for leak in row.leaks[:5]]
    notes += [f"5xx outside the fault: {e.status} {e.method} {e.path}" for e in row.five_xx[:3]]
    if not row.healed:
        left = [s.session for s in sessions if s.acked and not _observed(topology, s)]
        notes.append(f"not healed: unobserved sessions {left[:4]}, all jobs final: {row.settled}")
    return notes


def _observed(topology: ChaosTopology, load: SessionLoad) -> bool:
    store = topology.store()
    try:
        return checks.fully_observed(store, load)
    finally:
        store.close()
