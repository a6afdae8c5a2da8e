"""Every image ``make test-containers`` runs, built on this machine (nothing can be pulled).

- A Debian bookworm base: ``debootstrap --variant=minbase`` into a folder, trimmed like the
  official slim images (no apt lists or caches, docs, man pages or locales), imported with
  ``podman import``. Built once; later runs reuse it (until its recipe changes, see
  :data:`RECIPE_LABEL`).
- Stand-ins for the images the compose file and the Dockerfile name, layered on that base from
  Debian's packages (``standins/``) and tagged with those names: ``python:3.11-slim-bookworm``
  (the Dockerfile's ``PYTHON_IMAGE``), ``redis:7.2-alpine`` and ``postgres:15-alpine``. Also
  built once (and again when a Containerfile, an entry point or the host's CAs change).
- The service image from ``deploy/Dockerfile``, every run (podman's layer cache makes an
  unchanged tree cheap). Its ``pip`` reaches the package index the host's ``pip`` uses: the
  host's pip settings are mounted into the build as ``/etc/pip.conf``, with any local index,
  wheel folder or constraints file they name, read-only; nothing of it stays in a layer.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.containers.host import (
    HERE,
    HostError,
    inspect,
    podman,
    podman_env,
    run,
)

ROOT: Final = HERE.parents[1]
STANDINS: Final = HERE / "standins"
BASE_IMAGE: Final = "localhost/om-test-debian:bookworm"
MIRROR: Final = "http://deb.debian.org/debian"
SUITE: Final = "bookworm"
SERVICE_IMAGE: Final = "observational-memory:local"
"""The compose file's default ``OM_IMAGE``."""
HOST_CA_FOLDER: Final = Path("/usr/local/share/ca-certificates")
RECIPE_LABEL: Final = "io.om.test-containers.recipe"
"""Label of the images built here: a digest of what they were built from; a later run
rebuilds an image whose recipe changed and reuses the others."""

# What the official slim images leave out, and the settings that keep it out of every later
# package install (theirs, as debuerreotype writes them): without the apt ones, each
# `apt-get update` in a Dockerfile leaves about 80 MB of package caches in its layer.
TRIM: Final = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
APT_CACHES: Final = (
    "/var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin"
)
SLIM_CONFIG: Final = {
    "etc/dpkg/dpkg.cfg.d/docker": """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
""",
    "etc/apt/apt.conf.d/docker-clean": "".join(
        f'{hook} {{ "rm -f {APT_CACHES} || true"; }};\n'
        for hook in ("DPkg::Post-Invoke", "APT::Update::Post-Invoke")
    )
    + 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
    "etc/apt/apt.conf.d/docker-no-languages": 'Acquire::Languages "none";\n',
    "etc/apt/apt.conf.d/docker-gzip-indexes": 'Acquire::GzipIndexes "true";\n',
    "etc/apt/apt.conf.d/docker-autoremove-suggests": (
        'Apt::AutoRemove::SuggestsImportant "false";\n'
    ),
}
APT_SOURCES: Final = f"""\
deb {MIRROR} {SUITE} main
deb {MIRROR} {SUITE}-updates main
deb http://deb.debian.org/debian-security {SUITE}-security main
"""


@dataclass(frozen=True)
class StandIn:
    """An image the deployment names, and the Containerfile that stands in for it."""

    name: str
    containerfile: str
    files: tuple[str, ...] = ()

    @property
    def reference(self) -> str:
        """The fully qualified name, as ``podman`` resolves the short one."""
        return f"docker.io/library/{self.name}"


STAND_INS: Final = (
    StandIn("python:3.11-slim-bookworm", "python.Containerfile"),
    StandIn("redis:7.2-alpine", "redis.Containerfile", ("redis-entrypoint.sh",)),
    StandIn("postgres:15-alpine", "postgres.Containerfile", ("postgres-entrypoint.sh",)),
)


