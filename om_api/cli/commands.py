"""The ``om`` command line: run the services, the embedded stack, the demo, and admin chores.

Service commands (``om api``, ``om worker``, ``om beat``, ``om flower``) are what a deployment
runs, one per process; ``om up`` starts all four as child processes (see :mod:`om_api.cli.stack`).
The client commands (:mod:`om_api.cli.client_commands`) talk to a running API; the operator
commands (:mod:`om_api.cli.admin_commands`) to the database. Errors print one line to stderr
and exit non-zero (1 for a failure, 2 for bad usage).

Help text comes from the command docstrings, so those are plain text: no markup of any kind.
Help is rendered without rich (``rich_markup_mode=None``) so that flags read as flags
(``--full``, not ``--full <bool>``) and nothing in a docstring is taken for markup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from om_api.cli import (
    admin_commands,
    client_commands,
    doctor_command,
    erasure_commands,
    mcp_command,
    portability_commands,
    settings_command,
    usage_commands,
    webhook_commands,
)
from om_api.cli.common import (
    HOST,
    DatabaseUrl,
    FlowerAuth,
    HostOption,
    LogLevel,
    fail,
    secret,
)
from om_api.cli.search_commands import search_app
from om_api.evaluation.command import eval_app
from om_workers import heap
from om_workers.config import REDIS_REQUIRED, get_settings
from om_workers.errors import ConfigError, OMWorkersError

if TYPE_CHECKING:
    from om_api.cli.stack import StackInfo

app = typer.Typer(
    name="om",
    help="Observational memory as a service: API, workers, embedded stack and tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
keys_app = typer.Typer(
    help="Tenant API keys (in the database: --database-url).", no_args_is_help=True
)
tenants_app = typer.Typer(
    help="Tenant settings (in the database: --database-url).", no_args_is_help=True
)
sessions_app = typer.Typer(
    help="List the key's tenant's sessions (no command), or erase, export or import one.",
    invoke_without_command=True,
)
subjects_app = typer.Typer(
    help="End users named by sessions' metadata.subject (through the API).", no_args_is_help=True
)
app.add_typer(db_app, name="db")
app.add_typer(sessions_app, name="sessions")
app.add_typer(subjects_app, name="subjects")
app.add_typer(tenants_app, name="tenants")
app.add_typer(keys_app, name="keys")
app.add_typer(eval_app, name="eval")
app.add_typer(search_app, name="search")
webhooks_app = typer.Typer(
    help="A tenant's signed webhooks (in the database: --database-url).", no_args_is_help=True
)
app.add_typer(webhooks_app, name="webhooks")
webhooks_app.command("add")(webhook_commands.webhooks_add)
webhooks_app.command("list")(webhook_commands.webhooks_list)
webhooks_app.command("remove")(webhook_commands.webhooks_remove)
webhooks_app.command("deliveries")(webhook_commands.webhooks_deliveries)
webhooks_app.command("redeliver")(webhook_commands.webhooks_redeliver)


def _celery_app() -> Any:
    # Imported here: building the app reads OM_REDIS_URL, which only the service commands need.
    from om_workers.celery.app import get_app

    if not get_settings().redis.url:
        fail(REDIS_REQUIRED, 2)
    try:
        return get_app()
    except OMWorkersError as exc:
        fail(str(exc), 2)


# Services ------------------------------------------------------------------------------------


def _log_level(option: str | None) -> str:
    """The option, else OM_LOG_LEVEL (INFO by default), upper case."""
    return (option or get_settings().log_level).upper()


@app.command()
def api(
    host: HostOption = HOST,
    port: Annotated[
        int | None, typer.Option(help="TCP port (default: OM_API_PORT, else 8000).")
    ] = None,
    log_level: LogLevel = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="API processes on the one port (default: OM_API_WORKERS, else 1); about one "
            "per core the API may use.",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (uvicorn, om_api.server.app:create_app). Needs OM_REDIS_URL.

    The app is built before the server starts, so a setting it cannot use (OM_REDIS_URL
    unset, an unusable URL, invalid OM_SETTINGS_JSON ...) is one line and exit code 2, as for
    om worker, instead of uvicorn's traceback. With --workers N, N processes serve the port,
    each on a socket of its own so that the kernel spreads connections over them (one that
    dies is started again); rate limits, coalescing and the fair queue live in Redis, so they
    hold across them as across replicas.
    """
    import pydantic
    import uvicorn

    try:
        level = _log_level(log_level).lower()
        if log_level is not None:
            # The level of the whole service, not only uvicorn's: the app's own log (a line
            # a request) follows OM_LOG_LEVEL, here and in every process started below.
            os.environ["OM_LOG_LEVEL"] = level.upper()
            get_settings.cache_clear()
        port = port if port is not None else get_settings().api.port
        workers = workers if workers is not None else get_settings().api.workers
    except pydantic.ValidationError as exc:
        fail(f"invalid OM_* settings: {_first_error(exc)}", 2)
    except ValueError as exc:  # pydantic-settings' SettingsError: OM_SETTINGS_JSON is not JSON
        fail(f"invalid OM_* settings: {exc}", 2)
    if workers > 1:
        _serve_processes(host, port, level, workers)
        return
    config = uvicorn.Config(
        _api_factory, factory=True, host=host, port=port, log_level=level, access_log=False
    )
    try:
        # Loads the app through the factory (after uvicorn configured its logging, as
        # ``uvicorn.run`` would); the server then uses the loaded app.
        config.load()
    except _ApiStartupError as exc:
        fail(str(exc), 2)
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise typer.Exit(3)  # uvicorn logged why (the port is taken ...); its startup-failure code


