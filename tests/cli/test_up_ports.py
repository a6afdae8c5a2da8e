"""``om up`` (and so ``make up``) with a port already in use: one line naming the option and
the variable that choose another port, exit code 2, before anything is started."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from om_api.cli.stack import StackConfig, port_in_use, taken_port
from tests.cli.test_commands import om


@contextmanager
def occupied() -> Iterator[int]:
    """A port of 127.0.0.1 something listens on, for as long as the block runs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_taken_api_port_is_one_line_naming_how_to_change_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    with occupied() as port:
        by_option = om("up", "--api-port", str(port), "--flower-port", "0", "--database-url", url)
        by_variable = om("up", "--flower-port", "0", "--database-url", url, OM_API_PORT=str(port))
    for result in (by_option, by_variable):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert lines == [
            f"om: API port {port} on 127.0.0.1 is already in use: choose another with "
            "--api-port, OM_API_PORT or make up API_PORT=..."
        ], result.stderr
        assert result.stdout == ""  # nothing started: no Redis, no migration, no child
    assert not (tmp_path / "om.db").exists()


def test_a_taken_flower_port_names_the_flower_option(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'om.db'}"
    with occupied() as port:
        result = om("up", "--api-port", "0", "--database-url", url, OM_FLOWER_PORT=str(port))
    assert result.returncode == 2
    assert "--flower-port, OM_FLOWER_PORT or make up FLOWER_PORT=..." in result.stderr


def test_port_checks() -> None:
    with occupied() as port:
        assert port_in_use("127.0.0.1", port)
        config = StackConfig(database_url="sqlite://", api_port=0, flower_port=port)
        assert taken_port(config) == ("Flower", port)
        # Without Flower its port is not needed, and port 0 is any free port.
        no_flower = StackConfig(
            database_url="sqlite://", api_port=0, flower_port=port, flower=False
        )
        assert taken_port(no_flower) is None
    assert not port_in_use("127.0.0.1", port)
