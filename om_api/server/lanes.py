"""Lanes: bounded shares of the thread pool for the blocking work of an agent's turn.

An agent waits on its context read before every model call; its append and its flush request
come after the model answered, and nobody waits on them as urgently. With one thread pool for
all three, a burst of appends held every thread and the GIL, and a context read queued behind
them. So the hot routes take lanes of their own: the *read* lane (``GET .../context``) and
the *write* lane (``POST .../entries``, ``POST .../flush``), each a few threads
(``OM_API_READ_THREADS``, ``OM_API_WRITE_THREADS``). A write waits for its lane on the event
loop, costing no thread, while reads go on in theirs; few threads also mean little
contention for the GIL, so each read spends its own time rather than everyone's. Every other
route keeps the framework's pool.

Measured on two cores with 64 agents (docs/serving.md): one write thread and sixteen read
threads kept the context read's p99 near 30 ms on SQLite and PostgreSQL alike, where the
framework's pool of 40 for everything gave 200 ms and more, at the same or a higher rate of
turns; more write threads only took the database and the GIL from the reads.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread

P = ParamSpec("P")
T = TypeVar("T")


class Lane:
    """At most ``threads`` calls of this lane run in the thread pool at once; the rest wait
    their turn on the event loop, first come, first served."""

    def __init__(self, name: str, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"lane {name!r} needs at least one thread, got {threads}")
        self.name = name
        self.threads = threads
        # One limiter per event loop: an app can be served by more than one loop in its life
        # (each test client runs its own), and a limiter's waiters belong to one loop.
        self._limiters: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, anyio.CapacityLimiter
        ] = weakref.WeakKeyDictionary()

    def _limiter(self) -> anyio.CapacityLimiter:
        loop = asyncio.get_running_loop()
        limiter = self._limiters.get(loop)
        if limiter is None:
            limiter = self._limiters[loop] = anyio.CapacityLimiter(self.threads)
        return limiter

    async def run(self, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``func(*args, **kwargs)`` in a worker thread of this lane; its result, or its error."""
        call = functools.partial(func, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter())


class Lanes:
    """The serving path's two lanes (see the module's doc), and how many of a turn's calls the
    process is serving now (``serving``: counted by the hot layer, on the event loop)."""

    def __init__(self, read_threads: int, write_threads: int) -> None:
        self.read = Lane("read", read_threads)
        self.write = Lane("write", write_threads)
        self.serving = 0

    @property
    def alone(self) -> bool:
        """Whether at most one call of a turn is being served: the caller's own. A local
        store's write then costs least on the event loop; with others waiting it goes to the
        write lane, whose thread leaves the loop to the reads agents wait on (a loop serving
        the appends too served each read behind every append queued before it)."""
        return self.serving <= 1
