"""The web console in a real browser (Debian's chromium, driven by Playwright) against the
real stack: ``om api`` and ``om worker`` processes, a private Redis, SQLite and the offline
extractive provider. The same tests save the screenshots docs/console.md shows."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from om_api.cli.stack import Stack, StackConfig, StackInfo
from om_api.client import OMClient
from om_api.schemas import MessageWire
from tests.e2e.support import LOW

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "console"
ADMIN = "console-admin-token-0123456789abcdef"
SECRET = "sk-planted-" + "9f3c2e7a51d04b68"
"""The provider's API key: a secret the service knows and redacts everywhere."""
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SESSION = "support-4711"
JOB_WAIT_MS = 120_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    root = tmp_path_factory.mktemp("console")
    config = StackConfig(
        database_url=f"sqlite:///{root / 'om.db'}",
        api_port=0,
        flower_port=0,
        beat=False,
        flower=False,
        env={
            "OM_SETTINGS_JSON": json.dumps(LOW),
            "OM_PROVIDER": "extractive",
            "OM_PROVIDER_API_KEY": SECRET,
            "OM_ADMIN_TOKEN": ADMIN,
        },
        log_dir=root / "logs",
    )
    with Stack(config) as running:
        yield running.info


def _say(om: OMClient, session: str, turns: range) -> None:
    for n in turns:
        om.append(
            session,
            [
                MessageWire(role="user", content=f"Deploy build {n} to staging, please."),
                MessageWire(role="assistant", content=f"Build {n} is live on staging."),
            ],
        )


@pytest.fixture(scope="module")
def seeded(stack: StackInfo) -> dict[str, str]:
    """A flushed session with a planted secret (tenant of the stack's key), and a second
    tenant with a key and a session of its own."""
    with OMClient(stack.api_url, stack.api_key) as om:
        om.create_session(SESSION, metadata={"customer": "acme", "channel": "chat"})
        om.append(
            SESSION,
            [
                MessageWire(role="user", content="Our staging db is pg-staging-7, port 6432."),
                MessageWire(role="user", content=f"The provider key is {SECRET}, keep it."),
            ],
        )
        _say(om, SESSION, range(101, 131))
        job = om.wait_for_job(om.flush(SESSION, force=True).job_id, timeout_s=120)
        assert job.state == "succeeded", job
    other = f"t-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {ADMIN}"}) as a:
        assert a.post("/v1/admin/tenants", json={"id": other}).status_code == 201
        key = a.post(f"/v1/admin/tenants/{other}/keys", json={"label": "other"}).json()["key"]
    with OMClient(stack.api_url, key) as om:
        om.create_session("their-session")
    return {"other_key": key, "other": other}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def _page(browser: object, stack: StackInfo, credential: str) -> object:
    """A fresh browser context in New York time, signed in with ``credential``."""
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1280, "height": 860}, timezone_id="America/New_York"
    )
    page = context.new_page()
    page.goto(f"{stack.api_url}/console/")
    page.fill("#credential", credential)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return page


def _shot(page: object, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)  # type: ignore[attr-defined]


VISITED: list[str] = []
"""Every page's HTML the tests saw, checked for the planted secret at the end."""


def _seen(page: object) -> str:
    html: str = page.content()  # type: ignore[attr-defined]
    VISITED.append(html)
    return html


