"""The compose topology of ``deploy/compose.yaml`` under podman-compose, started, probed, hurt
and torn down by the container suite.

podman-compose 1.0 ignores ``name:`` and the ``depends_on`` conditions, so the start goes in
phases: Redis, PostgreSQL and the migration (``om db upgrade`` waits for the database by
itself); once the stores answer their health checks and the migration exited 0, the API,
the workers, beat and Flower, each waited for with ``podman healthcheck run`` (there is no
systemd here to run podman's health timers). Every object the project creates carries the
label ``io.podman.compose.project=<project>``; :meth:`ComposeStack.teardown` removes exactly
those containers, volumes and networks.

The harness talks to the containers the way an operator's tools would: the API and Flower on
their published ports, each worker's metrics and PostgreSQL/Redis on the containers' own
addresses (rootful podman routes the bridge network from the host).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from om_workers.coordination.embedded import free_port
from tests.chaos.provider import ProviderServer
from tests.containers.host import HERE, HostError, inspect, podman, run
from tests.containers.images import ROOT, SERVICE_IMAGE

PROJECT: Final = "omtest"
PROJECT_FILTER: Final = f"label=io.podman.compose.project={PROJECT}"
"""The podman filter for everything podman-compose creates for the project."""
COMPOSE_FILES: Final = (ROOT / "deploy" / "compose.yaml", HERE / "compose.test.yaml")
OM_SERVICES: Final = ("api", "worker", "beat", "flower")
TENANTS: Final = ("tenant-a", "tenant-b")
HEALTHY_TIMEOUT_S: Final = 120.0
MIGRATE_TIMEOUT_S: Final = 120.0
POLL_S: Final = 1.0


@dataclass(frozen=True)
class Tuning:
    """What the suite sets through the compose file's variables: task slots per worker, the
    reconciler's interval and the session lock's TTL (s), and the fake provider's delay per
    call (s). The lock TTL also sets when the reconciler re-publishes a job whose message Redis
    lost (two TTLs): 60 s would keep the Redis fault's last job queued for two minutes."""

    worker_concurrency: int = 2
    reconcile_interval_s: float = 10.0
    lock_ttl_s: float = 15.0
    provider_delay_s: float = 1.0
    workers: int = 2


