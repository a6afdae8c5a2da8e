"""deploy/compose.yaml and deploy/env.example: real om commands, settings-read variables only,
ports that agree, exactly one beat, health checks everywhere, secrets only from the env file."""

from __future__ import annotations

import subprocess

import pytest

from om_workers.celery.limits import time_limits
from om_workers.config import Settings
from tests.deploy.topology import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    INTERPOLATION_ONLY,
    NON_OM_ENV,
    ROOT,
    InterpolationError,
    compose_services,
    example_env,
    interpolate,
    load_compose,
    om_env_names,
    parse_om,
    read_env_file,
    settings_env_names,
    variables_in,
)

OM_SERVICES = {"migrate", "api", "worker", "beat", "flower"}


def _seconds(duration: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(duration[:-1]) * units[duration[-1]]


def test_the_topology_has_every_service() -> None:
    services = compose_services()
    assert set(services) == {"redis", "postgres", *OM_SERVICES}
    assert {name for name, s in services.items() if s.runs_om} == OM_SERVICES


def test_every_command_is_a_real_om_subcommand_with_accepted_options() -> None:
    expected = {
        "migrate": ("db", "upgrade"),
        "api": ("api",),
        "worker": ("worker",),
        "beat": ("beat",),
        "flower": ("flower",),
    }
    for name, service in compose_services().items():
        if service.runs_om:
            assert parse_om(service.command).path == expected[name], name


def test_om_services_set_only_variables_the_settings_read() -> None:
    read = om_env_names()
    for service in compose_services().values():
        if service.runs_om:
            unknown = set(service.environment) - read
            assert not unknown, f"{service.name} sets {unknown}, which no om process reads"
        else:
            unknown = set(service.environment) - set(NON_OM_ENV)
            assert not unknown, f"{service.name} sets undocumented {unknown}"


def test_the_settings_accept_the_environment_of_every_om_service() -> None:
    for service in compose_services().values():
        if service.runs_om:
            env = {k: v for k, v in service.environment.items() if k in settings_env_names()}
            settings = Settings(**{k.removeprefix("OM_").lower(): v for k, v in env.items()})
            if service.name != "migrate":
                assert settings.redis.url and settings.redis.url.startswith("redis://")
                time_limits(settings)  # ordered time limits, lock TTL below visibility
            if service.name != "flower":  # Flower only reads the broker
                assert settings.store.url.startswith("postgresql+psycopg://om:")


def test_env_example_names_only_read_or_documented_variables() -> None:
    example = read_env_file(ENV_EXAMPLE)
    unknown = set(example) - om_env_names() - set(NON_OM_ENV)
    assert not unknown, unknown
    # Every variable the compose file interpolates is documented in the example, and back.
    used = variables_in(load_compose())
    assert used <= set(example), used - set(example)
    assert set(example) - used == set(), "env.example lists a variable compose never uses"
    assert used >= INTERPOLATION_ONLY


def test_secrets_come_only_from_the_env_file() -> None:
    for secret in (
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "OM_ADMIN_TOKEN",
        "OM_FLOWER_BASIC_AUTH",
        "OM_METRICS_TOKEN",
    ):
        assert read_env_file(ENV_EXAMPLE)[secret] == "", f"{secret} must have no example value"
        env = example_env()
        del env[secret]
        with pytest.raises(InterpolationError, match=secret):
            interpolate(load_compose()["services"], env)
    assert "env_file" not in COMPOSE_FILE.read_text(encoding="utf-8").split("services:")[1]


def test_deploy_env_is_ignored_by_git_and_the_example_is_not() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "deploy/.env"], cwd=ROOT, check=False
    ).returncode
    assert ignored == 0, "deploy/.env must be git-ignored"
    example = subprocess.run(
        ["git", "check-ignore", "-q", "deploy/env.example"], cwd=ROOT, check=False
    ).returncode
    assert example == 1, "deploy/env.example must be committable"


def test_every_service_has_a_health_check() -> None:
    for service in compose_services().values():
        check = service.spec.get("healthcheck")
        assert check and check.get("test") and not check.get("disable"), service.name
        if service.runs_om:
            # A string test (CMD-SHELL): podman-compose 1.0 cannot share a list between replicas.
            assert check["test"] == "om-healthcheck", service.name


def test_everything_waits_for_the_migration_and_healthy_stores() -> None:
    services = compose_services()
    assert services["migrate"].spec.get("restart") == "no"
    assert services["migrate"].depends_on == {"postgres": "service_healthy"}
    for name in OM_SERVICES - {"migrate"}:
        assert services[name].depends_on == {
            "redis": "service_healthy",
            "postgres": "service_healthy",
            "migrate": "service_completed_successfully",
        }, name


def test_every_long_running_service_restarts_whatever_its_exit_code() -> None:
    # "on-failure" would leave a worker dead that Celery stopped with exit code 0.
    for name, service in compose_services().items():
        if name != "migrate":
            assert service.spec.get("restart") == "unless-stopped", name


def test_redis_refuses_eviction_and_persists() -> None:
    redis = compose_services()["redis"]
    command = redis.command
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "--requirepass" in command
    assert any(v.endswith(":/data") for v in redis.spec["volumes"])
    postgres = compose_services()["postgres"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres.spec["volumes"])
    assert set(load_compose()["volumes"]) == {"redis-data", "postgres-data"}


def test_ports_agree_and_bind_localhost_on_the_host() -> None:
    services = compose_services()
    for name, default in (("api", 8000), ("flower", 5555)):
        port = parse_om(services[name].command).params["port"]
        assert port == default, name
        assert services[name].spec["ports"] == [f"127.0.0.1:{port}:{port}"], name
    worker = services["worker"]
    assert worker.environment["OM_WORKER_METRICS_PORT"] == "9100"


def test_workers_scale_and_beat_never_does() -> None:
    services = compose_services()
    worker = services["worker"].spec
    assert "container_name" not in worker and "ports" not in worker, "--scale worker=N collides"
    beats = [s for s in services.values() if s.runs_om and parse_om(s.command).path == ("beat",)]
    assert [s.name for s in beats] == ["beat"], "exactly one service may run om beat"
    beat = beats[0].spec
    assert beat.get("scale", 1) == 1
    assert beat.get("deploy", {}).get("replicas", 1) == 1
    assert "container_name" in beat, "a fixed name makes --scale beat=2 fail"


def test_om_services_share_one_image() -> None:
    images = {s.spec["image"] for s in compose_services().values() if s.runs_om}
    builds = {str(s.spec["build"]) for s in compose_services().values() if s.runs_om}
    assert images == {"observational-memory:local"} and len(builds) == 1
    assert compose_services()["api"].spec["build"] == {
        "context": "..",
        "dockerfile": "deploy/Dockerfile",
    }


def test_worker_stop_grace_outlasts_the_hard_time_limit() -> None:
    worker = compose_services()["worker"]
    env = {k: v for k, v in worker.environment.items() if k in settings_env_names()}
    settings = Settings(**{k.removeprefix("OM_").lower(): v for k, v in env.items()})
    assert _seconds(worker.spec["stop_grace_period"]) > time_limits(settings).hard_time_limit_s
