"""``OM_TEST_REDIS_IMAGE``: the tests' private Redis as a container of the compose file's Redis
image, with the embedded server's contract (a restart is a fresh, empty server on the same
port; nothing evicted)."""

from __future__ import annotations

import pytest
import redis

from tests.containers.images import STAND_INS
from tests.containers.redis_server import IMAGE_VAR, ContainerRedis, private_redis

IMAGE = next(s.name for s in STAND_INS if s.name.startswith("redis:"))


def test_the_variable_puts_the_private_redis_in_a_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(IMAGE_VAR, IMAGE)
    with private_redis() as server:
        assert isinstance(server, ContainerRedis) and server.pid is not None
        client = redis.Redis.from_url(server.url)
        try:
            client.set("kept", "until the restart")
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            url = server.url
            server.stop()
            assert server.pid is None
            server.start()
            assert server.url == url and client.get("kept") is None
        finally:
            client.close()
    assert server.pid is None
    monkeypatch.delenv(IMAGE_VAR)
    assert not isinstance(private_redis(), ContainerRedis)
