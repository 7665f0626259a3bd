# Mosquitto 2 from Debian's packages, laid out like eclipse-mosquitto:2: the configuration at
# /mosquitto/config/mosquitto.conf, data and log volumes, uid/gid 1883, `nc` for the health check.
ARG BASE=greentwin-base:bookworm
FROM ${BASE}
RUN groupadd --system --gid 1883 mosquitto \
    && useradd --system --uid 1883 --gid 1883 --home-dir /var/empty --shell /usr/sbin/nologin mosquitto \
    && apt-get update && apt-get install -y mosquitto netcat-openbsd \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log \
    && install -d -o mosquitto -g mosquitto /mosquitto/config /mosquitto/data /mosquitto/log \
    && echo '# Replace with a mounted mosquitto.conf (no listener here: local connections only).' \
        > /mosquitto/config/mosquitto.conf
COPY mosquitto-entrypoint.sh /docker-entrypoint.sh
RUN chmod 0755 /docker-entrypoint.sh
VOLUME ["/mosquitto/data", "/mosquitto/log"]
EXPOSE 1883 8883
ENTRYPOINT ["/docker-entrypoint.sh"]
CMD ["/usr/sbin/mosquitto", "-c", "/mosquitto/config/mosquitto.conf"]
