"""The webhook admin routes over HTTP, on each backend: register (the secret shown once),
list, remove, deliveries with failures, redeliver; URLs to private, loopback and link-local
addresses refused with a reason (no SSRF); another tenant's endpoint or delivery a 404."""

from __future__ import annotations

import uuid

import pytest

from om_api.client import InvalidRequest, NotFound, OMClient
from om_core.policy.webhooks import secret_from_bytes, secret_key
from om_workers.jobs.webhook_endpoints import MAX_ENDPOINTS_PER_TENANT
from tests.api.server import ADMIN_TOKEN, LiveApi

PUBLIC_URL = "https://93.184.216.34/hooks/om"  # an address literal: no DNS needed


def _tenant(api: LiveApi) -> str:
    tenant_id, client = api.tenant()
    client.close()
    return tenant_id


def _hooks(tenant_id: str) -> str:
    return f"/v1/admin/tenants/{tenant_id}/webhooks"


def test_the_generated_secret_is_shown_once_and_never_listed(backend_api: LiveApi) -> None:
    tenant_id = _tenant(backend_api)
    with backend_api.admin() as admin:
        created = admin.post(_hooks(tenant_id), json={"url": PUBLIC_URL})
        assert created.status_code == 201, created.text
        body = created.json()
        secret = body["secret"]
        assert secret.startswith("whsec_") and len(secret_key(secret)) == 32
        assert body["event_types"] == ["flush.succeeded", "flush.failed", "session.erased"]
        listed = admin.get(_hooks(tenant_id))
        assert listed.status_code == 200
        assert secret not in listed.text
        (endpoint,) = listed.json()["endpoints"]
        assert (endpoint["id"], endpoint["secret"]) == (body["id"], None)


def test_a_given_secret_and_event_types_are_kept(backend_api: LiveApi) -> None:
    tenant_id = _tenant(backend_api)
    secret = secret_from_bytes(uuid.uuid4().bytes * 2)
    with backend_api.admin() as admin:
        created = admin.post(
            _hooks(tenant_id),
            json={"url": PUBLIC_URL, "secret": secret, "event_types": ["flush.failed"]},
        )
    assert created.status_code == 201, created.text
    assert (created.json()["secret"], created.json()["event_types"]) == (secret, ["flush.failed"])


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:9000/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://10.0.0.7/hook", "private"),
        ("http://192.168.1.20/hook", "private"),
        ("ftp://93.184.216.34/hook", "http:// or https://"),
        ("https://user:pw@93.184.216.34/hook", "no user or password"),
        ("not a url", "http:// or https://"),
    ],
)
def test_urls_the_service_will_not_call_are_a_422_saying_why(
    api: LiveApi, url: str, reason: str
) -> None:
    tenant_id = _tenant(api)
    with api.admin() as admin:
        answer = admin.post(_hooks(tenant_id), json={"url": url})
        assert answer.status_code == 422, answer.text
        assert reason in answer.json()["detail"]
        assert admin.get(_hooks(tenant_id)).json()["endpoints"] == []


@pytest.mark.parametrize(
    "secret",
    ["whsec_short", "sk-not-a-webhook-secret-0123456789abcdef", "whsec_" + "A" * 100],
)
def test_a_malformed_secret_is_a_422_that_does_not_echo_it(api: LiveApi, secret: str) -> None:
    tenant_id = _tenant(api)
    with api.admin() as admin:
        answer = admin.post(_hooks(tenant_id), json={"url": PUBLIC_URL, "secret": secret})
    assert answer.status_code == 422
    assert secret not in answer.text


def test_admin_token_and_tenant_are_required(api: LiveApi) -> None:
    tenant_id = _tenant(api)
    with api.anonymous() as anonymous:
        assert anonymous.get(_hooks(tenant_id)).status_code == 401
    _, client = api.tenant()
    with client:  # a tenant's own API key is no admin token
        assert client.get(_hooks(tenant_id)).status_code == 401
    with api.admin() as admin:
        assert admin.get(_hooks("no-such-tenant")).status_code == 404
        assert admin.post(_hooks("no-such-tenant"), json={"url": PUBLIC_URL}).status_code == 404
        assert admin.get(f"{_hooks('no-such-tenant')}/deliveries").status_code == 404


def test_a_tenant_has_at_most_the_cap_of_endpoints(api: LiveApi) -> None:
    tenant_id = _tenant(api)
    with api.admin() as admin:
        for n in range(MAX_ENDPOINTS_PER_TENANT):
            created = admin.post(_hooks(tenant_id), json={"url": f"{PUBLIC_URL}/{n}"})
            assert created.status_code == 201, created.text
        over = admin.post(_hooks(tenant_id), json={"url": PUBLIC_URL})
        assert over.status_code == 422
        assert str(MAX_ENDPOINTS_PER_TENANT) in over.json()["detail"]
        assert len(admin.get(_hooks(tenant_id)).json()["endpoints"]) == MAX_ENDPOINTS_PER_TENANT


