"""The Redis broker transport the workers use: kombu's, closed safely after a lost connection.

When Redis goes away with tasks in flight, Celery closes the broken connection and kombu's
channel tries to put the unacknowledged messages back. If the transport was already closed
by an earlier reconnect, kombu reads its connection info from ``None`` and raises
``AttributeError``; that is not a connection error, so nothing catches it and the worker dies
("Unrecoverable error"). Seen here on the second of five Redis restarts under load. This
channel reports that state as the connection error it is: the channel closes, the worker
reconnects, and the messages it could not put back are redelivered by Redis after the
visibility timeout, or re-requested by the reconciler when the restart emptied Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis


class SafeCloseChannel(kombu_redis.Channel):
    """kombu's Redis channel, raising a connection error when its transport is gone, and
    publishing through one client per connection pool."""

    _shared: tuple[Any, Any] | None = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        # kombu builds a new redis client (about 170 response callbacks) for every publish,
        # event included: a third of a publish's time. A client is only a view on the pool,
        # safe to share between threads, so one is kept per pool (a reconnect makes a new
        # pool, and with it a new client).
        if client is not None:
            yield client
            return
        pool = self.pool
        shared = self._shared
        if shared is None or shared[0] is not pool:
            shared = self._shared = (pool, self._create_client())  # type: ignore[no-untyped-call]
        yield shared[1]

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is already closed")
        return super()._connparams(asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`SafeCloseChannel`."""

    Channel = SafeCloseChannel


TRANSPORT = f"{__name__}:Transport"
"""What ``broker_transport`` names to use this transport (kombu resolves ``module:Class``)."""
