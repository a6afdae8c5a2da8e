"""The delivery counter that stops poison messages.

Celery with a Redis broker redelivers an unacked message when its worker dies; a message that
kills every worker that runs it would loop forever. Each task counts its deliveries here and,
once :func:`om_workers.coordination.timing.redelivery_exhausted` says so, records the job as failed
and acks the message instead of running it.
"""

from __future__ import annotations

import redis

from om_workers.coordination import keys
from om_workers.coordination.connection import translate_errors
from om_workers.errors import CoordinationError


def record_delivery(client: redis.Redis, job_id: str, *, ttl_s: int = keys.DELIVERIES_TTL_S) -> int:
    """Count one more delivery of ``job_id`` and return the count (1 for the first delivery).

    The counter expires ``ttl_s`` seconds after the last delivery. A command retried after a
    lost reply counts twice: the message is then failed one delivery early, never run too often.
    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    with translate_errors("counting a delivery"):
        count = client.register_script(keys.COUNT_DELIVERY)(
            keys=[keys.deliveries_key(job_id)], args=[ttl_s]
        )
    if not isinstance(count, int):
        raise CoordinationError(f"delivery counter for {job_id!r} answered {count!r}")
    return count


def forget_deliveries(client: redis.Redis, job_id: str) -> None:
    """Delete the job's counter once its job finished (success or recorded failure).

    Raises :class:`om_workers.errors.RedisUnavailableError` when Redis cannot be reached.
    """
    with translate_errors("forgetting a delivery count"):
        client.delete(keys.deliveries_key(job_id))