def _serve_processes(host: str, port: int, level: str, workers: int) -> None:
    """Serve the API from ``workers`` uvicorn processes, each building its own app through the
    factory (by import path) and accepting on a socket of its own
    (:mod:`om_api.cli.api_processes`), after building one here so that bad settings fail as
    one line."""
    import uvicorn

    from om_api.cli import api_processes

    try:
        _api_factory()
    except _ApiStartupError as exc:
        fail(str(exc), 2)
    config = uvicorn.Config(
        f"{__name__}:_api_factory",
        factory=True,
        host=host,
        port=port,
        log_level=level,
        access_log=False,
        workers=workers,
    )
    try:
        served = api_processes.serve(config, host, port, workers)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc}", 3)
    if not served:
        raise typer.Exit(3)  # a process could not start; uvicorn logged why


class _ApiStartupError(ConfigError):
    """The API app could not be built from the OM_* settings (one line, no traceback).

    Never a ``TypeError``: uvicorn turns a factory's ``TypeError`` into its own exit."""

    def __init__(self, message: str) -> None:
        if "OM_REDIS_URL" in message and "om up" not in message:
            message += " (om up starts a private Redis and sets it for its children)"
        super().__init__(message)


def _first_error(exc: Any) -> str:
    from om_workers.settings_env import first_error

    return first_error(exc)


def _api_factory() -> Any:
    import pydantic

    from om_core.errors import ObservationalMemoryError

    try:
        # What the app is built of stays out of the collector's sight once built.
        with heap.building():
            from om_api.server.app import create_app

            return create_app()
    except ObservationalMemoryError as exc:
        raise _ApiStartupError(str(exc)) from None
    except pydantic.ValidationError as exc:
        raise _ApiStartupError(f"invalid settings: {_first_error(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise _ApiStartupError(f"invalid settings: {exc}") from None


def _run_celery(celery_app: Any, argv: list[str]) -> int:
    """Run the ``celery`` command ``argv`` (``worker``, ``beat``, ``flower`` ...) on
    ``celery_app`` in this process, until it stops; returns its exit code (0 when it stopped
    without one: beat and Flower on a signal).

    Not ``Celery.start``/``worker_main``: they run the command through click in non-standalone
    mode, where click *returns* the code given to ``ctx.exit`` instead of raising it, and they
    drop that return value; so a worker that died of an unrecoverable error (Celery logs
    ``Unrecoverable error`` and stops with exit code 1) exited 0, and a supervisor that
    restarts on failure left it dead. An exception the command lets out (beat's scheduler
    failing, Flower's port taken) propagates: Python exits 1 with its traceback.
    """
    from celery.bin.celery import celery as celery_command  # type: ignore[import-untyped]

    # The app goes in as the default of celery's --app option, as Celery.start does.
    app_option = next(param for param in celery_command.params if param.name == "app")
    app_option.default = celery_app
    try:
        code = celery_command.main(args=argv, prog_name="celery", standalone_mode=False)
    finally:
        app_option.default = None
    return code if isinstance(code, int) else 0


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", help="Task slots (default: OM_WORKER_CONCURRENCY)."),
    ] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="Celery node name.")] = "om-worker@%h",
    log_level: LogLevel = None,
) -> None:
    """Run a Celery worker on queue om (threads pool, task events on). Needs OM_REDIS_URL."""
    try:
        with heap.building():
            from om_workers.celery.app import worker_deps
            from om_workers.celery.config import QUEUE

            celery_app = _celery_app()
            # Built now, so a bad OM_PROMPTS_FILE, OM_PROVIDER or OM_DATABASE_URL stops the
            # worker before it takes a message, not at its first flush.
            worker_deps()
    except OMWorkersError as exc:
        fail(str(exc), 2)
    slots = concurrency if concurrency is not None else get_settings().worker.concurrency
    argv = [
        "worker", "-Q", QUEUE, "-P", "threads", "-c", str(slots), "-E",
        "-n", name, f"--loglevel={_log_level(log_level)}",
    ]  # fmt: skip
    raise typer.Exit(_run_celery(celery_app, argv))