class ComposeStack:
    """One run of the topology. :meth:`start`, the probes and faults, :meth:`teardown`.

    ``keys`` holds an API key per tenant of :data:`TENANTS` once started; ``kills`` the wall
    times (UTC) of every worker crash it caused.
    """

    def __init__(
        self, log_dir: Path, tuning: Tuning = Tuning(), say: Callable[[str], None] = print
    ) -> None:
        self.log_dir = log_dir
        self.tuning = tuning
        self.say = say
        self.secrets = {
            "POSTGRES_PASSWORD": secrets.token_urlsafe(18),
            "REDIS_PASSWORD": secrets.token_urlsafe(18),
            "OM_ADMIN_TOKEN": secrets.token_urlsafe(24),
            "OM_METRICS_TOKEN": secrets.token_urlsafe(24),
            "OM_FLOWER_BASIC_AUTH": f"om:{secrets.token_urlsafe(18)}",
            "OM_PROVIDER_API_KEY": f"sk-containers-{secrets.token_hex(16)}",
        }
        self.api_port = free_port()
        self.flower_port = free_port()
        self.provider: ProviderServer | None = None
        self.keys: dict[str, str] = {}
        self.kills: list[datetime] = []
        self.timings: dict[str, float] = {}

    # Compose ------------------------------------------------------------------------------------

    def environment(self, **extra: str) -> dict[str, str]:
        """What compose interpolates: the run's secrets, ports, image, provider and tuning."""
        env = {
            **self.secrets,
            "OM_IMAGE": SERVICE_IMAGE,
            "API_PORT": str(self.api_port),
            "FLOWER_PORT": str(self.flower_port),
            "WORKER_REPLICAS": str(self.tuning.workers),
            "OM_WORKER_CONCURRENCY": str(self.tuning.worker_concurrency),
            "OM_RECONCILE_INTERVAL_S": f"{self.tuning.reconcile_interval_s:g}",
            "OM_LOCK_TTL_S": f"{self.tuning.lock_ttl_s:g}",
            "OM_PROVIDER": "openai",
            "OM_MODEL": "containers-model",
            # A provider call that hangs costs 10 s, not a minute (the matrix's setting).
            "OM_HTTP_TIMEOUT_S": "10",
        }
        if self.provider is not None:
            env["OM_PROVIDER_BASE_URL"] = self.provider.url
        env.update(extra)
        return env

    def compose(self, *args: str, **extra: str) -> str:
        """``podman-compose -p <project> -f deploy/compose.yaml -f compose.test.yaml <args>``
        from ``deploy/``; its output is appended to ``compose.log``. Raises
        :class:`HostError` when it fails."""
        files = [arg for path in COMPOSE_FILES for arg in ("-f", str(path))]
        argv = ["podman-compose", "-p", PROJECT, *files, *args]
        # podman-compose reads its variables from the environment only (no --env-file); none
        # of the caller's own OM_* values may reach the containers through it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
        env.update(self.environment(**extra))
        done = run(argv, check=False, cwd=ROOT / "deploy", env=env)
        with (self.log_dir / "compose.log").open("a") as log:
            log.write(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            raise HostError(f"podman-compose {' '.join(args)} exited {done.returncode}")
        return done.stdout

    # Starting -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Tear down leftovers of an interrupted run, then start in phases (see the module
        docstring), the provider on the project network's gateway, and one API key per tenant.

        Raises :class:`HostError` when a phase fails or a service is not healthy in time.
        """
        self.teardown(quiet=True)
        began = time.monotonic()
        # Phase 1: the stores, and the migration beside them (it waits for PostgreSQL).
        self.compose("up", "-d", "redis", "migrate")
        self.wait_healthy([self.name("redis"), self.name("postgres")])
        self.wait_exited(self.name("migrate"), MIGRATE_TIMEOUT_S)
        self.timings["start: stores and migration"] = time.monotonic() - began
        # The workers' provider listens where the containers reach the host.
        self.provider = ProviderServer(
            delay_s=self.tuning.provider_delay_s, host=self.gateway()
        ).start()
        # Phase 2: the om services.
        began = time.monotonic()
        self.compose("up", "-d")
        self.wait_healthy(self.om_containers())
        self.timings["start: om services"] = time.monotonic() - began
        for tenant in TENANTS:
            self.keys[tenant] = self.create_key(tenant)

    def create_key(self, tenant: str) -> str:
        """``om keys create --tenant <tenant> --json`` inside the API container."""
        out = podman("exec", self.name("api"), "om", "keys", "create", "--tenant", tenant, "--json")
        key: str = json.loads(out)["key"]
        return key

    def wait_healthy(self, names: Sequence[str], timeout_s: float = HEALTHY_TIMEOUT_S) -> float:
        """Run each container's health check until it passes; returns the seconds it took.

        Raises :class:`HostError` (quoting the container's log) when one exits or is not
        healthy within ``timeout_s``.
        """
        began = time.monotonic()
        deadline = began + timeout_s
        # Side by side: a check is a process in the container, mostly waiting on a reply.
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            for future in [pool.submit(self._wait_healthy, name, deadline) for name in names]:
                future.result()
        return time.monotonic() - began

    def _wait_healthy(self, name: str, deadline: float) -> None:
        while True:
            check = run(["podman", "healthcheck", "run", name], check=False)
            if check.returncode == 0:
                return
            state = inspect("container", name)
            running = state is not None and state["State"]["Status"] == "running"
            if not running or time.monotonic() > deadline:
                why = "exited" if not running else "not healthy in time"
                raise HostError(f"{name} {why}: {self.logs(name)[-3000:]}")
            time.sleep(POLL_S)

    def wait_exited(self, name: str, timeout_s: float) -> None:
        """Wait for a one-shot container to exit 0. Raises :class:`HostError` otherwise."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = inspect("container", name)
            if state is not None and state["State"]["Status"] == "exited":
                code = state["State"]["ExitCode"]
                if code != 0:
                    raise HostError(f"{name} exited {code}: {self.logs(name)[-3000:]}")
                return
            if time.monotonic() > deadline:
                raise HostError(f"{name} still running after {timeout_s:g} s")
            time.sleep(POLL_S)

    # What runs ----------------------------------------------------------------------------------

    @staticmethod
    def name(service: str, replica: int = 1) -> str:
        """The container podman-compose names for a service (beat has a fixed name)."""
        return "om-beat" if service == "beat" else f"{PROJECT}_{service}_{replica}"

    def containers(self, service: str, *, running: bool = True) -> list[str]:
        """The service's containers of this project, by name (running ones only, unless told)."""
        filters = ["--filter", PROJECT_FILTER]
        filters += ["--filter", f"label=com.docker.compose.service={service}"]
        out = podman("ps", *([] if running else ["-a"]), *filters, "--format", "{{.Names}}")
        return sorted(out.split())

    def om_containers(self) -> list[str]:
        return [name for service in OM_SERVICES for name in self.containers(service)]

    def workers(self) -> list[str]:
        return self.containers("worker")

    def ip(self, name: str) -> str:
        """The container's address on the project network."""
        state = inspect("container", name)
        assert state is not None, name
        networks = state["NetworkSettings"]["Networks"]
        address: str = networks[f"{PROJECT}_default"]["IPAddress"]
        return address

    def gateway(self) -> str:
        """The project network's gateway: the host, as the containers see it."""
        network = inspect("network", f"{PROJECT}_default")
        assert network is not None
        gateway: str = network["subnets"][0]["gateway"]
        return gateway

    def logs(self, name: str) -> str:
        """The container's output (podman keeps stdout and stderr apart: both, in turn)."""
        done = run(["podman", "logs", name], check=False)
        return done.stdout + done.stderr

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.flower_port}"

    @property
    def database_url(self) -> str:
        password = self.secrets["POSTGRES_PASSWORD"]
        return f"postgresql+psycopg://om:{password}@{self.ip(self.name('postgres'))}:5432/om"

    @property
    def redis_url(self) -> str:
        password = self.secrets["REDIS_PASSWORD"]
        return f"redis://:{password}@{self.ip(self.name('redis'))}:6379/0"

    # Faults -------------------------------------------------------------------------------------

    def crash(self, name: str) -> datetime:
        """SIGKILL the container's init process from the host, as the kernel's OOM killer
        would: every process in it dies, podman sees a crash (exit 137) and its restart policy
        brings the container back. Returns the wall time (UTC) of the kill."""
        state = inspect("container", name)
        assert state is not None and state["State"]["Pid"], name
        at = datetime.now(UTC)
        if name.startswith(f"{PROJECT}_worker"):
            self.kills.append(at)
        os.kill(int(state["State"]["Pid"]), signal.SIGKILL)
        return at

    def restart_count(self, name: str) -> int:
        state = inspect("container", name)
        assert state is not None, name
        return int(state.get("RestartCount", 0))

    def restart_redis_empty(self, down_s: float) -> float:
        """Stop Redis at once, empty its data volume (the AOF too), start it again after
        ``down_s`` and wait for its health check; returns the seconds it was down."""
        name = self.name("redis")
        began = time.monotonic()
        podman("stop", "-t", "0", name)
        volume = inspect("volume", f"{PROJECT}_redis-data")
        assert volume is not None
        for item in Path(volume["Mountpoint"]).iterdir():
            run(["rm", "-rf", str(item)])
        time.sleep(down_s)
        podman("start", name)
        self.wait_healthy([name])
        return time.monotonic() - began

    def scale_workers(self, count: int) -> None:
        """Run ``count`` worker containers: stop the ones above it (a graceful stop), or start
        stopped ones and let compose create the missing (``WORKER_REPLICAS``); waits until
        every running worker is healthy."""
        present = self.containers("worker", running=False)
        for name in present[count:]:
            podman("stop", "-t", "30", name)
        for name in present[:count]:
            podman("start", name)
        if len(present) < count:
            self.compose("up", "-d", "worker", WORKER_REPLICAS=str(count))
        self.wait_healthy(self.workers())

    # Stopping -----------------------------------------------------------------------------------

    def save_logs(self) -> None:
        """Every container's log into ``log_dir`` (``<name>.log``)."""
        out = podman("ps", "-a", "--filter", PROJECT_FILTER, "--format", "{{.Names}}", check=False)
        for name in out.split():
            (self.log_dir / f"{name}.log").write_text(self.logs(name))

    def teardown(self, *, quiet: bool = False) -> None:
        """Remove this project's containers, volumes and networks (and nothing else); stop the
        provider. Safe to call twice."""
        if not quiet:
            self.save_logs()
        for kind, listing in (
            ("container", ["ps", "-a", "-q"]),
            ("volume", ["volume", "ls", "-q"]),
            ("network", ["network", "ls", "-q"]),
        ):
            found = podman(*listing, "--filter", PROJECT_FILTER, check=False).split()
            if not found:
                continue
            if kind == "container":
                # -v: with any anonymous volume an image's VOLUME made for it.
                podman("rm", "-f", "-v", "-t", "5", *found, check=False)
            else:
                podman(kind, "rm", "-f", *found, check=False)
        if self.provider is not None:
            self.provider.close()
            self.provider = None
