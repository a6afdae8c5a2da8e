"""What erasing a session removes from Redis: the keys that belong to it alone
(:func:`~om_workers.coordination.keys.session_keys`). Nothing in Redis holds a session's
content; these keys hold job ids and lock tokens, and go with the session all the same."""

from __future__ import annotations

import redis

from om_workers.coordination import keys
from om_workers.coordination.connection import translate_errors


def forget_session(client: redis.Redis, tenant_id: str, session_id: str) -> int:
    """Delete the session's keys; how many existed. Idempotent. Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached."""
    with translate_errors("deleting an erased session's keys"):
        return int(client.delete(*keys.session_keys(tenant_id, session_id)))