@app.command()
def beat(log_level: LogLevel = None) -> None:
    """Run Celery beat: schedules om.reconcile. Needs OM_REDIS_URL.

    The schedule is kept in memory (no shelve file): a missed tick is harmless, because
    reconciling is idempotent and the next one runs within the interval.
    """
    celery_app = _celery_app()
    argv = ["beat", "-S", "celery.beat.Scheduler", f"--loglevel={_log_level(log_level)}"]
    raise typer.Exit(_run_celery(celery_app, argv))


@app.command()
def flower(
    host: HostOption = HOST,
    port: Annotated[
        int | None, typer.Option(help="TCP port (default: OM_FLOWER_PORT, else 5555).")
    ] = None,
    basic_auth: FlowerAuth = None,
) -> None:
    """Run Flower, the Celery monitor, behind basic auth. Needs OM_REDIS_URL."""
    from om_api.cli.stack import generate_basic_auth

    celery_app = _celery_app()
    port = port if port is not None else get_settings().flower.port
    basic_auth = basic_auth or secret(get_settings().flower.basic_auth)
    if not basic_auth:
        basic_auth = generate_basic_auth()
        typer.echo(f"flower basic auth (generated): {basic_auth}")
    elif ":" not in basic_auth:
        fail("OM_FLOWER_BASIC_AUTH must be user:password", 2)
    argv = ["flower", f"--address={host}", f"--port={port}", f"--basic-auth={basic_auth}"]
    from om_workers.logs import configure_json_logging

    password = basic_auth.partition(":")[2]
    configure_json_logging([None], get_settings().log_level, lambda: (password,))
    raise typer.Exit(_run_celery(celery_app, argv))


# Embedded stack and demo ----------------------------------------------------------------------


_PORT_KNOBS = {
    "API": ("--api-port", "OM_API_PORT", "API_PORT"),
    "Flower": ("--flower-port", "OM_FLOWER_PORT", "FLOWER_PORT"),
}
"""How a user picks another port for each part of om up: option, variable, make variable."""


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGHUP take the same path as Ctrl-C, so the stack's cleanup always runs.
    raise KeyboardInterrupt


def _install_stop_handlers() -> None:
    # SIGINT too: Python leaves it ignored when it was ignored at start (a command started in
    # the background of a script, and everything it starts), and Ctrl-C must still stop.
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _raise_interrupt)


