"""The client-only install: ``pip install .`` of the checkout in a fresh venv brings httpx and
pydantic, not the server's packages, and the client imports and works with them alone."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("celery", "fastapi", "sqlalchemy", "redis", "psycopg", "uvicorn", "typer")

PROBE = """
import sys
from om_api.client import OMClient, InvalidRequest
from om_api.schemas import MessageWire
client = OMClient("http://127.0.0.1:9", "om_test_key")
client.close()
loaded = sorted(m for m in {server} if m in sys.modules)
print("loaded:", ",".join(loaded))
"""


def test_the_client_installs_and_imports_without_the_server_packages(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    installed = {line.split("==")[0].replace("_", "-") for line in listed.split()}
    assert not installed & {name.replace("_", "-") for name in SERVER_ONLY}, installed
    probe = subprocess.run(
        [python, "-c", PROBE.format(server=SERVER_ONLY)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: the installed package, not the source tree
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "loaded:"
    om = subprocess.run([env / "bin" / "om", "status"], capture_output=True, text=True, check=False)
    assert om.returncode == 2, om.stderr
    # Both ways to the server extra, and our own distribution's name, never the stranger's.
    assert "'.[server]'" in om.stderr and "'observational-memory-service[server]'" in om.stderr
    assert len(om.stderr.strip().splitlines()) == 1
