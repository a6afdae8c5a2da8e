"""The host side of ``make test-containers``: the Debian packages it needs (podman,
podman-compose, runc, debootstrap), IPv4 forwarding for the containers' bridge, and the
environment every ``podman`` and ``podman-compose`` call runs with.

Rootful podman without a daemon: nothing is pulled (there is no registry to pull from), so
:mod:`tests.containers.images` builds every image locally.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
CONTAINERS_CONF: Final = HERE / "containers.conf"
PACKAGES: Final = {
    "podman": "podman",
    "podman-compose": "podman-compose",
    "runc": "runc",
    "debootstrap": "debootstrap",
}
"""Debian package by the command it provides."""
IP_FORWARD: Final = Path("/proc/sys/net/ipv4/ip_forward")
COMMAND_TIMEOUT_S: Final = 900.0
"""Longest any single podman call may take (an image build from nothing takes about 2 min)."""


class HostError(RuntimeError):
    """The host cannot run the containers (not root, apt failed, a command failed)."""


def podman_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every podman and podman-compose call: ``base`` (default: this
    process's), our containers.conf, and images built in Docker's format (OCI images drop
    ``HEALTHCHECK``)."""
    env = dict(os.environ if base is None else base)
    return {**env, "CONTAINERS_CONF": str(CONTAINERS_CONF), "BUILDAH_FORMAT": "docker"}


def prepare(say: Callable[[str], None] = print) -> None:
    """Install what is missing and enable IPv4 forwarding; idempotent.

    Raises :class:`HostError` when not run as root (rootful podman, apt and sysctl need it) or
    when apt fails.
    """
    if os.geteuid() != 0:
        raise HostError("rootful podman, apt-get and sysctl need root: run it as root")
    missing = sorted({pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None})
    if missing:
        say(f"installing {', '.join(missing)} (apt-get)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise HostError(f"{' '.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    if IP_FORWARD.read_text().strip() != "1":
        # Container traffic leaves the bridge through the host; without forwarding, builds
        # cannot reach the package mirrors and published ports do not answer.
        say("enabling net.ipv4.ip_forward")
        run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout_s: float = COMMAND_TIMEOUT_S,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command with :func:`podman_env` of ``env`` (default: this process's environment)
    and capture its output.

    Raises :class:`HostError` (quoting the end of its output) when ``check`` and it fails.
    """
    done = subprocess.run(
        list(argv),
        env=podman_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-3000:]
        raise HostError(f"{' '.join(argv)} exited {done.returncode}: {output}")
    return done


def podman(*args: str, check: bool = True, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """``podman <args>``; returns its standard output. Raises :class:`HostError` on failure
    when ``check``."""
    return run(["podman", *args], check=check, timeout_s=timeout_s).stdout


def inspect(kind: str, name: str) -> dict[str, Any] | None:
    """``podman <kind> inspect <name>`` as JSON; ``None`` when there is no such object."""
    done = run(["podman", kind, "inspect", name], check=False)
    if done.returncode != 0:
        return None
    found = json.loads(done.stdout)
    return found[0] if found else None
