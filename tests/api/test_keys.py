"""API keys through the admin routes: listed without their secret, revoked by id, and a revoked
key refused with a 401 on every tenant route: at once by the replica that revoked it and by a
replica that does not cache keys (two apps on one database here), on every backend; by a
replica that caches keys, once its ``OM_API_KEY_CACHE_S`` has passed."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import redis

from om_api.client import NotFound, OMClient, Unauthorized
from om_api.server.key_cache import KeyCache
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis
from om_workers.errors import InvalidApiKeyError
from om_workers.store import SqlStore
from om_workers.store.accounts import hash_api_key
from tests.api.conftest import make_settings
from tests.api.server import ADMIN_TOKEN, LiveApi, Published, serve

PATH_VALUES = {
    "session_id": "s",
    "scope_id": "task",
    "memory_id": "0123456789ab",
    "job_id": "j",
    "subject": "someone",
}


@pytest.fixture
def replica(backend_api: LiveApi, api_redis_server: EmbeddedRedis) -> Iterator[LiveApi]:
    """A second API process on the same database and Redis as ``backend_api``, reading keys
    from the store on every request (``OM_API_KEY_CACHE_S=0``)."""
    url = backend_api.store.engine.url.render_as_string(hide_password=False)
    store = SqlStore.from_url(url)
    client: redis.Redis = connect(api_redis_server.url)
    settings = make_settings(url, api_redis_server.url).model_copy(update={"api_key_cache_s": 0.0})
    try:
        with serve(settings, store, client, Published()) as live:
            yield live
    finally:
        client.close()
        store.close()


def _tenant_routes(api: LiveApi) -> list[tuple[str, str]]:
    """Every tenant route of the API (method, concrete path), from its OpenAPI document."""
    paths = httpx.get(f"{api.url}/openapi.json", timeout=30).json()["paths"]
    routes = []
    for template, operations in paths.items():
        if not template.startswith("/v1/") or template.startswith("/v1/admin"):
            continue
        path = template.format(**PATH_VALUES)
        routes += [(method.upper(), path) for method in operations]
    return routes


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_are_listed_by_id_and_prefix_never_the_key(backend_api: LiveApi) -> None:
    tenant_id, _ = backend_api.tenant()
    with backend_api.admin() as admin:
        made = admin.post(f"/v1/admin/tenants/{tenant_id}/keys", json={"label": "ci"}).json()
        listed = admin.get(f"/v1/admin/tenants/{tenant_id}/keys")
        assert listed.status_code == 200, listed.text
        keys = listed.json()["keys"]
        assert [k["label"] for k in keys] == ["test", "ci"]
        mine = keys[1]
        assert mine["key_id"] == made["key_id"] and made["key"].startswith(mine["prefix"])
        assert mine["revoked"] is False and mine["revoked_at"] is None
        assert set(mine) == {
            "key_id", "tenant_id", "prefix", "label", "created_at", "revoked", "revoked_at",
        }  # fmt: skip
        assert made["key"] not in listed.text and hash_api_key(made["key"]) not in listed.text
        assert admin.get("/v1/admin/tenants/nobody/keys").status_code == 404
        assert admin.post("/v1/admin/keys/0000000000000000/revoke").status_code == 404
        # Clients resolve the dot away: /v1/admin/tenants/keys names no route GET answers.
        assert admin.get("/v1/admin/tenants/./keys").status_code in (404, 405, 422)
    with httpx.Client(base_url=backend_api.url, headers=_bearer(made["key"])) as tenant:
        # A tenant key is not the admin token.
        assert tenant.get(f"/v1/admin/tenants/{tenant_id}/keys").status_code == 401
        assert tenant.post(f"/v1/admin/keys/{made['key_id']}/revoke").status_code == 401


def test_a_revoked_key_is_refused_at_once_on_every_route_by_the_revoking_and_uncached_replicas(
    backend_api: LiveApi, replica: LiveApi
) -> None:
    tenant_id, _ = backend_api.tenant()
    with backend_api.admin() as admin:
        made = admin.post(f"/v1/admin/tenants/{tenant_id}/keys").json()
    kept = backend_api.accounts.create_api_key(tenant_id, label="kept").plaintext
    routes = _tenant_routes(backend_api)
    assert ("GET", "/v1/sessions") in routes and ("POST", "/v1/sessions/s/flush") in routes
    assert len(routes) >= 20
    for api in (backend_api, replica):
        with httpx.Client(base_url=api.url, headers=_bearer(made["key"])) as client:
            assert client.get("/v1/sessions").status_code == 200  # both replicas know it

    # Revoked through the first replica; the very next request to either is refused.
    with backend_api.admin() as admin:
        answer = admin.post(f"/v1/admin/keys/{made['key_id']}/revoke")
    assert answer.status_code == 200 and answer.json()["revoked"] is True
    for api in (replica, backend_api):
        with (
            httpx.Client(base_url=api.url, headers=_bearer(made["key"])) as revoked,
            httpx.Client(base_url=api.url, headers=_bearer(kept)) as other,
        ):
            for method, path in routes:
                refused = revoked.request(method, path, json={})
                assert refused.status_code == 401, (api.url, method, path, refused.text)
                assert refused.headers["www-authenticate"] == "Bearer"
                # The tenant's other key still works (whatever the route then says).
                assert other.request(method, path, json={}).status_code != 401, (method, path)
    # Revoking again changes nothing.
    with replica.admin() as admin:
        again = admin.post(f"/v1/admin/keys/{made['key_id']}/revoke").json()
    assert again["revoked_at"] == answer.json()["revoked_at"]


def test_the_clients_admin_methods(backend_api: LiveApi) -> None:
    tenant_id, _ = backend_api.tenant()
    with OMClient(backend_api.url, admin_token=ADMIN_TOKEN) as admin:
        made = admin.create_key(tenant_id, label="script")
        assert [k.label for k in admin.list_keys(tenant_id).keys] == ["test", "script"]
        with OMClient(backend_api.url, made.key) as om:
            assert om.list_sessions().sessions == []
            revoked = admin.revoke_key(made.key_id)
            assert revoked.revoked and revoked.revoked_at is not None
            with pytest.raises(Unauthorized):
                om.list_sessions()
        with pytest.raises(NotFound):
            admin.list_keys("nobody")
    with OMClient(backend_api.url, "om_not_admin") as not_admin, pytest.raises(Unauthorized):
        not_admin.list_keys(tenant_id)


def test_a_cached_key_is_trusted_for_its_ttl_then_read_again(backend_api: LiveApi) -> None:
    """Another replica's cache (a clock stands in for time): a revoked key keeps working only
    until its entry expires; unknown and revoked keys are never cached."""
    tenant_id, _ = backend_api.tenant()
    made = backend_api.accounts.create_api_key(tenant_id, label="cached")
    now = [100.0]
    cache = KeyCache(backend_api.accounts, 1.0, clock=lambda: now[0])
    assert cache.resolve(made.plaintext) == (tenant_id, made.key_id)
    backend_api.accounts.revoke_key(made.key_id)  # elsewhere: this cache is not told
    assert cache.resolve(made.plaintext) == (tenant_id, made.key_id)
    now[0] += 1.0
    with pytest.raises(InvalidApiKeyError):
        cache.resolve(made.plaintext)
    with pytest.raises(InvalidApiKeyError):
        cache.resolve("om_unknown_key")
    # The replica that revokes a key forgets it at once.
    other = backend_api.accounts.create_api_key(tenant_id, label="other")
    assert cache.resolve(other.plaintext) == (tenant_id, other.key_id)
    backend_api.accounts.revoke_key(other.key_id)
    cache.forget_key(other.key_id)
    with pytest.raises(InvalidApiKeyError):
        cache.resolve(other.plaintext)
