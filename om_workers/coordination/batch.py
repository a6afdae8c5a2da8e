"""Several Lua scripts in one Redis round trip.

A flush job's lock step and its fair-queue step touch unrelated keys and need no atomicity
between them, only order, so they ride one non-transactional pipeline: the lock acquire with
the job's fair-queue ``start``, the lock release with its ``done``. redis-py would make a
pipeline of registered scripts ask ``SCRIPT EXISTS`` first (a second round trip every time),
so the calls are sent as bare ``EVALSHA`` and only a script Redis does not know (it restarted:
it runs without persistence) is run again alone, which loads it. Every script sent this way is
safe to repeat (the pipeline is retried whole on a lost connection, like a single command).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from om_workers.coordination.connection import translate_errors

Reply = object
"""A script's reply, or the ``redis.RedisError`` that one call raised (the others still ran)."""


@dataclass(frozen=True)
class ScriptCall:
    """One script call to send with others: ``script`` (registered on any client), its
    ``keys`` and ``args``, and ``on_reply``, handed the call's reply or its error."""

    script: Script
    keys: Sequence[str]
    args: Sequence[str | int | float]
    on_reply: Callable[[Reply], None]


def run_together(client: redis.Redis, action: str, calls: Sequence[ScriptCall]) -> None:
    """Run ``calls`` in order in one round trip and hand each its reply (or error).

    A call whose script Redis lost is run once more alone (loading it). Raises
    :class:`~om_workers.errors.RedisUnavailableError` when Redis cannot be reached (no
    ``on_reply`` is called then), naming ``action``; an error of one call is that call's reply.
    """
    with translate_errors(action):
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        replies = pipe.execute(raise_on_error=False)
        answers: list[Reply] = []
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, NoScriptError):
                reply = _alone(call)
            answers.append(reply)
    for call, answer in zip(calls, answers, strict=True):
        call.on_reply(answer)


def _alone(call: ScriptCall) -> Reply:
    try:
        reply: Reply = call.script(keys=list(call.keys), args=list(call.args))
    except redis.ResponseError as exc:
        return exc
    return reply


__all__ = ["Reply", "ScriptCall", "run_together"]
