#!/bin/sh
# First start of the compose deployment, run once from the repository root:
#   sh deploy/first-start.sh && docker compose -f deploy/compose.yaml up -d
# Makes every secret the stack needs, each readable by the container user that reads it: on the
# host (deploy/secrets/), the database passwords, the service's broker password, the broker's
# password file and its TLS certificates (a site CA); then, inside the state volume and as the
# service's own user, the token secret, audit keyring and signing key, report key and certificate.
# What exists is kept, so a rerun only adds what is missing.
# GREENTWIN_IMAGE names a service image built elsewhere (not built here); GREENTWIN_MOSQUITTO_IMAGE
# the broker's image (its mosquitto_passwd hashes the passwords); GREENTWIN_BROKER_SAN the names
# the broker's certificate carries (default: this host's name, localhost, 127.0.0.1).
set -eu
cd "$(dirname "$0")"
umask 077
if [ -n "${COMPOSE:-}" ]; then :
elif docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then COMPOSE=docker-compose
else echo "first-start.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2; exit 1
fi
MQTT_IMAGE=${GREENTWIN_MOSQUITTO_IMAGE:-eclipse-mosquitto:2}
MQTT_UID=1883   # the broker's user in its image
mkdir -p secrets
chmod 0700 secrets
for name in db_superuser_password db_owner_password db_app_password greentwin_mqtt_password; do
    if [ ! -s "secrets/$name" ]; then
        openssl rand -hex 24 > "secrets/$name"
    fi
done
# Compose bind-mounts secret files with their host owner and mode; PostgreSQL (uid 999) and the
# service (uid 10001) must read them, so the files are world-readable inside a 0700 directory.
chmod 0644 secrets/db_*_password secrets/greentwin_mqtt_password

# The broker: the service's password in Mosquitto's password file (hashed by the broker's own
# mosquitto_passwd), owned by the broker's user like its TLS key.
if [ ! -s secrets/mosquitto_passwd ]; then
    docker run --rm --user 0 --entrypoint sh -v "$PWD/secrets:/secrets" -e MQTT_UID="$MQTT_UID" "$MQTT_IMAGE" -c \
        'mosquitto_passwd -c -b /secrets/mosquitto_passwd greentwin-service "$(cat /secrets/greentwin_mqtt_password)" \
         && chown "$MQTT_UID:$MQTT_UID" /secrets/mosquitto_passwd && chmod 0640 /secrets/mosquitto_passwd'
fi
if [ ! -s secrets/mqtt-certs/ca.crt ]; then
    mkdir -p secrets/ca secrets/mqtt-certs
    chmod 0700 secrets/ca
    san=${GREENTWIN_BROKER_SAN:-DNS:$(hostname),DNS:localhost,IP:127.0.0.1}
    ext=$(mktemp)
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$ext"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 -subj "/CN=greentwin site CA" \
        -keyout secrets/ca/ca.key -out secrets/mqtt-certs/ca.crt \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=broker" \
        -keyout secrets/mqtt-certs/broker.key -out secrets/broker.csr 2>/dev/null
    openssl x509 -req -in secrets/broker.csr -CA secrets/mqtt-certs/ca.crt -CAkey secrets/ca/ca.key \
        -CAcreateserial -CAserial secrets/ca/ca.srl -days 825 -extfile "$ext" -out secrets/mqtt-certs/broker.crt 2>/dev/null
    rm -f "$ext" secrets/broker.csr
    chmod 0755 secrets/mqtt-certs
    chmod 0644 secrets/mqtt-certs/ca.crt secrets/mqtt-certs/broker.crt
    docker run --rm --user 0 --entrypoint sh -v "$PWD/secrets/mqtt-certs:/certs" -e MQTT_UID="$MQTT_UID" "$MQTT_IMAGE" -c \
        'chown "$MQTT_UID:$MQTT_UID" /certs/broker.key && chmod 0600 /certs/broker.key'
fi

# The service's keys, made by the service's user inside the state volume.
if [ -z "${GREENTWIN_IMAGE:-}" ]; then
    $COMPOSE -f compose.yaml build greentwin
fi
$COMPOSE -f compose.yaml run --rm init
