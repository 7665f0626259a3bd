#!/bin/sh
# Container entry point: load what `greentwin init` wrote, build the database URL from a password
# file, then run the command. Keeps secrets out of the compose file and the image.
set -eu
STATE="${GREENTWIN_STATE_DIR:-/var/lib/greentwin/state}"
if [ -r "$STATE/greentwin.env" ]; then
    set -a
    . "$STATE/greentwin.env"
    set +a
fi
# GREENTWIN_DB_ROLE / GREENTWIN_DB_PASSWORD_FILE: the role this container connects as (the migrate
# job as the owner, the service as the restricted role). Generated passwords are hex: no URL escaping.
if [ -z "${GREENTWIN_DATABASE_URL:-}" ] && [ -n "${GREENTWIN_DB_PASSWORD_FILE:-}" ]; then
    GREENTWIN_DATABASE_URL="postgresql://${GREENTWIN_DB_ROLE}:$(cat "$GREENTWIN_DB_PASSWORD_FILE")@${GREENTWIN_DB_HOST:-db}:5432/greentwin"
    export GREENTWIN_DATABASE_URL
fi
# GREENTWIN_MQTT_PASSWORD_FILE: the broker password as a file (a compose secret). It cannot sit in
# GREENTWIN_SECRETS_DIR, which the state's greentwin.env points at the service's own keys.
if [ -z "${GREENTWIN_MQTT_PASSWORD:-}" ] && [ -n "${GREENTWIN_MQTT_PASSWORD_FILE:-}" ]; then
    GREENTWIN_MQTT_PASSWORD=$(cat "$GREENTWIN_MQTT_PASSWORD_FILE")
    export GREENTWIN_MQTT_PASSWORD
fi
exec "$@"
