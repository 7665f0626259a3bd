# The service image built from greentwin-runtime (Debian's Python, the pinned dependencies): the
# same layout as deploy/Dockerfile (user greentwin uid 10001, the state volume, the entry point,
# `greentwin serve`, the /readyz health check), the project installed from its wheel.
ARG RUNTIME=greentwin-runtime:local
FROM ${RUNTIME}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 greentwin \
    && useradd --system --uid 10001 --gid 10001 --home /var/lib/greentwin greentwin \
    && install -d -o greentwin -g greentwin -m 0700 /var/lib/greentwin /var/lib/greentwin/state
COPY greentwin-*.whl entrypoint.sh /usr/src/greentwin-install/
# The wheel alone (its dependencies are the runtime's, pinned); pip check proves they satisfy it.
RUN pip install --no-index --no-deps /usr/src/greentwin-install/greentwin-*.whl && pip check \
    && install -m 0755 /usr/src/greentwin-install/entrypoint.sh /usr/local/bin/greentwin-entrypoint \
    && rm -rf /usr/src/greentwin-install
USER greentwin
ENV GREENTWIN_ENVIRONMENT=prod GREENTWIN_STATE_DIR=/var/lib/greentwin/state
WORKDIR /srv/greentwin
VOLUME /var/lib/greentwin
EXPOSE 8000
ENTRYPOINT ["greentwin-entrypoint"]
CMD ["greentwin", "serve", "--host", "0.0.0.0", "--port", "8000"]
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=4 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status != 200)"
