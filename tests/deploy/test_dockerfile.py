"""deploy/Dockerfile: slim multi-stage build, non-root, one image for every role, a health
check, and an ignore file that keeps the context to what the build copies."""

from __future__ import annotations

import json
import tomllib

from tests.deploy.topology import DEPLOY, ROOT, dockerfile_instructions, parse_om


def test_multi_stage_on_python_311_slim() -> None:
    instructions = dockerfile_instructions()
    args = dict(arg.split("=", 1) for key, arg in instructions if key == "ARG" and "=" in arg)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    stages = [arg for key, arg in instructions if key == "FROM"]
    assert stages == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE} AS runtime"]
    runs = " ".join(arg for key, arg in instructions if key == "RUN")
    assert 'pip wheel --wheel-dir /wheels ".[server]"' in runs
    assert "--no-index --find-links=/wheels" in runs


def test_runs_as_a_numeric_non_root_user() -> None:
    users = [arg for key, arg in dockerfile_instructions() if key == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0
    # The last USER comes after every RUN: nothing later runs as root.
    keys = [key for key, _ in dockerfile_instructions()]
    assert max(i for i, k in enumerate(keys) if k == "RUN") < keys.index("USER")


def test_default_command_is_the_api_and_the_health_check_serves_every_role() -> None:
    instructions = dict(dockerfile_instructions())
    assert json.loads(instructions["ENTRYPOINT"]) == ["tini", "--"]
    command = json.loads(instructions["CMD"])
    invocation = parse_om(command)
    assert invocation.path == ("api",) and invocation.params["host"] == "0.0.0.0"
    assert str(invocation.params["port"]) in instructions["EXPOSE"].split()
    assert instructions["HEALTHCHECK"].endswith('CMD ["om-healthcheck"]')
    assert "deploy/healthcheck.py /usr/local/bin/om-healthcheck" in instructions["COPY"] or any(
        "om-healthcheck" in arg for key, arg in dockerfile_instructions() if key == "COPY"
    )


def test_the_console_script_the_image_runs_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["om"] == "om_api.cli:main"
    assert project["name"] == "observational-memory-service"
    assert any(dep.startswith("flower") for dep in project["optional-dependencies"]["server"])
    installs = [arg for key, arg in dockerfile_instructions() if key == "RUN" and "/wheels" in arg]
    assert all("[server]" in arg for arg in installs) and len(installs) == 2, installs
    assert f'"{project["name"]}[server]"' in installs[1], installs  # our wheel, by its name


def test_every_copied_path_exists_and_is_not_ignored() -> None:
    copies = [
        arg.split()[-2]
        for key, arg in dockerfile_instructions()
        if key == "COPY" and "--from" not in arg
    ]
    sources = [
        part
        for key, arg in dockerfile_instructions()
        if key == "COPY"
        for part in arg.split()[:-1]
        if not part.startswith("--")
    ]
    assert copies
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore, "the context must start empty and allow only what is copied"
    for source in sources:
        assert (ROOT / source).exists(), source
        assert source.rstrip("/").removeprefix("./") in allowed, f"{source} is ignored"
