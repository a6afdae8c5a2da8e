"""``om tenants limits``: shows a tenant's per-key rate limits, sets one class's values (the
other value of that class keeps its current one), clears them; bad values exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from om_api.cli import app
from om_core.policy.rate_limit import RateLimit
from om_workers.config import get_settings
from om_workers.store import AccountStore, upgrade


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tenants", "limits", *args], env={"COLUMNS": "120"})
    return result.exit_code, result.output


def test_show_set_and_clear(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(url)
    store = AccountStore.from_url(url)
    try:
        store.create_tenant("acme")
        defaults = get_settings()
        code, out = _run("acme", "--database-url", url)
        assert code == 0, out
        assert "appends" in out and "default" in out and "override" not in out

        code, out = _run("acme", "--appends-per-s", "3", "--json", "--database-url", url)
        assert code == 0, out
        answer = json.loads(out)
        # The burst not given keeps its current value (the default).
        assert answer["overrides"] == {
            "appends": {"rate_per_s": 3.0, "burst": defaults.rate_limits.appends_burst}
        }
        assert answer["effective"]["reads"]["burst"] == defaults.rate_limits.reads_burst
        code, out = _run("acme", "--reads-burst", "7", "--database-url", url)
        assert code == 0 and "override" in out, out
        assert store.get_rate_limits("acme") == {
            "appends": RateLimit(3.0, defaults.rate_limits.appends_burst),
            "reads": RateLimit(defaults.rate_limits.reads_per_s, 7),
        }

        code, out = _run("acme", "--flushes-burst", "0", "--database-url", url)
        assert code == 2 and "--flushes" in out, out
        code, out = _run("nobody", "--database-url", url)
        assert code == 1 and "nobody" in out, out

        code, out = _run("acme", "--clear", "--database-url", url)
        assert code == 0, out
        assert store.get_rate_limits("acme") == {}
    finally:
        store.close()
