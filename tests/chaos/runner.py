"""One leg of the matrix per broker: start the topology, run the faults, stop it.

The RabbitMQ leg (``OM_BROKER_URL=amqp://...``) is skipped, with the reason in the report,
when the settings do not know the option yet, RabbitMQ does not answer, no virtual host can be
made, or the topology does not come up with it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.chaos.faults import Fault
from tests.chaos.matrix import Leg
from tests.chaos.results import Report
from tests.chaos.supervisor import Supervisor
from tests.chaos.topology import Broker, ChaosTopology
from tests.deploy.rehearsal import RehearsalError


def amqp_unavailable() -> str | None:
    """Why the RabbitMQ leg cannot run here, or ``None``."""
    from tests.e2e.rabbitmq import AMQP_PORT, answers

    if not answers(AMQP_PORT):
        return f"RabbitMQ does not answer on 127.0.0.1:{AMQP_PORT}: RabbitMQ leg skipped"
    return None


def run_leg(
    report: Report,
    broker: Broker,
    faults: Sequence[Fault],
    say: Callable[[str], None] = print,
    keep_logs: Path | None = None,
) -> None:
    """Run ``faults`` (those of this broker) on a fresh topology; rows go into ``report``."""
    faults = [fault for fault in faults if broker in fault.brokers]
    if broker == "amqp" and (reason := amqp_unavailable()) is not None:
        report.skipped.append(reason)
        say(reason)
        return
    topology = ChaosTopology(report.profile, broker, say=lambda m: say(f"  {m}"))
    began = time.monotonic()
    try:
        try:
            topology.start()
        except (RehearsalError, OSError) as exc:
            if broker != "amqp":
                raise
            reason = f"RabbitMQ leg skipped: the topology did not start with it: {exc}"
            report.skipped.append(reason[:600])
            say(reason)
            return
        except BaseException as exc:  # pytest.skip from the virtual host helper
            if broker != "amqp" or type(exc).__name__ != "Skipped":
                raise
            report.skipped.append(f"RabbitMQ leg skipped: {exc}")
            return
        say(f"[{broker}] topology up in {time.monotonic() - began:.1f} s")
        supervisor = Supervisor(topology)
        supervisor.start()
        try:
            leg = Leg(topology, supervisor, say=say)
            for fault in faults:
                row = leg.run(fault)
                heal = "not healed" if row.heal_s is None else f"healed in {row.heal_s:.1f} s"
                problems = {name: len(items) for name, items in row.failures().items()}
                say(f"[{broker}] {fault.slug}: {heal}; problems {problems or 'none'}")
                report.rows.append(row)
        finally:
            supervisor.stop()
    finally:
        if keep_logs is not None and topology.log_dir.exists():
            target = keep_logs / broker
            shutil.copytree(topology.log_dir, target, dirs_exist_ok=True)
        topology.stop()
