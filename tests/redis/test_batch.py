"""Several scripts in one round trip (``om_workers.coordination.batch``) on a real Redis: in
order, as bare ``EVALSHA`` (no ``SCRIPT EXISTS`` first), each with its own reply or error, and
reloaded when Redis lost its scripts."""

from __future__ import annotations

import pytest
import redis

from om_workers.coordination.batch import Reply, ScriptCall, run_together
from om_workers.coordination.connection import connect
from om_workers.errors import RedisUnavailableError

APPEND = "return redis.call('APPEND', KEYS[1], ARGV[1])"
FAIL = "return redis.error_reply('refused ' .. ARGV[1])"


def _calls(client: redis.Redis, replies: list[Reply]) -> list[ScriptCall]:
    append = client.register_script(APPEND)
    return [
        ScriptCall(append, ["k"], ["a"], replies.append),
        ScriptCall(client.register_script(FAIL), [], ["x"], replies.append),
        ScriptCall(append, ["k"], ["b"], replies.append),
    ]


def _calls_of(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_scripts_run_in_order_each_with_its_reply_or_error(client: redis.Redis) -> None:
    replies: list[Reply] = []
    calls = _calls(client, replies)
    client.script_load(APPEND)
    client.script_load(FAIL)
    client.config_resetstat()
    run_together(client, "testing", calls)
    assert replies[0] == 1 and replies[2] == 2
    assert isinstance(replies[1], redis.ResponseError) and "refused x" in str(replies[1])
    assert client.get("k") == "ab"
    assert _calls_of(client, "evalsha") == 3
    assert _calls_of(client, "script|exists") == 0 and _calls_of(client, "script|load") == 0


def test_scripts_redis_lost_are_loaded_and_run_once(client: redis.Redis) -> None:
    replies: list[Reply] = []
    calls = _calls(client, replies)
    client.script_flush()  # a restarted Redis: no persistence, no scripts
    run_together(client, "testing", calls)
    assert replies[0] == 1 and replies[2] == 2
    assert isinstance(replies[1], redis.ResponseError)
    assert client.get("k") == "ab"


def test_an_unreachable_redis_raises_and_hands_out_no_reply() -> None:
    down = connect("redis://127.0.0.1:1/0", connect_timeout_s=0.2, retries=0)
    replies: list[Reply] = []
    with pytest.raises(RedisUnavailableError, match="testing"):
        run_together(down, "testing", _calls(down, replies))
    assert replies == []
