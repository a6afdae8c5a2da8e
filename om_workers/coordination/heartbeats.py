"""One thread per process that runs every session lock's heartbeat when it is due.

A thread per lock would cost a thread start (and a GIL hand-off to it) per flush job; under a
threads pool of many slots that was a measurable share of a short flush. One scheduler thread
instead keeps a heap of due times and runs each beat in turn. A beat is short (one Redis round
trip, bounded by the client's socket timeout), so beats of other locks wait at most that long.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Beat = Callable[[], float | None]
"""Runs one beat; returns the delay in seconds until the next one, or ``None`` to stop."""


class Scheduled:
    """A beat as scheduled: :meth:`cancel` drops it, and every later run of it, without its
    being run again."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        """Run the beat no more (a run already under way finishes)."""
        self.cancelled = True


class Heartbeats:
    """Runs scheduled beats from one daemon thread, started on first use (and again in a
    forked child, where the parent's thread does not exist). ``clock`` returns monotonic
    seconds; ``name`` names the thread."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, name: str = "om-lock-heartbeats"
    ) -> None:
        self._clock = clock
        self._name = name
        self._due: list[tuple[float, int, Beat, Scheduled]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(
        self, delay_s: float, beat: Beat, *, scheduled: Scheduled | None = None
    ) -> Scheduled:
        """Run ``beat`` in ``delay_s`` seconds, then again after each delay it returns, until
        it returns ``None`` or the returned handle (``scheduled``, when given) is cancelled."""
        handle = scheduled if scheduled is not None else Scheduled()
        with self._changed:
            heapq.heappush(self._due, (self._clock() + delay_s, next(self._order), beat, handle))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._due[0][2] is beat:
                # Only a new earliest beat changes how long the thread sleeps; waking it for
                # every schedule would cost a thread switch per flush job.
                self._changed.notify()
        return handle

    def _next(self) -> tuple[Beat, Scheduled]:
        with self._changed:
            while True:
                # Cancelled beats at the head are dropped, not waited for: a lock released
                # before its first beat (most flush jobs) would otherwise wake this thread
                # once per job, a GIL hand-off each.
                while self._due and self._due[0][3].cancelled:
                    heapq.heappop(self._due)
                now = self._clock()
                if self._due and self._due[0][0] <= now:
                    _, _, beat, handle = heapq.heappop(self._due)
                    return beat, handle
                self._changed.wait(self._due[0][0] - now if self._due else None)

    def _run(self) -> None:
        while True:
            beat, handle = self._next()
            try:
                delay = beat()
            except Exception:  # a broken beat must not stop every other lock's
                log.exception("a lock heartbeat failed")
                continue
            if delay is not None and not handle.cancelled:
                self.schedule(delay, beat, scheduled=handle)


HEARTBEATS = Heartbeats()
"""The process's scheduler, shared by every :class:`~om_workers.coordination.locks.SessionLock`."""