def test_deliveries_are_listed_redelivered_and_kept_from_other_tenants(
    backend_api: LiveApi,
) -> None:
    tenant_id, client = backend_api.tenant()
    rival = _tenant(backend_api)
    with client:
        assert client.post("/v1/sessions", json={"id": "s1"}).status_code == 201
    with backend_api.admin() as admin:
        endpoint = admin.post(_hooks(tenant_id), json={"url": PUBLIC_URL}).json()
        store = backend_api.store
        job = store.create_job(tenant_id, "s1")
        store.start_job(tenant_id, job.id)
        store.finish_job(tenant_id, job.id, "failed", error="boom")
        (delivery_id,) = store.webhooks.pending_of(job.id)
        claimed = store.webhooks.claim(delivery_id, lease_s=60)
        assert claimed is not None
        store.webhooks.record(
            delivery_id, 1, status=None, error="ConnectError", retry_in_s=None, delivered=False
        )
        failing = admin.get(f"{_hooks(tenant_id)}/deliveries", params={"failing": "true"})
        assert failing.status_code == 200
        (row,) = failing.json()["deliveries"]
        assert (row["id"], row["event_type"], row["state"], row["attempts"]) == (
            delivery_id,
            "flush.failed",
            "failed",
            1,
        )
        assert row["endpoint_id"] == endpoint["id"] and row["last_error"] == "ConnectError"
        assert "payload" not in row and endpoint["secret"] not in failing.text
        assert admin.get(f"{_hooks(rival)}/deliveries").json()["deliveries"] == []
        rival_try = admin.post(f"{_hooks(rival)}/deliveries/{delivery_id}/redeliver")
        assert rival_try.status_code == 404
        again = admin.post(f"{_hooks(tenant_id)}/deliveries/{delivery_id}/redeliver")
        assert again.status_code == 202, again.text
        assert (again.json()["state"], again.json()["attempts"]) == ("pending", 0)
        missing = admin.post(f"{_hooks(tenant_id)}/deliveries/msg_nothing/redeliver")
        assert missing.status_code == 404
        assert admin.delete(f"{_hooks(rival)}/{endpoint['id']}").status_code == 404
        assert admin.delete(f"{_hooks(tenant_id)}/{endpoint['id']}").status_code == 204
        assert admin.delete(f"{_hooks(tenant_id)}/{endpoint['id']}").status_code == 404
        gone = admin.get(f"{_hooks(tenant_id)}/deliveries").json()["deliveries"]
        assert gone == []


def test_the_deliveries_limit_is_bounded(api: LiveApi) -> None:
    tenant_id = _tenant(api)
    with api.admin() as admin:
        url = f"{_hooks(tenant_id)}/deliveries"
        assert admin.get(url, params={"limit": 1000}).status_code == 200
        assert admin.get(url, params={"limit": 1001}).status_code == 422
        assert admin.get(url, params={"limit": 0}).status_code == 422


def test_an_overlong_url_is_a_422(api: LiveApi) -> None:
    tenant_id = _tenant(api)
    with api.admin() as admin:
        long_url = PUBLIC_URL + "/" + "a" * (2048 - len(PUBLIC_URL) - 1)
        assert len(long_url) == 2048
        assert admin.post(_hooks(tenant_id), json={"url": long_url}).status_code == 201
        answer = admin.post(_hooks(tenant_id), json={"url": long_url + "a"})
        assert answer.status_code == 422


def test_the_client_registers_lists_and_removes_webhooks(api: LiveApi) -> None:
    tenant_id = _tenant(api)
    with OMClient(api.url, admin_token=ADMIN_TOKEN) as om:
        created = om.add_webhook(tenant_id, PUBLIC_URL, event_types=["session.erased"])
        assert created.secret is not None and created.event_types == ["session.erased"]
        (listed,) = om.list_webhooks(tenant_id).endpoints
        assert (listed.id, listed.secret) == (created.id, None)
        assert om.webhook_deliveries(tenant_id, failing=True).deliveries == []
        with pytest.raises(InvalidRequest, match="loopback"):
            om.add_webhook(tenant_id, "http://127.0.0.1/hook")
        with pytest.raises(NotFound):
            om.redeliver_webhook(tenant_id, "msg_missing")
        om.remove_webhook(tenant_id, created.id)
        assert om.list_webhooks(tenant_id).endpoints == []
        with pytest.raises(NotFound):
            om.remove_webhook(tenant_id, created.id)
