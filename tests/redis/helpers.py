"""Small helpers shared by the Redis tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from om_workers.coordination.heartbeats import Beat, Heartbeats


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; the timeout only bounds a
    failing test, nothing asserts how fast the condition came true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class ManualHeartbeats(Heartbeats):
    """A heartbeat scheduler without a thread: beats run only when the test calls
    :meth:`run_due`, so no stall of a loaded machine can come between two of them."""

    def __init__(self) -> None:
        super().__init__(name="om-test-manual-heartbeats")
        self._beats: list[Beat] = []
        self.delays: list[float] = []
        """Every delay a beat was scheduled with, in order."""

    def schedule(self, delay_s: float, beat: Beat) -> None:
        self.delays.append(delay_s)
        self._beats.append(beat)

    def run_due(self) -> int:
        """Run every scheduled beat once (whatever its delay); how many ran. A beat that returns
        a delay is kept for the next call, one that returns ``None`` is dropped."""
        beats, self._beats = self._beats, []
        for beat in beats:
            delay = beat()
            if delay is not None:
                self.schedule(delay, beat)
        return len(beats)
