"""deploy/compose.yaml and deploy/k8s describe the same deployment: one image, the same command
per role, the same variables with the same non-secret values, probes that check what the
image's health check checks, the same user and file-system limits, the same starting worker
count and stop grace. And the compose file keeps to what podman-compose 1.0 understands, since
``make test-containers`` runs it with that (tests/containers)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from functools import cache
from types import ModuleType
from typing import Any

from tests.deploy.topology import (
    COMPOSE_FILE,
    DEPLOY,
    ROOT,
    ComposeService,
    compose_services,
    example_env,
    k8s_docs,
    pod_spec,
)

ROLES = {"api": "om-api", "worker": "om-worker", "beat": "om-beat", "flower": "om-flower"}
"""Compose service -> Kubernetes Deployment."""
MIGRATION = ("migrate", "om-migrate")


def _healthcheck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("om_healthcheck", DEPLOY / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _docs() -> tuple[dict[str, Any], ...]:
    """The applied manifests, parsed once for the module (read-only)."""
    return tuple(doc for _, doc in k8s_docs(include_optional=False))


def _workloads() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in _docs() if doc["kind"] in ("Deployment", "Job")}


def _container(name: str) -> dict[str, Any]:
    (container,) = pod_spec(_workloads()[name])["containers"]
    return container


def _k8s_data(kind: str, name: str, field: str) -> dict[str, str]:
    for doc in _docs():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return {str(k): str(v) for k, v in doc[field].items()}
    raise AssertionError(f"no {kind} {name}")


def _k8s_env(container: dict[str, Any]) -> dict[str, str]:
    """What a pod's container gets: the ConfigMap, the Secret, then its own ``env``."""
    env = {
        **_k8s_data("ConfigMap", "om-config", "data"),
        **_k8s_data("Secret", "om-secrets", "stringData"),
    }
    env.update({item["name"]: str(item["value"]) for item in container.get("env", [])})
    return env


@cache
def _pairs() -> tuple[tuple[ComposeService, dict[str, Any]], ...]:
    """(compose service, Kubernetes container) per role, parsed once for the module."""
    # env.example as an operator fills it: secrets set, the provider URL left empty.
    services = compose_services(example_env(OM_PROVIDER_BASE_URL=""))
    return tuple((services[s], _container(k)) for s, k in (*ROLES.items(), MIGRATION))


def test_one_image_repository_and_the_package_version_as_the_pinned_tag() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for service, container in _pairs():
        compose_repo = str(service.spec["image"]).rpartition(":")[0]
        repo, _, tag = str(container["image"]).rpartition(":")
        assert repo == compose_repo == "observational-memory", service.name
        assert tag == version, f"{container['name']} pins {tag}, the package is {version}"


def test_every_role_runs_the_same_command() -> None:
    for service, container in _pairs():
        assert container["command"] == service.command, service.name


def test_the_same_variables_with_the_same_non_secret_values() -> None:
    secret = set(_k8s_data("Secret", "om-secrets", "stringData"))
    compose_names: set[str] = set()
    for service, container in _pairs():
        given = _k8s_env(container)
        compose_names |= set(service.environment)
        missing = set(service.environment) - set(given)
        assert not missing, f"{service.name}: compose sets {missing}, the pod does not get them"
        for name, value in service.environment.items():
            if name not in secret:
                assert given[name] == value, (service.name, name, given[name], value)
    k8s_names = set(_k8s_env({})) | {
        item["name"] for _, container in _pairs() for item in container.get("env", [])
    }
    assert k8s_names == compose_names, k8s_names ^ compose_names


def test_probes_check_what_the_image_health_check_checks() -> None:
    check = _healthcheck_module()
    services = compose_services()
    for service, deployment in ROLES.items():
        assert services[service].spec["healthcheck"]["test"] == "om-healthcheck", service
        container = _container(deployment)
        probe = container["livenessProbe"]
        if service in check.DEFAULT_PORTS:
            # om-healthcheck GETs this path on the command's port; so must the probe.
            port = int(check.option(container["command"], "--port"))
            path = "/healthz" if service == "api" else "/healthcheck"
            named = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert probe["httpGet"]["path"] == path, deployment
            assert named.get(probe["httpGet"]["port"], probe["httpGet"]["port"]) == port
        else:
            assert probe["exec"]["command"] == ["om-healthcheck"], deployment


def test_the_same_user_and_file_system_limits() -> None:
    for service, container in _pairs():
        spec = service.spec
        assert spec["read_only"] is True and spec["tmpfs"] == ["/tmp"], service.name
        assert spec["cap_drop"] == ["ALL"], service.name
        assert "no-new-privileges:true" in spec["security_opt"], service.name
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    pods = [pod_spec(doc)["securityContext"] for doc in _workloads().values()]
    assert all(f"USER {pod['runAsUser']}:{pod['runAsGroup']}" in dockerfile for pod in pods)


def test_the_same_starting_worker_count_and_stop_grace() -> None:
    services = compose_services()
    worker = _workloads()["om-worker"]
    assert int(services["worker"].spec["deploy"]["replicas"]) == worker["spec"]["replicas"]
    grace = services["worker"].spec["stop_grace_period"]
    assert grace == f"{pod_spec(worker)['terminationGracePeriodSeconds']}s"


def test_the_compose_file_keeps_to_what_podman_compose_understands() -> None:
    lines = COMPOSE_FILE.read_text(encoding="utf-8").splitlines()
    text = "\n".join(line.partition("#")[0] for line in lines)
    # podman-compose 1.0 leaves ${VAR:-} (an empty default) uninterpolated; ${VAR} is the same.
    assert not re.findall(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?-\}", text)
    # It consumes a list health-check test while creating the first container that uses it:
    # replicas and services sharing an anchor need the string form.
    for service in compose_services().values():
        if service.runs_om:
            assert isinstance(service.spec["healthcheck"]["test"], str), service.name
