"""The ``om`` command line: run the services, the embedded stack, the demo, and admin chores.

Service commands (``om api``, ``om worker``, ``om beat``, ``om flower``) are what a deployment
runs, one per process; ``om up`` starts all four as child processes (see :mod:`om_api.cli.stack`).
``om status``/``om view``/``om recall`` talk to a running API through :class:`OMClient`.
Errors print one line to stderr and exit non-zero (1 for a failure, 2 for bad usage).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from pydantic import SecretStr

from om_api.evaluation.command import eval_app
from om_workers.config import get_settings
from om_workers.errors import OMWorkersError

HOST = "127.0.0.1"

app = typer.Typer(
    name="om",
    help="Observational memory as a service: API, workers, embedded stack and tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
keys_app = typer.Typer(help="Tenant API keys.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(eval_app, name="eval")

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


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"om: {message}", err=True)
    raise typer.Exit(code)


def _celery_app() -> Any:
    # Imported here: building the app reads OM_REDIS_URL, which only the service commands need.
    from om_workers.jobs.tasks import get_app

    try:
        return get_app()
    except OMWorkersError as exc:
        _fail(f"{exc} (om up starts a private Redis and sets it for its children)", 2)


# Services ------------------------------------------------------------------------------------


def _log_level(option: str | None) -> str:
    """The option, else OM_LOG_LEVEL (INFO by default), upper case."""
    return (option or get_settings().log_level).upper()


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


@app.command()
def api(
    host: HostOption = HOST,
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    log_level: LogLevel = None,
) -> None:
    """Serve the HTTP API (uvicorn, ``om_api.server.app:create_app``). Needs OM_REDIS_URL.

    The app is built before the server starts, so a setting it cannot use (OM_REDIS_URL
    unset, an unusable URL, invalid OM_SETTINGS_JSON ...) is one line and exit code 2, as for
    ``om worker``, instead of uvicorn's traceback.
    """
    import pydantic
    import uvicorn

    try:
        level = _log_level(log_level).lower()
    except pydantic.ValidationError as exc:
        _fail(f"invalid OM_* settings: {_first_error(exc)}", 2)
    config = uvicorn.Config(
        _api_factory, factory=True, host=host, port=port, log_level=level, access_log=False
    )
    try:
        # Loads the app through the factory (after uvicorn configured its logging, as
        # ``uvicorn.run`` would); the server then uses the loaded app.
        config.load()
    except _ApiStartupError as exc:
        _fail(str(exc), 2)
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise typer.Exit(3)  # uvicorn logged why (the port is taken ...); its startup-failure code


class _ApiStartupError(Exception):
    """The API app could not be built from the ``OM_*`` settings (one line, no traceback)."""

    def __init__(self, message: str) -> None:
        if "OM_REDIS_URL" in message and "om up" not in message:
            message += " (om up starts a private Redis and sets it for its children)"
        super().__init__(message)


def _first_error(exc: Any) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc).splitlines()[0]
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "settings"
    return f"{where}: {first.get('msg', '')}"


def _api_factory() -> Any:
    import pydantic

    from om_api.server.app import create_app
    from om_core.errors import ObservationalMemoryError

    try:
        return create_app()
    except (OMWorkersError, ObservationalMemoryError) as exc:
        raise _ApiStartupError(str(exc)) from None
    except pydantic.ValidationError as exc:
        raise _ApiStartupError(f"invalid settings: {_first_error(exc)}") from None
    except (TypeError, ValueError) as exc:
        raise _ApiStartupError(f"invalid settings: {exc}") from None


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", help="Task slots (default: OM_WORKER_CONCURRENCY)."),
    ] = None,
    name: Annotated[str, typer.Option("--name", "-n", help="Celery node name.")] = "om-worker@%h",
    log_level: LogLevel = None,
) -> None:
    """Run a Celery worker on queue ``om`` (threads pool, task events on). Needs OM_REDIS_URL."""
    from om_workers.jobs.celery_app import QUEUE

    celery_app = _celery_app()
    slots = concurrency if concurrency is not None else get_settings().worker_concurrency
    argv = [
        "worker", "-Q", QUEUE, "-P", "threads", "-c", str(slots), "-E",
        "-n", name, f"--loglevel={_log_level(log_level)}",
    ]  # fmt: skip
    # Not worker_main: it drops the worker's exit code, so a worker that died of an
    # unrecoverable error exited 0 and a supervisor restarting on failure left it dead.
    raise typer.Exit(celery_app.start(argv=argv) or 0)


@app.command()
def beat(log_level: LogLevel = None) -> None:
    """Run Celery beat: schedules ``om.reconcile``. Needs OM_REDIS_URL.

    The schedule is kept in memory (no shelve file): a missed tick is harmless, because
    reconciling is idempotent and the next one runs within the interval.
    """
    celery_app = _celery_app()
    argv = ["beat", "-S", "celery.beat.Scheduler", f"--loglevel={_log_level(log_level)}"]
    raise typer.Exit(celery_app.start(argv=argv) or 0)


@app.command()
def flower(
    host: HostOption = HOST,
    port: Annotated[int, typer.Option(help="TCP port.")] = 5555,
    basic_auth: FlowerAuth = None,
) -> None:
    """Run Flower, the Celery monitor, behind basic auth. Needs OM_REDIS_URL."""
    from om_api.cli.stack import generate_basic_auth

    celery_app = _celery_app()
    basic_auth = basic_auth or _secret(get_settings().flower_basic_auth)
    if not basic_auth:
        basic_auth = generate_basic_auth()
        typer.echo(f"flower basic auth (generated): {basic_auth}")
    elif ":" not in basic_auth:
        _fail("OM_FLOWER_BASIC_AUTH must be user:password", 2)
    argv = ["flower", f"--address={host}", f"--port={port}", f"--basic-auth={basic_auth}"]
    from om_workers.logs import configure_json_logging

    secret = basic_auth.partition(":")[2]
    configure_json_logging([None], get_settings().log_level, lambda: (secret,))
    raise typer.Exit(celery_app.start(argv=argv) or 0)


# Embedded stack and demo ----------------------------------------------------------------------


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGHUP take the same path as Ctrl-C, so the stack's cleanup always runs.
    raise KeyboardInterrupt


def _install_stop_handlers() -> None:
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)


@app.command()
def up(
    host: HostOption = HOST,
    api_port: Annotated[int, typer.Option(help="API port (0: any free port).")] = 8000,
    flower_port: Annotated[int, typer.Option(help="Flower port (0: any free port).")] = 5555,
    database_url: DatabaseUrl = None,
    log_dir: Annotated[
        Path | None, typer.Option(help="Keep the children's logs here (default: temporary).")
    ] = None,
    flower_basic_auth: FlowerAuth = None,
) -> None:
    """Run the embedded stack in the foreground: Redis (private unless OM_REDIS_URL), migrated
    database, API, worker, beat and Flower. Prints URLs and a dev API key; Ctrl-C stops all."""
    from om_api.cli.stack import Stack, StackConfig, StackError

    settings = get_settings()
    config = StackConfig(
        database_url=database_url or settings.database_url,
        redis_url=settings.redis_url,
        host=host,
        api_port=api_port,
        flower_port=flower_port,
        flower_basic_auth=flower_basic_auth or _secret(settings.flower_basic_auth),
        log_dir=log_dir,
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
        typer.echo("Ready. Ctrl-C stops everything.", err=False)
        sys.stdout.flush()
        while True:
            stack.check_alive()
            time.sleep(0.5)
    except KeyboardInterrupt:
        typer.echo("stopping ...")
    except (StackError, OMWorkersError) as exc:
        stack.stop()
        _fail(str(exc))
    finally:
        stack.stop()
    typer.echo("stopped.")


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
        _fail("interrupted", 130)


# Admin -----------------------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseUrl = None) -> None:
    """Migrate the database to the newest schema (safe to run again)."""
    from om_workers.store import current_revision, upgrade

    url = database_url or get_settings().database_url
    try:
        upgrade(url)
        revision = current_revision(url)
    except OMWorkersError as exc:
        _fail(str(exc))
    typer.echo(f"database at revision {revision}")


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant id (created if missing).")],
    label: Annotated[str, typer.Option(help="Note kept with the key.")] = "",
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key for a tenant and print it once (the store keeps only its hash)."""
    from om_workers.errors import TenantExistsError
    from om_workers.store import SqlStore

    store = SqlStore.from_url(database_url or get_settings().database_url)
    try:
        with contextlib.suppress(TenantExistsError):
            store.create_tenant(tenant)
        created = store.create_api_key(tenant, label=label)
    except OMWorkersError as exc:
        _fail(str(exc))
    finally:
        store.close()
    typer.echo(created.plaintext)
    typer.echo(f"key id {created.key_id} for tenant {created.tenant_id}; shown once", err=True)


