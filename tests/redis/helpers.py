"""Small helpers shared by the Redis tests."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; the timeout only bounds a
    failing test, nothing asserts how fast the condition came true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
