"""The machine's RabbitMQ (127.0.0.1:5672, guest/guest) for the end-to-end tests.

Every test gets a fresh virtual host, created through the management HTTP API when port 15672
answers, else with ``rabbitmqctl``, and deleted afterwards (with its queues, exchanges and
messages), so runs never see each other's messages. A queue's type and durability are read
from the management API when it is enabled; without it they are proven by declarations: a
passive declare finds the queue, a durable quorum declaration is accepted as equivalent and a
classic one is refused with 406 PRECONDITION_FAILED.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import amqp
import httpx
import pytest

HOST = "127.0.0.1"
AMQP_PORT = 5672
MANAGEMENT_PORT = 15672
USER = "guest"
PASSWORD = "guest"
CTL_TIMEOUT_S = 30.0


def answers(port: int, host: str = HOST, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to ``host:port`` opens within ``timeout_s`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _Admin(Protocol):
    def create(self, vhost: str) -> None: ...

    def delete(self, vhost: str) -> None: ...


class _ManagementApi:
    """Virtual hosts through the management plugin's HTTP API (port 15672)."""

    def __init__(self) -> None:
        self._http = httpx.Client(
            base_url=f"http://{HOST}:{MANAGEMENT_PORT}/api", auth=(USER, PASSWORD), timeout=10
        )

    def create(self, vhost: str) -> None:
        name = quote(vhost, safe="")
        self._http.put(f"/vhosts/{name}").raise_for_status()
        permissions = {"configure": ".*", "write": ".*", "read": ".*"}
        self._http.put(f"/permissions/{name}/{USER}", json=permissions).raise_for_status()

    def delete(self, vhost: str) -> None:
        self._http.delete(f"/vhosts/{quote(vhost, safe='')}")
        self._http.close()


class _Rabbitmqctl:
    """Virtual hosts through ``rabbitmqctl`` (needs the node's Erlang cookie)."""

    def create(self, vhost: str) -> None:
        self._run("add_vhost", vhost)
        self._run("set_permissions", "-p", vhost, USER, ".*", ".*", ".*")

    def delete(self, vhost: str) -> None:
        self._run("delete_vhost", vhost)

    @staticmethod
    def _run(*args: str) -> None:
        subprocess.run(
            ["rabbitmqctl", *args], check=True, capture_output=True, timeout=CTL_TIMEOUT_S
        )


def _admin() -> _Admin:
    """Whatever can create a virtual host here; skips the test when nothing can."""
    if answers(MANAGEMENT_PORT):
        return _ManagementApi()
    if shutil.which("rabbitmqctl"):
        probe = subprocess.run(
            ["rabbitmqctl", "list_vhosts"], capture_output=True, timeout=CTL_TIMEOUT_S
        )
        if probe.returncode == 0:
            return _Rabbitmqctl()
    pytest.skip(
        "RabbitMQ answers on 5672 but no virtual host can be created for the test: enable the "
        "management plugin (15672) or make rabbitmqctl usable"
    )


@contextmanager
def fresh_vhost() -> Iterator[str]:
    """A new, empty virtual host for ``guest``; yields its ``amqp://`` URL, deletes it after."""
    name = f"om-test-{uuid.uuid4().hex[:12]}"
    admin = _admin()
    admin.create(name)
    try:
        yield f"amqp://{USER}:{PASSWORD}@{HOST}:{AMQP_PORT}/{quote(name, safe='')}"
    finally:
        admin.delete(name)


@dataclass(frozen=True)
class QueueFacts:
    """A queue as the broker declared it: its type (``quorum``/``classic``), durability, the
    ready messages it holds, and how the facts were read."""

    type: str
    durable: bool
    messages: int
    source: str


def vhost_of(url: str) -> str:
    """The virtual host of a URL made by :func:`fresh_vhost`."""
    return url.rsplit("/", 1)[1]


def queue_facts(url: str, queue: str) -> QueueFacts:
    """Read ``queue`` of the vhost at ``url`` (see the module docstring for how).

    Raises ``AssertionError`` when the queue does not exist or the broker's answers contradict
    each other.
    """
    vhost = vhost_of(url)
    if answers(MANAGEMENT_PORT):
        response = httpx.get(
            f"http://{HOST}:{MANAGEMENT_PORT}/api/queues/{vhost}/{quote(queue, safe='')}",
            auth=(USER, PASSWORD),
            timeout=10,
        )
        assert response.status_code == 200, f"queue {queue} not found: {response.text}"
        body: dict[str, Any] = response.json()
        return QueueFacts(
            str(body["type"]), bool(body["durable"]), int(body.get("messages_ready", 0)), "http"
        )
    return _declared_facts(vhost, queue)


def _declared_facts(vhost: str, queue: str) -> QueueFacts:
    connection = amqp.Connection(
        host=f"{HOST}:{AMQP_PORT}", userid=USER, password=PASSWORD, virtual_host=vhost
    )
    connection.connect()
    try:
        _, messages, _ = _declare(connection, queue, passive=True)
        accepts = {
            kind: _accepted(
                connection,
                queue,
                durable=True,
                auto_delete=False,
                arguments={"x-queue-type": kind},
            )
            for kind in ("quorum", "classic")
        }
        assert sum(accepts.values()) == 1, f"ambiguous declarations of {queue}: {accepts}"
        kind = next(k for k, ok in accepts.items() if ok)
        return QueueFacts(kind, True, int(messages), "declare")
    finally:
        connection.close()


def _declare(connection: Any, queue: str, **options: Any) -> Any:
    channel = connection.channel()
    try:
        return channel.queue_declare(queue, **options)
    finally:
        if channel.is_open:
            channel.close()


def _accepted(connection: Any, queue: str, **options: Any) -> bool:
    """True when re-declaring ``queue`` with ``options`` is accepted as equivalent; False on
    406 PRECONDITION_FAILED (the broker closes that channel)."""
    try:
        _declare(connection, queue, **options)
    except amqp.exceptions.PreconditionFailed:
        return False
    return True
