"""Operator commands that work on the database directly (no API needed, so they also bootstrap
a fresh deployment): om db upgrade, om keys create, om keys list, om keys revoke, om tenants
limits; and om queue, which reads the fair queue in Redis.

They use --database-url, else OM_DATABASE_URL, the same store the API reads. A revocation
committed here refuses the key on every API replica within ``OM_API_KEY_CACHE_S`` (the API
keeps a key it has looked up for that long). :mod:`om_api.cli.commands`
registers these on the ``om db``, ``om keys`` and ``om tenants`` groups.
"""

from __future__ import annotations

import contextlib
import re
from typing import Annotated, Any

import typer

from om_api.cli import render
from om_api.cli.common import (
    DatabaseUrl,
    JsonOutput,
    TenantArg,
    account_store,
    fail,
    print_json,
    show,
)
from om_api.schemas import PATH_ID_PATTERN, ApiKeyOut, ApiKeysOut, KeyOut
from om_workers.config import REDIS_REQUIRED, get_settings
from om_workers.errors import OMWorkersError

DB_WAIT_S = 60.0
"""How long ``om db upgrade`` waits for an unreachable database by default (seconds)."""


def db_upgrade(
    database_url: DatabaseUrl = None,
    wait_s: Annotated[
        float,
        typer.Option(
            "--wait-s",
            min=0,
            help="Seconds to keep retrying while the database cannot be reached (a server "
            "still starting beside this job); 0: one attempt.",
        ),
    ] = DB_WAIT_S,
) -> None:
    """Migrate the database to the newest schema (safe to run again)."""
    from om_workers.errors import StoreUnavailableError
    from om_workers.store import current_revision, upgrade_when_reachable

    def retrying(error: StoreUnavailableError, pause_s: float) -> None:
        typer.echo(f"database not reachable yet ({error}); retrying in {pause_s:.1f} s", err=True)

    url = database_url or get_settings().store.url
    try:
        upgrade_when_reachable(url, wait_s, on_retry=retrying)
        revision = current_revision(url)
    except OMWorkersError as exc:
        fail(str(exc))
    typer.echo(f"database at revision {revision}")


def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant id (created if missing).")],
    label: Annotated[str, typer.Option(help="Note kept with the key.")] = "",
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key for a tenant and print it once (the store keeps only its hash)."""
    from om_workers.errors import TenantExistsError

    # The API refuses other tenant ids in its paths, so a tenant made here must fit them too.
    if re.fullmatch(PATH_ID_PATTERN, tenant) is None:
        fail(f"--tenant: {tenant!r} is not an id (1-128 of A-Z a-z 0-9 . _ : -, not . or ..)", 2)
    with account_store(database_url) as accounts:
        with contextlib.suppress(TenantExistsError):
            accounts.create_tenant(tenant)
        created = accounts.create_api_key(tenant, label=label)
    if as_json:
        print_json(
            KeyOut(key_id=created.key_id, tenant_id=created.tenant_id, key=created.plaintext)
        )
        return
    typer.echo(created.plaintext)
    typer.echo(f"key id {created.key_id} for tenant {created.tenant_id}; shown once", err=True)


def keys_list(
    tenant: TenantArg, as_json: JsonOutput = False, database_url: DatabaseUrl = None
) -> None:
    """List a tenant's API keys, revoked ones too: id, prefix, label, creation and revocation
    times. Never the key itself (only its hash is stored)."""
    with account_store(database_url) as accounts:
        found = accounts.list_api_keys(tenant)
    keys = [ApiKeyOut.model_validate(info, from_attributes=True) for info in found]
    show(ApiKeysOut(keys=keys), as_json, lambda answer: render.show_keys(tenant, answer.keys))


def keys_revoke(
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID", help="The key's id (om keys list).")],
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an API key: from now on every request with it is refused (401), on every API
    replica. Revoking a revoked key changes nothing."""
    with account_store(database_url) as accounts:
        revoked = ApiKeyOut.model_validate(accounts.revoke_key(key_id), from_attributes=True)
    show(revoked, as_json, render.show_key)


def _rate(name: str) -> Any:
    return typer.Option(f"--{name}-per-s", help=f"Sustained {name} per second per API key.")


def _burst(name: str) -> Any:
    return typer.Option(
        f"--{name}-burst", help=f"{name.capitalize()} an idle key may send at once."
    )


def tenants_limits(
    tenant: TenantArg,
    appends_per_s: Annotated[float | None, _rate("appends")] = None,
    appends_burst: Annotated[int | None, _burst("appends")] = None,
    flushes_per_s: Annotated[float | None, _rate("flushes")] = None,
    flushes_burst: Annotated[int | None, _burst("flushes")] = None,
    reads_per_s: Annotated[float | None, _rate("reads")] = None,
    reads_burst: Annotated[int | None, _burst("reads")] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Drop every override first (back to the defaults).")
    ] = False,
    as_json: JsonOutput = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Show or change a tenant's per-key rate limits. Each given value overrides the
    OM_RATE_* default of its class (the other value of that class keeps its current one);
    with no option, only show them. API replicas apply a change within OM_RATE_LIMIT_CACHE_S."""
    from om_api.server.limits import default_limits, limits_out
    from om_core.errors import InvalidInputError
    from om_core.policy.rate_limit import RateLimit, RequestClass

    given: dict[RequestClass, tuple[float | None, int | None]] = {
        "appends": (appends_per_s, appends_burst),
        "flushes": (flushes_per_s, flushes_burst),
        "reads": (reads_per_s, reads_burst),
    }
    defaults = default_limits(get_settings())
    with account_store(database_url) as accounts:
        overrides = {} if clear else accounts.get_rate_limits(tenant)
        if clear or any(v is not None for pair in given.values() for v in pair):
            for name, (rate, burst) in given.items():
                if rate is None and burst is None:
                    continue
                current = overrides.get(name, defaults[name])
                try:
                    overrides[name] = RateLimit(
                        current.rate_per_s if rate is None else rate,
                        current.burst if burst is None else burst,
                    )
                except InvalidInputError as exc:
                    fail(f"--{name}: {exc}", 2)
            overrides = accounts.set_rate_limits(tenant, overrides)
    answer = limits_out(tenant, overrides, defaults)
    show(answer, as_json, render.show_limits)


RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", help="Redis URL (default: OM_REDIS_URL).")
]


def queue(as_json: JsonOutput = False, redis_url: RedisUrl = None) -> None:
    """Show the fair queue of flush jobs: the backlog, and for each tenant (busiest first) its
    jobs waiting for a place, queued in the broker and running, and its requests refused by a
    rate limit since Redis started."""
    from om_api.server.convert import queue_out
    from om_workers.coordination.connection import connect
    from om_workers.coordination.fairness import FairQueue

    url = redis_url or get_settings().redis.url
    if not url:
        fail(f"{REDIS_REQUIRED}; or pass --redis-url", 2)
    try:
        client = connect(url)
        try:
            answer = queue_out(*FairQueue(client).load())
        finally:
            client.close()
    except OMWorkersError as exc:
        fail(str(exc))
    show(answer, as_json, render.show_queue)
