"""A Redis server in a container for the tests' private Redis: with ``OM_TEST_REDIS_IMAGE``
set (``redis:7.2-alpine``, the image the compose file runs), :func:`private_redis` gives a
:class:`ContainerRedis` instead of the ``redis-server`` child process, so the end-to-end tests
run against Redis as a deployment runs it, as their users test theirs.

    OM_TEST_REDIS_IMAGE=redis:7.2-alpine .venv/bin/python -m pytest tests/e2e

Needs rootful podman and the image (``make test-containers`` installs the one and builds the
other, the local stand-in, once).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Final

import redis

from om_workers.coordination.embedded import HOST, START_TIMEOUT_S, EmbeddedRedis, free_port
from om_workers.errors import EmbeddedRedisError
from tests.containers.host import HostError, inspect, podman

IMAGE_VAR: Final = "OM_TEST_REDIS_IMAGE"
STOP_TIMEOUT_S: Final = 5
PORT_WAIT_S: Final = 10.0
"""How long :meth:`ContainerRedis.start` retries a published port still held by the last run."""


def private_redis() -> EmbeddedRedis:
    """The tests' private Redis: a container of ``OM_TEST_REDIS_IMAGE`` when it is set, else a
    ``redis-server`` child process. Not started yet (use it as a context manager)."""
    image = os.environ.get(IMAGE_VAR)
    return ContainerRedis(image) if image else EmbeddedRedis()


class ContainerRedis(EmbeddedRedis):
    """:class:`EmbeddedRedis`'s contract with the server in a container of ``image``,
    published on ``127.0.0.1:<port>``: no persistence, ``noeviction``, nothing kept after
    :meth:`stop`; :meth:`start` after :meth:`stop` runs a fresh, empty server on the same port
    (a Redis restart).
    """

    def __init__(self, image: str, *, port: int | None = None) -> None:
        super().__init__(port=port)
        self.image = image
        self._container: str | None = None

    @property
    def pid(self) -> int | None:
        """Host process id of the server (the container's init), ``None`` when not running."""
        if self._container is None:
            return None
        state = inspect("container", self._container)
        if state is None or state["State"]["Status"] != "running":
            return None
        return int(state["State"]["Pid"])

    def start(self) -> None:
        """Run the container and wait until the server answers PING.

        Raises :class:`EmbeddedRedisError` when it is already running, podman fails (a missing
        image, no podman) or the server does not answer within :data:`START_TIMEOUT_S`;
        nothing is left running after a failure.
        """
        if self._container is not None:
            raise EmbeddedRedisError(f"the Redis container {self._container} is already running")
        port = self._port if self._port is not None else free_port()
        name = f"om-test-redis-{uuid.uuid4().hex[:10]}"
        # Right after a stop, podman may hold the published port a moment longer.
        deadline = time.monotonic() + PORT_WAIT_S
        while True:
            try:
                podman(
                    "run", "-d", "--rm", "--name", name, "-p", f"{HOST}:{port}:6379", self.image,
                    # As EmbeddedRedis: nothing on disk, refuse to evict; the published port
                    # is reached from the bridge's gateway, which protected mode would refuse.
                    "redis-server", "--save", "", "--appendonly", "no",
                    "--maxmemory-policy", "noeviction", "--protected-mode", "no",
                )  # fmt: skip
                break
            except (HostError, OSError) as exc:
                if "address already in use" in str(exc) and time.monotonic() < deadline:
                    podman("rm", "-f", "-v", name, check=False)
                    time.sleep(0.2)
                    continue
                why = f"cannot run a Redis container of {self.image}: {exc}"
                raise EmbeddedRedisError(why) from exc
        self._container, self._port = name, port
        try:
            self._wait_answering(port)
        except EmbeddedRedisError:
            self.stop()
            raise

    def _wait_answering(self, port: int) -> None:
        client = redis.Redis(host=HOST, port=port, socket_connect_timeout=0.5, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.exceptions.RedisError:
                    pass  # the port is published before the server listens
                if time.monotonic() >= deadline:
                    log = podman("logs", self._container or "", check=False)[-500:]
                    raise EmbeddedRedisError(
                        f"the Redis container did not answer within {START_TIMEOUT_S} s: {log}"
                    )
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop and remove the container with its anonymous volume (the image's ``/data``);
        does nothing when it is not running."""
        name, self._container = self._container, None
        if name is not None:
            podman("rm", "-f", "-v", "-t", str(STOP_TIMEOUT_S), name, check=False)