def recipe(*parts: str | bytes) -> str:
    """A short digest of what an image is built from (kept in its :data:`RECIPE_LABEL`)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def base_recipe() -> str:
    return recipe(SUITE, MIRROR, *TRIM, *(f"{k}={v}" for k, v in SLIM_CONFIG.items()), APT_SOURCES)


def is_current(name: str, wanted: str) -> bool:
    """Whether ``name`` can be reused: it exists, and was built from the recipe ``wanted``
    (an image of that name that this harness did not build, a real one, is kept as it is)."""
    found = inspect("image", name)
    if found is None:
        return False
    labels = found.get("Labels") or {}
    return labels.get(RECIPE_LABEL, wanted) == wanted


def ensure_base(say: Callable[[str], None] = print) -> bool:
    """Build :data:`BASE_IMAGE` unless it exists from the same recipe; returns whether it was
    built. Raises :class:`HostError` when debootstrap or the import fails.
    """
    wanted = base_recipe()
    if is_current(BASE_IMAGE, wanted):
        return False
    say(f"building {BASE_IMAGE} (debootstrap --variant=minbase {SUITE})")
    with tempfile.TemporaryDirectory(prefix="om-debootstrap-") as folder:
        rootfs = Path(folder) / "rootfs"
        run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), MIRROR])
        _trim(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            done = subprocess.run(
                [
                    "podman",
                    "import",
                    "--change",
                    'CMD ["bash"]',
                    "--change",
                    f"LABEL {RECIPE_LABEL}={wanted}",
                    "-",
                    BASE_IMAGE,
                ],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                env=podman_env(),
                check=False,
            )
        finally:
            assert tar.stdout is not None
            tar.stdout.close()
            tar.wait()
        if done.returncode != 0 or tar.returncode != 0:
            raise HostError(f"podman import failed: {done.stderr.strip()[-2000:]}")
    return True


def _trim(rootfs: Path) -> None:
    """Drop what a container never reads, and tell dpkg to keep it out from now on."""
    for relative in TRIM:
        target = rootfs / relative
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir()
    for cache in ("var/cache/apt", "var/lib/apt/lists"):
        for item in (rootfs / cache).glob("**/*"):
            if item.is_file():
                item.unlink()
    for relative, text in SLIM_CONFIG.items():
        (rootfs / relative).write_text(text)
    (rootfs / "etc/apt/sources.list").write_text(APT_SOURCES)


def ensure_stand_ins(say: Callable[[str], None] = print) -> list[str]:
    """Build every stand-in that does not exist yet (on :data:`BASE_IMAGE`); returns the names
    built. Raises :class:`HostError` when a build fails."""
    built = []
    cas = sorted(HOST_CA_FOLDER.rglob("*")) if HOST_CA_FOLDER.is_dir() else []
    trusted = [path.read_bytes() for path in cas if path.is_file()]
    for stand_in in STAND_INS:
        sources = [(STANDINS / n).read_bytes() for n in (stand_in.containerfile, *stand_in.files)]
        wanted = recipe(base_recipe(), *sources, *trusted)
        if is_current(stand_in.reference, wanted):
            continue
        say(f"building the stand-in for {stand_in.name}")
        with tempfile.TemporaryDirectory(prefix="om-standin-") as folder:
            context = Path(folder)
            shutil.copy(STANDINS / stand_in.containerfile, context / "Containerfile")
            for name in stand_in.files:
                shutil.copy(STANDINS / name, context / name)
            cas = context / "ca-certificates"
            cas.mkdir()
            if HOST_CA_FOLDER.is_dir():
                shutil.copytree(HOST_CA_FOLDER, cas, dirs_exist_ok=True)
            podman(
                "build", "--format", "docker", "--build-arg", f"BASE={BASE_IMAGE}",
                "--label", f"{RECIPE_LABEL}={wanted}", "-t", stand_in.reference, str(context),
            )  # fmt: skip
        built.append(stand_in.name)
    return built


def build_service(say: Callable[[str], None] = print) -> float:
    """Build :data:`SERVICE_IMAGE` from ``deploy/Dockerfile`` (the repository root as the
    context, ``deploy/Dockerfile.dockerignore`` as its ignore file); returns the seconds it
    took. The image it replaces is removed once no container uses it.

    Raises :class:`HostError` (with the end of the build log) when the build fails.
    """
    previous = inspect("image", SERVICE_IMAGE)
    began = time.monotonic()
    with pip_settings() as mounts:
        volumes = [arg for host, inside in mounts for arg in ("--volume", f"{host}:{inside}:ro")]
        say(f"building {SERVICE_IMAGE} from deploy/Dockerfile")
        log = podman(
            "build", "--format", "docker", "--layers",
            "--ignorefile", str(ROOT / "deploy" / "Dockerfile.dockerignore"),
            "-f", str(ROOT / "deploy" / "Dockerfile"), "-t", SERVICE_IMAGE, *volumes, str(ROOT),
        )  # fmt: skip
    took = time.monotonic() - began
    current = inspect("image", SERVICE_IMAGE)
    if previous and current and previous["Id"] != current["Id"]:
        podman("rmi", previous["Id"], check=False)  # still used by a container: kept
    _drop_stale_stages(set(_STEP.findall(log)))
    return took


_STEP: Final = re.compile(r"^--> (?:Using cache )?([0-9a-f]{11,64})", re.MULTILINE)
"""A build step's image as ``podman build`` reports it."""


