#!/bin/sh
# Entry point of greentwin-postgres: on an empty PGDATA, initdb with the superuser's password, run
# /docker-entrypoint-initdb.d/*.sql and *.sh once against a server no client can reach yet (its
# socket in a private directory, no TCP), then run the command as the postgres user.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
    install -d -o postgres -g postgres -m 0700 "$PGDATA"
    install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
        POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
    fi
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "greentwin-postgres: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE (the superuser's password)" >&2
        exit 1
    fi
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    init_socket=$(mktemp -d)
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -k $init_socket" start >/dev/null
    if [ "$db" != postgres ]; then
        psql -h "$init_socket" -v ON_ERROR_STOP=1 --username "$user" --dbname postgres -qc "CREATE DATABASE \"$db\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sql) echo "greentwin-postgres: running $f"
                   psql -h "$init_socket" -v ON_ERROR_STOP=1 --username "$user" --dbname "$db" -q -f "$f" ;;
            *.sh) echo "greentwin-postgres: running $f"; PGHOST=$init_socket . "$f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    rmdir "$init_socket"
    echo "greentwin-postgres: initialised $PGDATA"
fi
exec "$@"