# Client commands -------------------------------------------------------------------------------


def _target(api_url: str | None, key: str | None) -> tuple[str, str]:
    """The API URL and key: the options, else OM_API_URL / OM_API_KEY."""
    settings = get_settings()
    return api_url or settings.api_url, key or _secret(settings.api_key) or ""


@app.command()
def flush(
    session: str,
    force: Annotated[
        bool, typer.Option("--force", help="Observe now, below the token threshold too.")
    ] = False,
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the job to finish (0: don't).")
    ] = 60.0,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Request a flush of a session and say what it did."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*_target(api_url, key)) as client:
            accepted = client.flush(session, force=force)
            if wait <= 0:
                typer.echo(
                    f"job {accepted.job_id} {'coalesced' if accepted.coalesced else 'queued'}"
                )
                return
            job = client.wait_for_job(accepted.job_id, timeout_s=wait)
    except OMClientError as exc:
        _fail(str(exc))
    counts = ", ".join(f"{k} {v}" for k, v in job.counts.items()) or "nothing recorded"
    typer.echo(f"job {job.id} {job.state}: {counts}")
    for line in (job.reason, job.error):
        if line:
            typer.echo(f"  {line}")


@app.command()
def context(
    session: str,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Token budget (default: the server's)."),
    ] = None,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """The context the next turn gets: memory, then the recent messages."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*_target(api_url, key)) as client:
            result = client.context(session, max_tokens=max_tokens)
    except OMClientError as exc:
        _fail(str(exc))
    memory, recent = result.blocks
    unobserved = result.unobserved
    typer.echo(memory.text or "(no memory yet)")
    typer.echo("")
    typer.echo(recent.text or "(no messages)")
    typer.echo(
        f"\n{unobserved.messages} messages ({unobserved.tokens} tokens) not in memory yet; "
        f"budget {result.max_tokens} tokens",
        err=True,
    )


@app.command()
def status(session: str, api_url: ApiUrl = None, key: ApiKey = None) -> None:
    """Memory status of a session (om:status)."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*_target(api_url, key)) as client:
            result = client.status(session)
    except OMClientError as exc:
        _fail(str(exc))
    typer.echo(result.model_dump_json(indent=2))


@app.command()
def view(
    session: str,
    full: Annotated[bool, typer.Option("--full", help="All active memory, not just visible.")] = (
        False
    ),
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Render a session's observational memory (om:view)."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*_target(api_url, key)) as client:
            result = client.view(session, full=full)
    except OMClientError as exc:
        _fail(str(exc))
    typer.echo(result.text)


@app.command()
def recall(
    session: str,
    memory_id: Annotated[str, typer.Argument(metavar="ID", help="Observation/reflection id.")],
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Recall one memory item with its source messages."""
    from om_api.client import OMClient, OMClientError

    try:
        with OMClient(*_target(api_url, key)) as client:
            result = client.recall(session, memory_id)
    except OMClientError as exc:
        _fail(str(exc))
    typer.echo(result.model_dump_json(indent=2))
