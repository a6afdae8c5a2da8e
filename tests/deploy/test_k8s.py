"""deploy/k8s: real om commands, settings-read variables only, ports and probes that agree,
exactly one beat, a worker grace period above the hard time limit, queue-based autoscaling."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from om_workers.celery.limits import time_limits
from om_workers.config import Settings
from om_workers.coordination import keys
from tests.deploy.topology import K8S, k8s_docs, om_env_names, parse_om, pod_spec

IMAGE = "observational-memory:0.1.0"


def _by_kind(kind: str, include_optional: bool = True) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["name"]: doc for _, doc in k8s_docs(include_optional) if doc["kind"] == kind
    }


def _config_data() -> dict[str, str]:
    data: dict[str, str] = _by_kind("ConfigMap")["om-config"]["data"]
    return data


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = pod_spec(doc)["containers"]
    return containers


def test_every_file_parses_and_names_its_kind() -> None:
    docs = k8s_docs()
    assert docs
    kinds = Counter(doc["kind"] for _, doc in docs)
    assert kinds["Deployment"] == 4 and kinds["Job"] == 1 and kinds["ScaledObject"] == 1
    assert kinds["Service"] == 2 and kinds["PodDisruptionBudget"] >= 1
    for _, doc in docs:
        assert doc.get("apiVersion") and doc["metadata"].get("name")


def test_kustomization_applies_every_manifest_but_the_template_and_the_alternative() -> None:
    import yaml

    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert files - listed == {"secret.template.yaml"}
    assert all((K8S / name).is_file() for name in listed)
    assert (K8S / "optional" / "hpa-cpu.yaml").is_file()


def test_every_workload_runs_a_real_om_subcommand_on_one_image() -> None:
    expected = {
        "om-api": ("api",),
        "om-worker": ("worker",),
        "om-beat": ("beat",),
        "om-flower": ("flower",),
        "om-migrate": ("db", "upgrade"),
    }
    workloads = {**_by_kind("Deployment"), **_by_kind("Job")}
    assert set(workloads) == set(expected)
    for name, doc in workloads.items():
        (container,) = _containers(doc)
        assert parse_om(container["command"]).path == expected[name], name
        assert container["image"] == IMAGE, name
        assert "args" not in container, name


def test_pods_get_only_variables_the_settings_read() -> None:
    read = om_env_names()
    assert set(_config_data()) <= read, set(_config_data()) - read
    secret = _by_kind("Secret")["om-secrets"]["stringData"]
    assert set(secret) <= read, set(secret) - read
    workloads = {**_by_kind("Deployment"), **_by_kind("Job")}
    for name, doc in workloads.items():
        for container in _containers(doc):
            refs = {next(iter(ref.values()))["name"] for ref in container.get("envFrom", [])}
            assert refs == {"om-config", "om-secrets"}, name
            extra = {item["name"] for item in container.get("env", [])}
            assert extra <= read, f"{name} sets {extra - read}"


def test_the_config_is_valid_settings_and_the_worker_grace_outlasts_the_hard_limit() -> None:
    values = {k.removeprefix("OM_").lower(): v for k, v in _config_data().items()}
    settings = Settings(redis_url="redis://om-redis:6379/0", **values)
    limits = time_limits(settings)
    worker = _by_kind("Deployment")["om-worker"]
    grace = pod_spec(worker)["terminationGracePeriodSeconds"]
    assert grace > limits.hard_time_limit_s, (grace, limits)
    # The comments quote the derived figures; keep them true.
    text = (K8S / "worker.yaml").read_text() + (K8S / "configmap.yaml").read_text()
    assert f"{limits.hard_time_limit_s:g} s" in text
    assert f"{limits.visibility_timeout_s:g} s" in text


def test_every_deployment_has_probes_on_the_ports_it_serves() -> None:
    for name, doc in _by_kind("Deployment").items():
        for container in _containers(doc):
            assert container.get("livenessProbe") and container.get("readinessProbe"), name
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                http = container.get(probe, {}).get("httpGet")
                if http:
                    assert http["port"] in ports, f"{name} {probe} port {http['port']}"
    api = _containers(_by_kind("Deployment")["om-api"])[0]
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_command_ports_container_ports_and_services_agree() -> None:
    deployments = _by_kind("Deployment")
    services = _by_kind("Service")
    for deployment, service, port_name in (
        ("om-api", "om-api", "http"),
        ("om-flower", "om-flower", "flower"),
    ):
        container = _containers(deployments[deployment])[0]
        port = parse_om(container["command"]).params["port"]
        assert {p["name"]: p["containerPort"] for p in container["ports"]}[port_name] == port
        selector = services[service]["spec"]["selector"]
        labels = deployments[deployment]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), service
        targets = {p["targetPort"] for p in services[service]["spec"]["ports"]}
        assert targets <= {port_name, port}, service
    worker = _containers(deployments["om-worker"])[0]
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert int(env["OM_WORKER_METRICS_PORT"]) == worker["ports"][0]["containerPort"]
    assert worker["readinessProbe"]["httpGet"]["port"] == worker["ports"][0]["name"]


def test_exactly_one_beat_is_ever_scheduled() -> None:
    deployments = _by_kind("Deployment")
    beats = [
        name
        for name, doc in deployments.items()
        if parse_om(_containers(doc)[0]["command"]).path == ("beat",)
    ]
    assert beats == ["om-beat"]
    beat = deployments["om-beat"]["spec"]
    assert beat["replicas"] == 1 and beat["strategy"] == {"type": "Recreate"}
    for kind in ("ScaledObject", "HorizontalPodAutoscaler"):
        for name, doc in _by_kind(kind).items():
            assert doc["spec"]["scaleTargetRef"]["name"] != "om-beat", f"{kind} {name}"
    assert "om-beat" not in {
        name for name, doc in _by_kind("PodDisruptionBudget").items() if "minAvailable" in doc
    }


def test_workers_scale_on_the_om_list_with_a_disruption_budget() -> None:
    scaled = _by_kind("ScaledObject")["om-worker"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "om-worker"
    (trigger,) = scaled["triggers"]
    # The fair queue's backlog (waiting, queued and running flush jobs), named in one place.
    assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == keys.BACKLOG
    assert int(trigger["metadata"]["listLength"]) >= 1
    auth = trigger["authenticationRef"]["name"]
    assert auth in _by_kind("TriggerAuthentication")
    assert scaled["minReplicaCount"] >= 1 and scaled["maxReplicaCount"] > 1
    pdb = _by_kind("PodDisruptionBudget")["om-worker"]["spec"]
    worker_labels = _by_kind("Deployment")["om-worker"]["spec"]["template"]["metadata"]["labels"]
    assert pdb["selector"]["matchLabels"].items() <= worker_labels.items()
    hpa = _by_kind("HorizontalPodAutoscaler")["om-worker"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "om-worker"
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    optional = {
        Path(path).name for path, doc in k8s_docs() if doc["kind"] == "HorizontalPodAutoscaler"
    }
    assert optional == {"hpa-cpu.yaml"}
    assert not any(doc["kind"] == "HorizontalPodAutoscaler" for _, doc in k8s_docs(False))


def test_pods_run_as_the_image_user_and_not_root() -> None:
    workloads = {**_by_kind("Deployment"), **_by_kind("Job")}
    for name, doc in workloads.items():
        security = pod_spec(doc)["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001, name
        for container in _containers(doc):
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name


def test_every_long_running_pod_restarts_whatever_its_exit_code() -> None:
    for name, doc in _by_kind("Deployment").items():
        assert pod_spec(doc)["restartPolicy"] == "Always", name