@app.command()
def up(
    host: HostOption = HOST,
    api_port: Annotated[
        int | None,
        typer.Option(help="API port (default: OM_API_PORT, else 8000; 0: any free port)."),
    ] = None,
    flower_port: Annotated[
        int | None,
        typer.Option(help="Flower port (default: OM_FLOWER_PORT, else 5555; 0: any free port)."),
    ] = None,
    database_url: DatabaseUrl = None,
    log_dir: Annotated[
        Path | None, typer.Option(help="Keep the children's logs here (default: temporary).")
    ] = None,
    flower_basic_auth: FlowerAuth = None,
) -> None:
    """Run the embedded stack in the foreground: Redis (private unless OM_REDIS_URL), migrated
    database, API, worker, beat and Flower. Prints URLs, a dev API key and the export lines
    that point another terminal at this stack; Ctrl-C stops all.

    A port already in use is reported before anything starts (exit code 2), naming the option
    and the variable that choose another one.
    """
    from om_api.cli.stack import Stack, StackConfig, StackError, taken_port

    settings = get_settings()
    config = StackConfig(
        database_url=database_url or settings.store.url,
        redis_url=settings.redis.url,
        host=host,
        api_port=api_port if api_port is not None else settings.api.port,
        flower_port=flower_port if flower_port is not None else settings.flower.port,
        flower_basic_auth=flower_basic_auth or secret(settings.flower.basic_auth),
        log_dir=log_dir,
    )
    taken = taken_port(config)
    if taken is not None:
        what, port = taken
        option, variable, make = _PORT_KNOBS[what]
        fail(
            f"{what} port {port} on {host} is already in use: choose another with "
            f"{option}, {variable} or make up {make}=...",
            2,
        )
    _install_stop_handlers()
    stack = Stack(config, say=typer.echo)
    try:
        info = stack.start()
        typer.echo("")
        typer.echo(f"API       {info.api_url}   (docs: {info.api_url}/docs)")
        typer.echo(f"Flower    {info.flower_url}   (basic auth {info.flower_basic_auth})")
        typer.echo(f"Redis     {info.redis_url}")
        typer.echo(f"Tenant    {info.tenant_id}")
        typer.echo(f"API key   {info.api_key}")
        typer.echo(f"Logs      {info.log_dir}")
        typer.echo(f"PIDs      {json.dumps(dict(info.pids))}")
        typer.echo("")
        typer.echo("In another terminal, for om worker, om queue, om keys, om sessions ...:")
        for line in export_lines(info):
            typer.echo(f"  {line}")
        typer.echo("Ready. Ctrl-C stops everything.", err=False)
        sys.stdout.flush()
        while True:
            stack.check_alive()
            time.sleep(0.5)
    except KeyboardInterrupt:
        typer.echo("stopping ...")
    except (StackError, OMWorkersError) as exc:
        stack.stop()
        fail(str(exc))
    finally:
        stack.stop()
    typer.echo("stopped.")


def export_lines(info: StackInfo) -> list[str]:
    """The shell lines that point a second terminal at a running stack: its API and dev key
    (client commands), its Redis (om worker, om beat, om flower, om queue) and its database
    (om keys, om tenants), a relative SQLite path made absolute so any directory works."""
    from sqlalchemy.engine import make_url

    database_url = info.database_url
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database_url = str(url.set(database=str(Path(url.database).resolve())))
    pairs = (
        ("OM_API_URL", info.api_url),
        ("OM_API_KEY", info.api_key),
        ("OM_REDIS_URL", info.redis_url),
        ("OM_DATABASE_URL", database_url),
    )
    return [f"export {name}={shlex.quote(value)}" for name, value in pairs]


@app.command()
def demo(
    runs: Annotated[int, typer.Option(help="Agent runs (one flush after each).")] = 12,
) -> None:
    """Start the embedded stack, drive a scripted tool-heavy agent session through the client
    (a flush after each run), print the context blocks against the raw history, and one recall.
    Needs no LLM key: the offline extractive provider does the memory work."""
    from om_api.cli.demo import run_demo

    _install_stop_handlers()
    try:
        run_demo(runs=runs)
    except KeyboardInterrupt:
        fail("interrupted", 130)


# Admin and client commands (defined in their own modules) ------------------------------------

db_app.command("upgrade")(admin_commands.db_upgrade)
keys_app.command("create")(admin_commands.keys_create)
keys_app.command("list")(admin_commands.keys_list)
keys_app.command("revoke")(admin_commands.keys_revoke)
tenants_app.command("limits")(admin_commands.tenants_limits)
tenants_app.command("erase")(erasure_commands.tenants_erase)
tenants_app.command("retention")(erasure_commands.tenants_retention)
app.command(name="queue")(admin_commands.queue)
sessions_app.callback(invoke_without_command=True)(client_commands.sessions)
sessions_app.command("export")(portability_commands.sessions_export)
sessions_app.command("import")(portability_commands.sessions_import)
tenants_app.command("export")(portability_commands.tenants_export)
app.command(name="audit")(erasure_commands.audit)
app.command(name="usage")(usage_commands.usage)
app.command(name="doctor")(doctor_command.doctor)
sessions_app.command("erase")(erasure_commands.sessions_erase)
subjects_app.command("erase")(erasure_commands.subjects_erase)
for _command in (
    client_commands.link,
    client_commands.unlink,
    client_commands.flush,
    client_commands.context,
    client_commands.status,
    client_commands.view,
    client_commands.recall,
):
    app.command()(_command)
app.command(name="mcp")(mcp_command.mcp)
app.command(name="settings")(settings_command.settings)
