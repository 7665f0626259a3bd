#!/bin/sh
# Entry point of greentwin-mosquitto: as root, give the broker's user its data and log volumes;
# mosquitto itself drops from root to that user once its listeners are open.
set -eu
if [ "$(id -u)" = 0 ]; then
    chown -R mosquitto:mosquitto /mosquitto/data /mosquitto/log
fi
exec "$@"
