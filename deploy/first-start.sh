#!/bin/sh
# First start of the compose deployment, run once from the repository root:
#   sh deploy/first-start.sh && docker compose -f deploy/compose.yaml up -d
# Makes the two database passwords on the host, then every other secret (token secret, audit
# keyring and signing key, report key and certificate) inside the state volume, as the
# container's own user, so the service can read them and nobody else can.
set -eu
cd "$(dirname "$0")"
umask 077
mkdir -p secrets
for name in db_superuser_password db_owner_password db_app_password; do
    if [ ! -s "secrets/$name" ]; then
        openssl rand -hex 24 > "secrets/$name"
    fi
done
# Compose bind-mounts secret files with their host owner and mode; PostgreSQL (uid 999) and the
# service (uid 10001) must read them, so the files are world-readable inside a 0700 directory.
chmod 0700 secrets
chmod 0644 secrets/db_*_password
docker compose -f compose.yaml build greentwin
docker compose -f compose.yaml run --rm init