def test_sign_in_open_a_session_and_follow_an_observation_to_its_source(
    stack: StackInfo, seeded: dict[str, str], browser: object
) -> None:
    context = browser.new_context(  # type: ignore[attr-defined]
        viewport={"width": 1280, "height": 860}, timezone_id="America/New_York"
    )
    page = context.new_page()
    page.goto(f"{stack.api_url}/console/")
    _shot(page, "login")
    # By keyboard alone: the form's field has the focus, Enter signs in.
    assert page.evaluate("document.activeElement.id") == "credential"
    page.keyboard.type(stack.api_key)
    page.keyboard.press("Enter")
    page.wait_for_url("**/sessions")
    _seen(page)
    _shot(page, "sessions")
    page.click(f"text={SESSION}")
    page.wait_for_selector("#context")
    html = _seen(page)
    assert "observational-memory" in html and "recent-messages" in html
    # Times are rewritten to the viewer's zone (New York), the UTC text kept as the title.
    first_time = page.locator("time").first
    assert "UTC" not in first_time.inner_text()
    assert "UTC" in (first_time.get_attribute("title") or "")
    _shot(page, "session")
    page.locator("a[data-kind=observation]").last.click()
    page.wait_for_selector("a.source")
    _seen(page)
    _shot(page, "recall")
    source_text = page.locator("table.entries td pre").first.inner_text()
    page.locator("a.source").first.click()
    target = page.locator("tr.target")
    target.wait_for()
    assert source_text in target.inner_text()
    _seen(page)
    _shot(page, "entries")


def test_page_through_the_raw_branch(
    stack: StackInfo, seeded: dict[str, str], browser: object
) -> None:
    page = _page(browser, stack, stack.api_key)
    page.goto(f"{stack.api_url}/console/tenants/{stack.tenant_id}/sessions/{SESSION}/entries")
    first_ids = page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.id)")
    _seen(page)
    page.click("a[rel=next] >> nth=0")
    page.wait_for_load_state()
    second_ids = page.locator("tbody tr").evaluate_all("rows => rows.map(r => r.id)")
    _seen(page)
    assert first_ids and second_ids and not set(first_ids) & set(second_ids)
    assert "First page" in page.content()


def test_request_a_flush_and_see_the_job_finish(
    stack: StackInfo, seeded: dict[str, str], browser: object
) -> None:
    with OMClient(stack.api_url, stack.api_key) as om:
        _say(om, SESSION, range(131, 134))
    page = _page(browser, stack, stack.api_key)
    page.goto(f"{stack.api_url}/console/tenants/{stack.tenant_id}/sessions/{SESSION}")
    page.click("text=Request a flush…")
    page.click("button:has-text('Yes, flush')")
    page.wait_for_selector("#job-state")
    assert "/jobs/" in page.url
    # The page reloads itself until the job is final; a bounded wait, not a timing claim.
    page.wait_for_selector("#job-state.state-succeeded", timeout=JOB_WAIT_MS)
    _seen(page)
    _shot(page, "job")


def test_a_tenant_key_cannot_open_another_tenants_session(
    stack: StackInfo, seeded: dict[str, str], browser: object
) -> None:
    page = _page(browser, stack, seeded["other_key"])
    html = _seen(page)
    assert "their-session" in html and SESSION not in html
    for path in (
        f"/console/tenants/{stack.tenant_id}/sessions/{SESSION}",
        f"/console/tenants/{stack.tenant_id}/sessions",
        f"/console/tenants/{seeded['other']}/sessions/{SESSION}",
    ):
        answer = page.goto(f"{stack.api_url}{path}")
        assert answer is not None and answer.status == 404, path
        assert "Deploy build" not in _seen(page)


def test_admin_pages_and_no_page_ever_shows_the_planted_secret(
    stack: StackInfo, seeded: dict[str, str], browser: object
) -> None:
    page = _page(browser, stack, ADMIN)
    assert page.url.endswith("/console/admin")
    _seen(page)
    _shot(page, "admin")
    page.click(f"text={stack.tenant_id} >> nth=0")
    _seen(page)
    base = f"{stack.api_url}/console/tenants/{stack.tenant_id}/sessions/{SESSION}"
    page.goto(base)
    _seen(page)
    memory_links = page.locator("a[data-kind]").evaluate_all("links => links.map(a => a.href)")
    for link in memory_links[:20]:
        page.goto(link)
        _seen(page)
    page.goto(f"{base}/entries")
    while True:
        _seen(page)
        more = page.locator("a[rel=next]")
        if more.count() == 0:
            break
        more.first.click()
        page.wait_for_load_state()
    assert any("[REDACTED]" in h for h in VISITED)
    leaked = [h for h in VISITED if SECRET in h or ADMIN in h or stack.api_key in h]
    assert leaked == []
