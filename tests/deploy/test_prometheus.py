"""deploy/prometheus: the alert rules pass ``promtool check rules`` and their unit tests, the
scrape configs point where compose and Kubernetes serve metrics (with the metrics token the API
demands), and a real Prometheus on that configuration scrapes a live API and a worker."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import redis
import yaml

from om_workers import metrics as worker_metrics
from om_workers.config import Settings
from om_workers.coordination.connection import connect
from om_workers.coordination.embedded import EmbeddedRedis, free_port
from om_workers.store import SqlStore, upgrade
from tests.api.server import ADMIN_TOKEN, Published, serve
from tests.deploy.topology import DEPLOY, compose_services, k8s_docs, parse_om, pod_spec

PROMETHEUS_DIR: Final = DEPLOY / "prometheus"
PROMTOOL: Final = shutil.which("promtool")
PROMETHEUS: Final = shutil.which("prometheus")
SCRAPE_TOKEN: Final = "scrape-token-for-the-prometheus-test"
UP_WAIT_S: Final = 120.0
"""Generous: the bound on a wait that ends as soon as both targets are up."""

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)"
)


def _yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _jobs(path: Path) -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in _yaml(path)["scrape_configs"]}


@needs_promtool
def test_alert_rules_check_and_their_unit_tests_pass() -> None:
    assert PROMTOOL is not None
    for args in (("check", "rules", "alerts.yml"), ("test", "rules", "alerts.test.yml")):
        done = subprocess.run(
            [PROMTOOL, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    groups = _yaml(PROMETHEUS_DIR / "alerts.yml")["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    tested = {
        case["alertname"]
        for test in _yaml(PROMETHEUS_DIR / "alerts.test.yml")["tests"]
        for case in test["alert_rule_test"]
    }
    assert alerts == tested  # every rule has a unit test


def test_compose_prometheus_scrapes_the_api_with_the_token_it_demands() -> None:
    services = compose_services()
    api, worker = services["api"], services["worker"]
    overlay = _yaml(PROMETHEUS_DIR / "compose.yaml")
    prometheus = overlay["services"]["prometheus"]
    jobs = _jobs(PROMETHEUS_DIR / "prometheus.yml")
    # The API: its service name and the port its command listens on, with the token file.
    port = parse_om(api.command).params["port"]
    assert jobs["om-api"]["static_configs"] == [{"targets": [f"api:{port}"]}]
    assert jobs["om-api"]["metrics_path"] == "/metrics"
    (secret,) = prometheus["secrets"]
    assert overlay["secrets"][secret["source"]] == {"environment": "OM_METRICS_TOKEN"}
    assert jobs["om-api"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": f"/run/secrets/{secret['target']}",
    }
    assert "OM_METRICS_TOKEN" in api.environment
    # Every worker replica, on the port its settings serve metrics on.
    (dns,) = jobs["om-worker"]["dns_sd_configs"]
    assert dns["names"] == ["worker"] and dns["type"] == "A"
    assert dns["port"] == int(worker.environment["OM_WORKER_METRICS_PORT"])
    assert worker.environment["OM_WORKER_METRICS_HOST"] == "0.0.0.0"
    # The rule files it loads are mounted beside its configuration.
    mounted = {v.split(":")[1] for v in prometheus["volumes"] if v.startswith("./")}
    for rule_file in _yaml(PROMETHEUS_DIR / "prometheus.yml")["rule_files"]:
        assert f"/etc/prometheus/{rule_file}" in mounted
        assert (PROMETHEUS_DIR / rule_file).is_file()


def _container_port(component: str, port_name: str) -> dict[str, Any]:
    for _, doc in k8s_docs():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == f"om-{component}":
            for container in pod_spec(doc)["containers"]:
                for port in container.get("ports", []):
                    if port["name"] == port_name:
                        return dict(port)
    raise AssertionError(f"no port {port_name} on om-{component}")


def test_kubernetes_scrape_jobs_keep_the_pods_and_ports_the_manifests_declare() -> None:
    jobs = _jobs(PROMETHEUS_DIR / "kubernetes.yaml")
    targets = (("om-api", "api", "http"), ("om-worker", "worker", "metrics"))
    for job, component, port_name in targets:
        keeps = {
            tuple(rule["source_labels"]): rule["regex"]
            for rule in jobs[job]["relabel_configs"]
            if rule.get("action") == "keep"
        }
        assert keeps[("__meta_kubernetes_pod_label_app_kubernetes_io_component",)] == component
        assert keeps[("__meta_kubernetes_pod_container_port_name",)] == port_name
        _container_port(component, port_name)
    assert jobs["om-api"]["authorization"]["credentials_file"].endswith("/om-metrics-scrape/token")
    assert "authorization" not in jobs["om-worker"]
    template = (DEPLOY / "k8s" / "secret.template.yaml").read_text(encoding="utf-8")
    secrets = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(template)}
    assert "token" in secrets["om-metrics-scrape"]["stringData"]
    assert "OM_METRICS_TOKEN" in secrets["om-secrets"]["stringData"]
    # Annotation-driven scraping would send no token: the API's pods opt out of it.
    for _, doc in k8s_docs():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "om-api":
            annotations = doc["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "false"


@pytest.fixture
def live_targets(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A live API holding :data:`SCRAPE_TOKEN` and this process's worker metrics endpoint:
    their ``host:port`` addresses."""
    database_url = f"sqlite:///{tmp_path / 'om.db'}"
    upgrade(database_url)
    store = SqlStore.from_url(database_url)
    worker_port = free_port()
    worker_metrics.serve(worker_port)
    with EmbeddedRedis() as server:
        client: redis.Redis = connect(server.url)
        settings = Settings(
            database_url=database_url,
            redis_url=server.url,
            admin_token=ADMIN_TOKEN,
            metrics_token=SCRAPE_TOKEN,
        )
        try:
            with serve(settings, store, client, Published()) as live:
                yield live.url.removeprefix("http://"), f"127.0.0.1:{worker_port}"
        finally:
            client.close()
            store.close()


