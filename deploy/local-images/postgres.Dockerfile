# PostgreSQL 15 from Debian's packages, with the contract of the postgres:15 image that
# deploy/compose.yaml relies on: POSTGRES_PASSWORD(_FILE), POSTGRES_USER, POSTGRES_DB, scripts in
# /docker-entrypoint-initdb.d run once on an empty PGDATA, uid/gid 999, pg_isready for the health check.
ARG BASE=greentwin-base:bookworm
FROM ${BASE}
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid 999 --home-dir /var/lib/postgresql --shell /bin/bash postgres \
    && apt-get update && apt-get install -y postgresql-common \
    && sed -ri 's/^#?\s*create_main_cluster\s*=.*/create_main_cluster = false/' /etc/postgresql-common/createcluster.conf \
    && apt-get install -y postgresql-15 \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log \
    && install -d -o postgres -g postgres -m 2775 /var/run/postgresql \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d /docker-entrypoint-initdb.d
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 0755 /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
VOLUME /var/lib/postgresql/data
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
