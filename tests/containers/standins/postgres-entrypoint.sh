#!/bin/sh
# The official postgres image's first start, in short: an empty data folder gets a cluster
# whose superuser is POSTGRES_USER (default postgres) with POSTGRES_PASSWORD, password
# (scram-sha-256) authentication from other hosts, and the database POSTGRES_DB (default: the
# user's name). During that set-up the server listens on a private socket only, so neither the
# health check nor a client sees it before it is ready.
set -eu
if [ "${1:-}" != postgres ]; then
    exec "$@"
fi
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (the superuser's password)}"
    user="${POSTGRES_USER:-postgres}"
    database="${POSTGRES_DB:-$user}"
    setup="$(mktemp -d)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$setup/password"
    initdb --username="$user" --pwfile="$setup/password" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 -D "$PGDATA" > "$setup/initdb.log" \
        || { cat "$setup/initdb.log" >&2; exit 1; }
    rm -f "$setup/password"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    if [ "$database" != postgres ]; then
        pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$setup" start > /dev/null
        psql -v ON_ERROR_STOP=1 -h "$setup" -U "$user" -d postgres -q \
            -c "CREATE DATABASE \"$database\""
        pg_ctl -D "$PGDATA" -w -m fast stop > /dev/null
    fi
    rm -rf "$setup"
    echo "postgres stand-in: cluster initialised, role $user, database $database"
fi
exec "$@"
