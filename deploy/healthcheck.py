#!/usr/bin/env python3
"""Container health check for every role of the om image: ``om-healthcheck [PID]``.

The image runs one ``om`` service per container (``om api``, ``om worker``, ``om beat``,
``om flower``, or the one-shot ``om db upgrade``), so one Dockerfile ``HEALTHCHECK`` cannot
hard-code a URL. This script reads the service's command line from ``/proc/<PID>/cmdline``
(PID 1 by default; under tini the ``om`` command is tini's argument) and checks what that
role can prove about itself:

- ``api``: ``GET /healthz`` on its ``--port`` (liveness: the event loop answers);
- ``flower``: ``GET /healthcheck`` on its ``--port`` (needs no basic auth);
- ``worker``: a Celery ``ping`` through the broker to this worker's node name, which proves it
  consumes from Redis, not merely that the process runs;
- ``beat``: the broker answers (``OM_BROKER_URL`` when set, else a Redis ``PING`` on
  ``OM_REDIS_URL``; beat has no port: what it needs is the broker it publishes
  ``om.reconcile`` to);
- anything else (``db upgrade``, ``keys create``): healthy, it exits by itself.

Exit status 0: healthy, 1: unhealthy (the reason on stderr). Standard library only, except the
worker and beat checks, which use the ``celery`` and ``redis`` packages the image has anyway.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request
from collections.abc import Sequence
from typing import Final

TIMEOUT_S: Final = 5.0
SERVICES: Final = ("api", "worker", "beat", "flower")
DEFAULT_PORTS: Final = {"api": 8000, "flower": 5555}
DEFAULT_NODE: Final = "om-worker@%h"


def read_cmdline(pid: int) -> list[str]:
    """The argv of process ``pid``; raises ``OSError`` when it cannot be read."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        raw = handle.read()
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def om_command(argv: Sequence[str]) -> list[str]:
    """The ``om`` arguments in ``argv`` (``["api", "--port", "8000"]``), or ``[]``.

    ``om`` is the first element whose basename is ``om`` (a console script, possibly run as
    ``python /opt/venv/bin/om``), or the element after ``-m om_api.cli``.
    """
    for index, part in enumerate(argv):
        if os.path.basename(part) == "om":
            return list(argv[index + 1 :])
        if part == "om_api.cli" and index > 0 and argv[index - 1] == "-m":
            return list(argv[index + 1 :])
    return []


def option(args: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` in ``args`` (``--port 8000`` or ``--port=8000``)."""
    for index, part in enumerate(args):
        for name in names:
            if part == name and index + 1 < len(args):
                return args[index + 1]
            if part.startswith(name + "="):
                return part[len(name) + 1 :]
    return None


def http_ok(url: str) -> None:
    """Raise ``OSError`` unless ``url`` answers 200 within :data:`TIMEOUT_S`."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        if response.status != 200:
            raise OSError(f"{url} answered {response.status}")


def check_worker(args: Sequence[str]) -> None:
    """Raise ``RuntimeError`` unless this host's worker answers a Celery ping."""
    from celery import Celery  # type: ignore[import-untyped]

    node = (option(args, "--name", "-n") or DEFAULT_NODE).replace("%h", socket.gethostname())
    app = Celery("om-healthcheck", broker=broker_url(), set_as_current=False)
    try:
        replies = app.control.ping(destination=[node], timeout=TIMEOUT_S)
    finally:
        app.close()
    if not any(node in reply for reply in replies):
        raise RuntimeError(f"worker {node} did not answer a ping")


def broker_url() -> str:
    """The broker the services use: ``OM_BROKER_URL`` when set (RabbitMQ), else Redis."""
    return os.environ.get("OM_BROKER_URL") or os.environ["OM_REDIS_URL"]


def check_beat() -> None:
    """Raise unless the broker beat publishes to answers: a Redis ``PING``, or an AMQP
    connection for RabbitMQ."""
    url = broker_url()
    if url.startswith(("amqp://", "amqps://", "pyamqp://")):
        from kombu import Connection

        with Connection(url, connect_timeout=TIMEOUT_S) as connection:
            connection.ensure_connection(max_retries=1)
        return
    import redis

    client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S)
    try:
        client.ping()
    finally:
        client.close()


def check(args: Sequence[str]) -> str:
    """Run the check for the ``om`` command ``args``; returns what was checked.

    Raises whatever the failed check raised.
    """
    service = args[0] if args else ""
    if service in DEFAULT_PORTS:
        port = option(args, "--port") or str(DEFAULT_PORTS[service])
        path = "/healthz" if service == "api" else "/healthcheck"
        url = f"http://127.0.0.1:{port}{path}"
        http_ok(url)
        return url
    if service == "worker":
        check_worker(args)
        return "worker ping"
    if service == "beat":
        check_beat()
        return "broker ping"
    return f"om {' '.join(args) or '(no command)'}: nothing to check"


def main(argv: Sequence[str]) -> int:
    pid = int(argv[0]) if argv else 1
    try:
        args = om_command(read_cmdline(pid))
        if not args:
            raise RuntimeError(f"process {pid} does not run an om command")
        checked = check(args)
    except Exception as exc:  # any failure is "unhealthy", with its reason
        print(f"unhealthy: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
