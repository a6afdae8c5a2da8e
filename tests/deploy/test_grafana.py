"""deploy/grafana: the dashboard and the alert rules query only metrics the service exports, and
every panel's query is valid PromQL (checked by promtool when installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from prometheus_client.core import Metric

from om_api.server.metrics import ApiMetrics, TenantLoadCollector
from om_core.policy.fairness import TenantLoad
from om_workers.metrics import WorkerMetrics
from tests.deploy.topology import DEPLOY

DASHBOARD: Final = DEPLOY / "grafana" / "om-overview.json"
ALERTS: Final = DEPLOY / "prometheus" / "alerts.yml"
ACCOUNTING: Final = {"om_model_tokens_total"}
"""Series of the token accounting (per tenant, model and direction), which the dashboard's
token panels read; not exported by the metrics modules checked here."""
SCRAPE: Final = {"up"}
"""Series Prometheus writes itself for every target."""
_SUFFIXES: Final = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}
_NAME = re.compile(r"\b((?:om_|up\b)[a-z_]*)")


def _series(families: Iterator[Metric] | list[Metric]) -> set[str]:
    names = set()
    for family in families:
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(f"{family.name}{suffix}")
    return names


def _exported() -> set[str]:
    """Every series name the API and the workers export."""
    loads = TenantLoadCollector(lambda: (1, [TenantLoad("t", 1, 1, 1, 1)]), top_n=10)
    return (
        _series(list(ApiMetrics().registry.collect()))
        | _series(list(WorkerMetrics().registry.collect()))
        | _series(list(loads.collect()))
    )


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _panel_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _alert_exprs() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def _names_in(expr: str) -> set[str]:
    without_labels = re.sub(r"\{[^}]*\}", "", re.sub(r'"[^"]*"', '""', expr))
    return set(_NAME.findall(without_labels))


def test_dashboard_panels_are_unique_and_read_the_chosen_datasource() -> None:
    dashboard = _dashboard()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_dashboard_and_alerts_query_only_exported_metrics() -> None:
    exported = _exported()
    assert {"om_api_requests_total", "om_flush_backlog", "om_worker_lock_lost_total"} <= exported
    used_by_dashboard = set().union(*(_names_in(e) for e in _panel_exprs()))
    used_by_alerts = set().union(*(_names_in(e) for e in _alert_exprs()))
    assert used_by_dashboard - exported - SCRAPE - ACCOUNTING == set()
    assert used_by_alerts - exported - SCRAPE == set()
    # Every metric family the service exports has a panel.
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in exported}
    shown = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in used_by_dashboard}
    assert families - shown == set()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_every_panel_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses a rules file: each panel's query becomes a recording rule, with
    # Grafana's $__rate_interval replaced by a fixed range.
    rules = [
        {"record": f"om_dashboard:panel_{n}", "expr": expr.replace("$__rate_interval", "5m")}
        for n, expr in enumerate(_panel_exprs())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
