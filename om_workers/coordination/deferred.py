"""Redis steps that an outage must not lose, retried in the background until Redis answers.

A flush that ends while Redis is unreachable cannot release its session lock or free its place
in the fair queue. Left alone, the lock would block its session until its TTL passed and the
``pending`` marker behind it until the reconciler judged it stale (two lock TTLs), and the
place would count against the queue's capacity until the reconciler's sweep. Retried from a
scheduler thread of their own, the steps land within seconds of Redis's return instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from om_workers.coordination import timing
from om_workers.coordination.heartbeats import Heartbeats

log = logging.getLogger(__name__)


class Deferred:
    """Retries steps on ``heartbeats`` (default: a scheduler thread of its own, so a retry stuck
    on an unreachable Redis never delays a lock's heartbeat); ``clock`` returns monotonic
    seconds."""

    def __init__(
        self, heartbeats: Heartbeats | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._heartbeats = heartbeats or Heartbeats(name="om-redis-retries")
        self._clock = clock
        self._count = threading.Lock()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Steps not yet done nor given up."""
        with self._count:
            return self._waiting

    def retry(self, what: str, step: Callable[[], object], deadline_s: float) -> None:
        """Run ``step`` again, first after :func:`timing.redis_retry_delay_s` (1) seconds, then
        at that function's pace, until it returns without raising or ``deadline_s`` seconds have
        passed (then it is logged as given up: the reconciler heals what it left). ``what``
        names the step in the log."""
        give_up_at = self._clock() + deadline_s
        retries = [1]
        with self._count:
            self._waiting += 1

        def beat() -> float | None:
            try:
                step()
            except Exception as exc:
                if self._clock() < give_up_at:
                    retries[0] += 1
                    return timing.redis_retry_delay_s(retries[0])
                log.warning("%s: given up after %.0f s (%s)", what, deadline_s, exc)
            else:
                log.info("%s: done after %d attempts", what, retries[0] + 1)
            with self._count:
                self._waiting -= 1
            return None

        self._heartbeats.schedule(timing.redis_retry_delay_s(1), beat)


DEFERRED = Deferred()
"""The process's background retries."""