def _local_config(tmp_path: Path, api: str, worker: str) -> Path:
    """deploy/prometheus/prometheus.yml with only the addresses and the token file's path
    changed to this machine's (and a 1 s scrape interval)."""
    config = _yaml(PROMETHEUS_DIR / "prometheus.yml")
    config["global"]["scrape_interval"] = "1s"
    token_file = tmp_path / "om_metrics_token"
    token_file.write_text(SCRAPE_TOKEN, encoding="utf-8")
    for job in config["scrape_configs"]:
        if job["job_name"] == "om-api":
            job["static_configs"] = [{"targets": [api]}]
            job["authorization"]["credentials_file"] = str(token_file)
        else:
            del job["dns_sd_configs"]
            job["static_configs"] = [{"targets": [worker]}]
    for rule_file in config["rule_files"]:
        shutil.copy(PROMETHEUS_DIR / rule_file, tmp_path / rule_file)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _query(url: str, query: str) -> list[dict[str, Any]]:
    """The query's result; empty while Prometheus is still starting (it answers 503 then)."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=5)
    if answer.status_code != 200:
        return []
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


def _up(url: str) -> dict[str, str]:
    return {r["metric"]["job"]: r["value"][1] for r in _query(url, "up")}


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian package)")
def test_a_real_prometheus_on_the_deploy_config_scrapes_api_and_worker(
    tmp_path: Path, live_targets: tuple[str, str]
) -> None:
    assert PROMETHEUS is not None and PROMTOOL is not None
    config = _local_config(tmp_path, *live_targets)
    checked = subprocess.run(
        [PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + UP_WAIT_S
        up: dict[str, str] = {}
        requests: list[object] = []
        # The API counts a request once it is answered, so its first scrape holds no request
        # series yet; the next one (a second later) holds the first scrape's.
        while (
            up != {"om-api": "1", "om-worker": "1"} or not requests
        ) and time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                up = _up(url)
                requests = list(_query(url, "om_api_requests_total"))
            time.sleep(0.5)
        assert up == {"om-api": "1", "om-worker": "1"}, (tmp_path / "prometheus.log").read_text()
        assert requests, "the API's own series were scraped"
    finally:
        process.terminate()
        process.wait(timeout=60)
