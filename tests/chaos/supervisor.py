"""What compose's ``restart: unless-stopped`` does for the local topology: a thread that finds
an om service that exited by itself, records why (exit code, the log's last critical line) and
starts it again. A crash is a finding even when the restart heals it: the report lists every
one under the fault it happened in.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.chaos.topology import ChaosTopology

POLL_S: Final = 0.5


@dataclass(frozen=True)
class Crash:
    """A service that exited on its own: when (``time.time()``), its exit code and why."""

    name: str
    at: float
    code: int
    reason: str


class Supervisor:
    """Restarts crashed services of ``topology`` until :meth:`stop`; ``crashes`` lists them."""

    def __init__(self, topology: ChaosTopology) -> None:
        self.topology = topology
        self.crashes: list[Crash] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chaos-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def between(self, start: float, end: float) -> list[Crash]:
        return [crash for crash in self.crashes if start <= crash.at <= end]

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            topology = self.topology
            with topology.lock:
                for process in list(topology.processes):
                    code = process.process.poll()
                    if code is None or process.name in topology.expected_down:
                        continue
                    reason = _reason(process.log)
                    self.crashes.append(Crash(process.name, time.time(), code, reason))
                    topology.say(f"supervisor: {process.name} exited {code} ({reason}); restart")
                    topology.respawn(process.name, wait=False)


def _reason(log: Path) -> str:
    """The message (and exception's last line) of the log's last critical or error record."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        if '"critical"' in line or '"error"' in line:
            try:
                record = json.loads(line)
            except ValueError:
                return line[-300:]
            last = str(record.get("exception", "")).strip().splitlines()[-1:]
            return " / ".join([str(record.get("message", "")), *last])[:300]
    return lines[-1][-300:] if lines else "(empty log)"
