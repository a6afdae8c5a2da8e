"""The web console over HTTP (no browser): sign-in cookie and form tokens, tenancy by URL,
redaction on every page, the pages' content, actions behind confirmation, caps. One live API
per backend for the module (SQLite, and PostgreSQL when configured)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.api.seed import OBS_ID, REF_ID, message, seeded_session
from tests.api.server import ADMIN_TOKEN, LiveApi

FORM_TOKEN = re.compile(r'name="form_token" value="([^"]+)"')


@dataclass
class Tenant:
    id: str
    key: str
    api: httpx.Client


def _tenant(live: LiveApi) -> Tenant:
    tenant_id, api = live.tenant()
    key = api.headers["Authorization"].removeprefix("Bearer ")
    return Tenant(tenant_id, key, api)


def sign_in(live: LiveApi, credential: str) -> httpx.Client:
    """A console client signed in with ``credential`` (cookies kept, redirects not followed)."""
    browser = httpx.Client(base_url=live.url, timeout=30)
    form = browser.get("/console/login")
    token = FORM_TOKEN.search(form.text)
    assert token is not None
    answer = browser.post(
        "/console/login", data={"credential": credential, "form_token": token.group(1)}
    )
    assert answer.status_code == 303, answer.text
    return browser


def _form_token(page: httpx.Response) -> str:
    found = FORM_TOKEN.search(page.text)
    assert found is not None, page.text
    return found.group(1)


@dataclass
class World:
    live: LiveApi
    owner: Tenant
    other: Tenant
    session: str
    prefix: str


@pytest.fixture(scope="module")
def world(backend_api: LiveApi) -> Iterator[World]:
    owner, other = _tenant(backend_api), _tenant(backend_api)
    prefix = f"c{uuid.uuid4().hex[:6]}-"
    session = f"console-{prefix}"
    seeded_session(owner.api, session, prefix)
    # A secret (the owner's own API key, which the service knows) planted in a message and in
    # the metadata of another session.
    answer = owner.api.post(
        f"/v1/sessions/{session}/entries",
        json={"entries": [message(f"{prefix}secret", "user", f"my key is {owner.key} ok")]},
    )
    assert answer.status_code == 201, answer.text
    created = owner.api.post(
        "/v1/sessions", json={"id": f"{session}-meta", "metadata": {"team": "blue", "k": owner.key}}
    )
    assert created.status_code == 201, created.text
    yield World(backend_api, owner, other, session, prefix)
    for tenant in (owner, other):
        tenant.api.close()


def test_sign_in_sets_an_opaque_httponly_strict_cookie_and_never_the_key(world: World) -> None:
    browser = httpx.Client(base_url=world.live.url, timeout=30)
    form = browser.get("/console/login")
    answer = browser.post(
        "/console/login",
        data={"credential": world.owner.key, "form_token": _form_token(form)},
    )
    assert answer.status_code == 303
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("om_console="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert world.owner.key not in cookie
    assert answer.headers["location"] == "/console/"
    home = browser.get("/console/")
    assert home.headers["location"] == f"/console/tenants/{world.owner.id}/sessions"


def test_a_wrong_credential_is_a_401_form_that_does_not_echo_it(world: World) -> None:
    browser = httpx.Client(base_url=world.live.url, timeout=30)
    form = browser.get("/console/login")
    wrong = "om_notakey_" + "x" * 30
    answer = browser.post(
        "/console/login", data={"credential": wrong, "form_token": _form_token(form)}
    )
    assert answer.status_code == 401
    assert wrong not in answer.text
    assert "om_console=" not in "".join(answer.headers.get_list("set-cookie")).replace(
        "om_console_login", ""
    )


def test_sign_in_without_the_forms_token_is_refused(world: World) -> None:
    browser = httpx.Client(base_url=world.live.url, timeout=30)
    answer = browser.post("/console/login", data={"credential": world.owner.key})
    assert answer.status_code == 403


def test_pages_without_a_sign_in_go_to_the_sign_in_page(world: World) -> None:
    anonymous = world.live.anonymous()
    answer = anonymous.get(f"/console/tenants/{world.owner.id}/sessions/{world.session}")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"
    anonymous.cookies.set("om_console", "forged")
    forged = anonymous.get(f"/console/tenants/{world.owner.id}/sessions")
    assert forged.status_code == 303


def test_session_page_shows_context_memory_links_and_jobs(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    page = browser.get(f"/console/tenants/{world.owner.id}/sessions/{world.session}")
    assert page.status_code == 200, page.text
    context = world.owner.api.get(f"/v1/sessions/{world.session}/context").json()
    for block in context["blocks"]:
        # The blocks exactly as GET context answers them (HTML-escaped on the page).
        escaped = block["text"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert escaped.replace('"', "&#34;").replace("'", "&#39;") in page.text
    base = f"/console/tenants/{world.owner.id}/sessions/{world.session}"
    assert f'href="{base}/memory/{OBS_ID}"' in page.text
    assert f'href="{base}/memory/{REF_ID}"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_the_session_page_never_shows_a_stale_context(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    prefix, session = f"{world.prefix}st-", f"stale-{world.prefix}"
    seeded_session(world.owner.api, session, prefix)
    path = f"/console/tenants/{world.owner.id}/sessions/{session}"
    assert "fresh words" not in browser.get(path).text
    answer = world.owner.api.post(
        f"/v1/sessions/{session}/entries",
        json={"entries": [message(f"{prefix}fresh", "user", "fresh words arrived")]},
    )
    assert answer.status_code == 201
    assert "fresh words arrived" in browser.get(path).text
    assert f"/memory/{OBS_ID}" in browser.get(path).text
    revoked = world.owner.api.post(
        f"/v1/sessions/{session}/revocations", json={"entry_ids": [f"{prefix}0"]}
    )
    assert revoked.status_code == 200
    page = browser.get(path).text
    assert f"/memory/{OBS_ID}" not in page and f"/memory/{REF_ID}" not in page


def test_recall_links_each_source_to_its_place_in_the_branch(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    base = f"/console/tenants/{world.owner.id}/sessions/{world.session}"
    recall = browser.get(f"{base}/memory/{REF_ID}")
    assert recall.status_code == 200
    first, second = f"{world.prefix}0", f"{world.prefix}1"
    assert f'href="{base}/entries?at={first}#e-{first}"' in recall.text
    link = f"{base}/entries?after={first}&amp;at={second}#e-{second}"
    assert link in recall.text
    branch = browser.get(f"{base}/entries", params={"after": first, "at": second})
    assert f'<tr id="e-{second}" class="target"' in branch.text


def test_the_branch_is_paged(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    tenant, session = world.owner.id, f"paged-{world.prefix}"
    world.owner.api.post("/v1/sessions", json={"id": session})
    entries = [message(f"{world.prefix}p{i}", "user", f"line {i}") for i in range(60)]
    world.owner.api.post(f"/v1/sessions/{session}/entries", json={"entries": entries})
    first = browser.get(f"/console/tenants/{tenant}/sessions/{session}/entries")
    assert f"{world.prefix}p49" in first.text and f"{world.prefix}p50<" not in first.text
    more = re.search(r'rel="next" href="([^"]+)"', first.text)
    assert more is not None
    second = browser.get(more.group(1).replace("&amp;", "&"))
    assert f"{world.prefix}p59" in second.text and f"{world.prefix}p0<" not in second.text
    bad = browser.get(
        f"/console/tenants/{tenant}/sessions/{session}/entries", params={"after": "nope"}
    )
    assert bad.status_code == 422


def test_another_tenants_session_is_a_404_also_by_url(world: World) -> None:
    intruder = sign_in(world.live, world.other.key)
    owner = world.owner.id
    for path in (
        f"/console/tenants/{owner}/sessions",
        f"/console/tenants/{owner}/sessions/{world.session}",
        f"/console/tenants/{owner}/sessions/{world.session}/entries",
        f"/console/tenants/{owner}/sessions/{world.session}/memory/{OBS_ID}",
        f"/console/tenants/{owner}/sessions/{world.session}/flush",
        "/console/admin",
    ):
        answer = intruder.get(path)
        assert answer.status_code == 404, path
        assert world.prefix not in answer.text and "blue-green" not in answer.text
    # Its own tenant in the URL: the session is simply not there.
    own = intruder.get(f"/console/tenants/{world.other.id}/sessions/{world.session}")
    assert own.status_code == 404 and "blue-green" not in own.text
    token = _form_token(intruder.get(f"/console/tenants/{world.other.id}/sessions"))
    for action in ("flush", "erase", "export"):
        answer = intruder.post(
            f"/console/tenants/{owner}/sessions/{world.session}/{action}",
            data={"form_token": token},
        )
        assert answer.status_code == 404, action
    assert world.owner.api.get(f"/v1/sessions/{world.session}").status_code == 200


def test_a_secret_in_a_message_or_metadata_never_reaches_a_page(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    tenant = world.owner.id
    pages = [
        f"/console/tenants/{tenant}/sessions",
        f"/console/tenants/{tenant}/sessions?q=blue",
        f"/console/tenants/{tenant}/sessions/{world.session}",
        f"/console/tenants/{tenant}/sessions/{world.session}/entries",
        f"/console/tenants/{tenant}/sessions/{world.session}-meta",
    ]
    for path in pages:
        answer = browser.get(path)
        assert answer.status_code == 200, path
        assert world.owner.key not in answer.text, path
    branch = browser.get(f"/console/tenants/{tenant}/sessions/{world.session}/entries")
    assert "my key is [REDACTED] ok" in branch.text


def test_search_finds_sessions_by_id_or_metadata(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    tenant = world.owner.id
    by_meta = browser.get(f"/console/tenants/{tenant}/sessions", params={"q": "BLUE"})
    assert f"{world.session}-meta" in by_meta.text
    assert f'sessions/{world.session}"' not in by_meta.text
    by_id = browser.get(f"/console/tenants/{tenant}/sessions", params={"q": world.prefix})
    assert f'sessions/{world.session}"' in by_id.text
    # Searching for a secret finds nothing: metadata is matched after redaction.
    secret = browser.get(f"/console/tenants/{tenant}/sessions", params={"q": world.owner.key})
    assert f"{world.session}-meta" not in secret.text and world.owner.key not in secret.text
    too_long = browser.get(f"/console/tenants/{tenant}/sessions", params={"q": "x" * 201})
    assert too_long.status_code == 422


def test_actions_need_the_forms_token(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    base = f"/console/tenants/{world.owner.id}/sessions/{world.session}"
    for action in ("flush", "erase", "export"):
        assert browser.post(f"{base}/{action}", data={"form_token": "forged"}).status_code == 403
        assert browser.post(f"{base}/{action}").status_code == 403
    huge = browser.post(
        f"{base}/flush",
        content=b"form_token=" + b"x" * 5000,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert huge.status_code == 403
    assert world.owner.api.get(f"/v1/sessions/{world.session}").status_code == 200


def test_flush_from_the_console_makes_a_job_its_page_shows(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    base = f"/console/tenants/{world.owner.id}/sessions/{world.session}"
    confirm = browser.get(f"{base}/flush")
    assert confirm.status_code == 200
    answer = browser.post(f"{base}/flush", data={"form_token": _form_token(confirm)})
    assert answer.status_code == 303
    job_id = answer.headers["location"].rsplit("/", 1)[1]
    assert any(call[2] == job_id for call in world.live.published.calls)
    job = browser.get(answer.headers["location"])
    assert job.status_code == 200 and "queued" in job.text
    assert world.owner.api.get(f"/v1/jobs/{job_id}").json()["state"] == "queued"


def test_export_downloads_redacted_ndjson(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    base = f"/console/tenants/{world.owner.id}/sessions/{world.session}"
    token = _form_token(browser.get(f"{base}/export"))
    answer = browser.post(f"{base}/export", data={"form_token": token})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    assert "attachment" in answer.headers["content-disposition"]
    assert world.owner.key not in answer.text and "[REDACTED]" in answer.text


def test_erase_from_the_console_hides_the_session_at_once(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    session = f"doomed-{world.prefix}"
    assert world.owner.api.post("/v1/sessions", json={"id": session}).status_code == 201
    base = f"/console/tenants/{world.owner.id}/sessions/{session}"
    token = _form_token(browser.get(f"{base}/erase"))
    answer = browser.post(f"{base}/erase", data={"form_token": token})
    assert answer.status_code == 303
    assert browser.get(answer.headers["location"]).status_code == 200
    assert browser.get(base).status_code == 404
    assert world.owner.api.get(f"/v1/sessions/{session}").status_code == 404


def test_admin_sees_tenants_limits_queue_and_any_tenants_session(world: World) -> None:
    admin = sign_in(world.live, ADMIN_TOKEN)
    assert admin.get("/console/").headers["location"] == "/console/admin"
    overview = admin.get("/console/admin")
    assert overview.status_code == 200
    assert world.owner.id in overview.text and world.other.id in overview.text
    assert "Fair queue" in overview.text
    tenant = admin.get(f"/console/admin/tenants/{world.owner.id}")
    assert tenant.status_code == 200 and "appends" in tenant.text
    assert world.owner.key not in tenant.text
    page = admin.get(f"/console/tenants/{world.owner.id}/sessions/{world.session}")
    assert page.status_code == 200 and world.owner.key not in page.text
    assert ADMIN_TOKEN not in page.text


def test_a_revoked_key_ends_its_console_sign_in(world: World) -> None:
    tenant = _tenant(world.live)
    browser = sign_in(world.live, tenant.key)
    sessions = f"/console/tenants/{tenant.id}/sessions"
    assert browser.get(sessions).status_code == 200
    key_id = world.live.accounts.list_api_keys(tenant.id)[0].key_id
    with world.live.admin() as admin:
        assert admin.post(f"/v1/admin/keys/{key_id}/revoke").status_code == 200
    answer = browser.get(sessions)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/login"


def test_sign_out_ends_the_sign_in(world: World) -> None:
    browser = sign_in(world.live, world.owner.key)
    sessions = f"/console/tenants/{world.owner.id}/sessions"
    token = _form_token(browser.get(sessions))
    old = browser.cookies.get("om_console")
    assert browser.post("/console/logout", data={"form_token": token}).status_code == 303
    replay = httpx.Client(base_url=world.live.url, timeout=30)
    replay.cookies.set("om_console", old or "")
    assert replay.get(sessions).status_code == 303
