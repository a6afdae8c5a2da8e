"""The erasure, retention and audit commands: om sessions erase, om subjects erase (through the
API, with the tenant's key), and om tenants erase, om tenants retention, om audit (on the
database directly, like om keys: --database-url, else OM_DATABASE_URL).

``om tenants erase`` runs the erasure job in this process (no worker needed), so it needs the
Redis the service uses (OM_REDIS_URL or --redis-url) to delete the tenant's keys there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from om_api.cli import render_erasure
from om_api.cli.admin_commands import RedisUrl
from om_api.cli.common import (
    ApiKey,
    ApiUrl,
    DatabaseUrl,
    JsonOutput,
    SessionArg,
    TenantArg,
    account_store,
    api_client,
    fail,
    show,
    sql_store,
)
from om_api.schemas import (
    MAX_AUDIT_EVENTS,
    MAX_RETENTION_DAYS,
    RetentionOut,
)
from om_workers.config import REDIS_REQUIRED, get_settings

if TYPE_CHECKING:
    pass

Wait = Annotated[
    bool, typer.Option("--wait", help="Wait until the erasure job has finished, then show it.")
]


def sessions_erase(
    session: SessionArg,
    wait: Wait = False,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Erase a session: at once it is gone (404 everywhere); a worker then deletes it, its
    memory, and its copies on workspaces with what those derived. Prints the erasure job."""
    with api_client(api_url, key) as client:
        ticket = client.erase_session(session)
        job = (
            client.wait_for_job(ticket.job_id, timeout_s=600) if wait else client.job(ticket.job_id)
        )
    show(job, as_json, render_erasure.show_erasure)


def subjects_erase(
    subject: Annotated[str, typer.Argument(metavar="SUBJECT", help="The metadata.subject value.")],
    wait: Wait = False,
    as_json: JsonOutput = False,
    api_url: ApiUrl = None,
    key: ApiKey = None,
) -> None:
    """Erase every session of the key's tenant whose metadata.subject is SUBJECT (one end
    user's data). Prints the erasure job."""
    with api_client(api_url, key) as client:
        ticket = client.erase_subject(subject)
        job = (
            client.wait_for_job(ticket.job_id, timeout_s=600) if wait else client.job(ticket.job_id)
        )
    show(job, as_json, render_erasure.show_erasure)


def tenants_erase(
    tenant: TenantArg,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: the tenant and all its data go for good.")
    ] = False,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
) -> None:
    """Erase a whole tenant: revoke its keys, erase every session (as om sessions erase does)
    and delete the tenant, here and now. Asks for --yes."""
    from om_api.server.convert import erasure_job_out
    from om_workers.coordination.connection import connect
    from om_workers.jobs.erase import run_erasure_job

    if not yes:
        fail(f"erasing tenant {tenant} deletes all its data for good; add --yes", 2)
    url = redis_url or get_settings().redis.url
    if not url:
        fail(f"{REDIS_REQUIRED}; or pass --redis-url", 2)
    with sql_store(database_url) as store:
        job = store.erasure.erase_tenant(tenant)
        client = connect(url)
        try:
            chunk = get_settings().erasure.chunk_entries
            run_erasure_job(store, client, job.id, chunk=chunk)
        finally:
            client.close()
        done = store.erasure.get_job(None, job.id)
    answer = erasure_job_out(done, done.error)
    show(answer, as_json, render_erasure.show_erasure)
    if done.state != "succeeded":
        raise typer.Exit(1)


def tenants_retention(
    tenant: TenantArg,
    days: Annotated[
        int | None,
        typer.Option(
            "--days",
            min=1,
            max=MAX_RETENTION_DAYS,
            help="Erase sessions idle (no write) for longer than this many days.",
        ),
    ] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Keep everything (the default).")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Sessions listed.")] = 100,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Show or set a tenant's retention period, with the dry run: the sessions a retention
    pass (Celery beat, every OM_RETENTION_INTERVAL_S) would erase now. Writes nothing
    without --days or --clear."""
    from om_workers.jobs.retention import retention_dry_run
    from om_workers.store import AccountStore
    from om_workers.store.unit_of_work import utc_now

    if days is not None and clear:
        fail("--days and --clear exclude each other", 2)
    with sql_store(database_url) as store:
        accounts = AccountStore(store.engine)
        if days is not None or clear:
            accounts.set_retention_days(tenant, None if clear else days)
        run = retention_dry_run(store, accounts, tenant, now=utc_now(), limit=limit)
    answer = RetentionOut(
        tenant_id=run.tenant_id,
        retention_days=run.retention_days,
        cutoff=run.cutoff,
        would_erase=list(run.session_ids),
    )
    show(answer, as_json, render_erasure.show_retention)


def audit(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's events.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_AUDIT_EVENTS, help="Events shown.")
    ] = 50,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """The audit trail, newest first: who (key id) erased, exported or imported which session,
    subject or tenant, when, and how it ended. Never content."""
    # Imported here: the API's conversions bring FastAPI, which no other command needs.
    from om_api.server.convert import audit_out

    with account_store(database_url) as accounts:
        events = accounts.audit_events(tenant, limit)
    answer = audit_out(events)
    show(answer, as_json, render_erasure.show_audit)
