"""The serving path's lanes: a lane runs at most its threads' worth of calls at once, the rest
wait their turn; a full write lane never holds up a context read. Thread events, no timing."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from om_api.server.lanes import Lane, Lanes


class Gate:
    """Calls that block until opened, counting how many ran at once."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self._lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.entered = threading.Semaphore(0)

    def call(self, value: int) -> int:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.entered.release()
        try:
            if not self.opened.wait(timeout=60):
                raise TimeoutError("the gate was never opened")
            return value
        finally:
            with self._lock:
                self.running -= 1


async def _wait_for(condition: threading.Semaphore, count: int) -> None:
    for _ in range(count):
        while not condition.acquire(blocking=False):
            await asyncio.sleep(0.001)


def test_a_lane_runs_at_most_its_threads_at_once_and_answers_every_call() -> None:
    lane, gate = Lane("write", 2), Gate()

    async def scenario() -> list[int]:
        calls = [asyncio.ensure_future(lane.run(gate.call, n)) for n in range(6)]
        await _wait_for(gate.entered, 2)  # two running; the other four wait for the lane
        for _ in range(20):
            await asyncio.sleep(0)
        assert gate.running == 2
        gate.opened.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4, 5]
    assert gate.most == 2


def test_a_full_write_lane_leaves_the_read_lane_free() -> None:
    lanes, gate = Lanes(read_threads=1, write_threads=1), Gate()

    async def scenario() -> str:
        writes = [asyncio.ensure_future(lanes.write.run(gate.call, n)) for n in range(3)]
        await _wait_for(gate.entered, 1)
        read = await lanes.read.run(lambda: "context")  # answered while the writes wait
        gate.opened.set()
        await asyncio.gather(*writes)
        return read

    assert asyncio.run(scenario()) == "context"


def test_a_lane_serves_one_event_loop_after_another() -> None:
    lane = Lane("read", 1)
    # Each test client (and each uvicorn server) runs its own loop; the lane follows.
    assert asyncio.run(lane.run(lambda: 1)) == 1
    assert asyncio.run(lane.run(lambda: 2)) == 2


def test_a_lane_needs_a_thread_and_errors_pass_through() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        Lane("read", 0)

    def fails() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        asyncio.run(Lane("read", 1).run(fails))


def test_a_lane_call_sees_the_callers_context() -> None:
    # Log fields and spans are context variables: they must follow a call into its lane.
    field: contextvars.ContextVar[str] = contextvars.ContextVar("field", default="none")

    async def scenario() -> str:
        field.set("request-7")
        return await Lane("read", 1).run(field.get)

    assert asyncio.run(scenario()) == "request-7"