def _drop_stale_stages(used: set[str]) -> None:
    """Remove the untagged stage images earlier builds of the service left (they inherit the
    stand-ins' :data:`RECIPE_LABEL`), except the ones this build used: its layer cache."""
    listing = podman(
        "images", "-q", "--no-trunc", "--filter", "dangling=true",
        "--filter", f"label={RECIPE_LABEL}",
    )  # fmt: skip
    for image in listing.split():
        digest = image.removeprefix("sha256:")
        if not any(digest.startswith(step) for step in used):
            podman("rmi", digest, check=False)


@contextmanager
def pip_settings() -> Iterator[list[tuple[str, str]]]:
    """The host's effective pip settings as a pip.conf, and the read-only mounts a build needs
    to honour them: ``[(host path, path in the build)]``, ``/etc/pip.conf`` first."""
    with tempfile.TemporaryDirectory(prefix="om-pip-") as folder:
        conf = Path(folder) / "pip.conf"
        settings = host_pip_settings()
        conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        mounts = [(str(conf), "/etc/pip.conf")]
        yield mounts + [(path, path) for path in sorted(set(local_paths(settings)))]


def host_pip_settings() -> dict[str, str]:
    """``pip config list`` of this interpreter's pip (files and ``PIP_*`` variables), the
    variables winning, as ``{option: value}``."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    )
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep or "." not in key:
            continue
        section, _, option = key.rpartition(".")
        value = value.strip().strip("'\"")
        (env if section == ":env:" else files)[option] = value
    return {**files, **env}


def local_paths(settings: dict[str, str]) -> Iterator[str]:
    """Host folders and files the settings name: local indexes (``file://``), wheel folders
    and constraint or requirement files. The certificate bundle is not one of them: the
    stand-in trusts the host's extra CAs in its own bundle at the same path."""
    for option in ("index-url", "extra-index-url", "find-links", "constraint", "requirement"):
        for item in shlex.split(settings.get(option, "")):
            path = item.removeprefix("file://") if item.startswith("file://") else item
            if path.startswith("/") and Path(path).exists():
                # An index's /simple folder is read through its parent's layout too.
                yield str(Path(path).parent) if path.rstrip("/").endswith("/simple") else path


def image_size_mb(name: str) -> float:
    """The image's size in MB (10^6 bytes), as ``podman images`` shows it."""
    found = inspect("image", name)
    if found is None:
        raise HostError(f"no image {name}")
    return float(found["Size"]) / 1e6
