"""What the ``om`` commands share: one-line failures, the options and arguments several
commands take (one spelling each, so usage reads the same everywhere), and the API client the
client commands talk through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer
from pydantic import BaseModel, SecretStr

from om_workers.config import get_settings

if TYPE_CHECKING:
    from om_api.client import OMClient
    from om_workers.store import AccountStore, SqlStore

HOST = "127.0.0.1"

HostOption = Annotated[str, typer.Option(help="Interface to bind (127.0.0.1: this machine).")]
LogLevel = Annotated[
    str | None, typer.Option("--log-level", help="Log level (default: OM_LOG_LEVEL, else INFO).")
]
ApiUrl = Annotated[
    str | None, typer.Option("--api", help="Base URL of the om API (default: OM_API_URL).")
]
ApiKey = Annotated[
    str | None,
    typer.Option("--key", help="API key, Bearer (default: OM_API_KEY).", show_default=False),
]
FlowerAuth = Annotated[
    str | None,
    typer.Option(
        "--flower-basic-auth",
        help="user:password for Flower (default: OM_FLOWER_BASIC_AUTH, else generated).",
        show_default=False,
    ),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", help="SQLAlchemy URL (default: OM_DATABASE_URL, else ./om.db)."),
]
JsonOutput = Annotated[
    bool, typer.Option("--json", help="Print the API's JSON answer instead of text (for scripts).")
]
SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")]
TenantArg = Annotated[str, typer.Argument(metavar="TENANT", help="Tenant id.")]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``om: message`` to stderr and exit with ``code`` (1: failed, 2: bad usage)."""
    typer.echo(f"om: {message}", err=True)
    raise typer.Exit(code)


def secret(value: SecretStr | None) -> str | None:
    """The plain value of an optional secret setting."""
    return value.get_secret_value() if value is not None else None


M = TypeVar("M", bound=BaseModel)


def print_json(model: BaseModel) -> None:
    """Print a wire model exactly as the API sends it (indented)."""
    typer.echo(model.model_dump_json(indent=2))


def show(answer: M, as_json: bool, for_people: Callable[[M], object]) -> None:
    """Print a command's answer: its wire JSON with ``--json`` (:func:`print_json`), else
    ``for_people(answer)`` (a :mod:`om_api.cli.render` function)."""
    if as_json:
        print_json(answer)
    else:
        for_people(answer)


def target(api_url: str | None, key: str | None) -> tuple[str, str]:
    """The API URL and key: the options, else OM_API_URL / OM_API_KEY (the key may be "")."""
    settings = get_settings()
    return api_url or settings.cli.api_url, key or secret(settings.cli.api_key) or ""


@contextmanager
def api_client(api_url: str | None, key: str | None) -> Iterator[OMClient]:
    """An :class:`~om_api.client.OMClient` on ``--api``/``--key`` (else OM_API_URL and
    OM_API_KEY); any client error inside the block ends the command with one line, exit 1."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*target(api_url, key)) as client:
            yield client
    except OMClientError as exc:
        fail(str(exc))


@contextmanager
def sql_store(database_url: str | None) -> Iterator[SqlStore]:
    """The store on ``database_url`` (else OM_DATABASE_URL), for the commands that work on the
    database directly: a store that cannot be opened ends the command with one line, exit 2;
    the service's errors inside the block with one line, exit 1."""
    from om_core.errors import ObservationalMemoryError
    from om_workers.errors import OMWorkersError
    from om_workers.store import SqlStore

    try:
        store = SqlStore.from_url(database_url or get_settings().store.url)
    except OMWorkersError as exc:
        fail(str(exc), 2)
    try:
        yield store
    except ObservationalMemoryError as exc:
        fail(str(exc))
    finally:
        store.close()


@contextmanager
def account_store(database_url: str | None) -> Iterator[AccountStore]:
    """The account store (tenants, keys, limits) on ``database_url`` (else OM_DATABASE_URL),
    with the same endings as :func:`sql_store`."""
    from om_workers.errors import OMWorkersError
    from om_workers.store import AccountStore

    try:
        accounts = AccountStore.from_url(database_url or get_settings().store.url)
    except OMWorkersError as exc:
        fail(str(exc), 2)
    try:
        yield accounts
    except OMWorkersError as exc:
        fail(str(exc))
    finally:
        accounts.close()
