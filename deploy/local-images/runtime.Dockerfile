# Debian's Python 3.11 with the service's pinned dependencies (the CPU build of torch among them) in
# a virtual environment at /opt/greentwin, installed from the wheelhouse build.sh gathers: no index
# is asked from inside the build. The wheels stay in the install stage, out of the image.
ARG BASE=greentwin-base:bookworm
FROM ${BASE} AS python
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update && apt-get install -y python3 python3-venv ca-certificates \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log

FROM python AS install
# build.sh removes this stage's image (the wheels) once the runtime is built.
LABEL org.greentwin.stage=install
COPY wheels /wheels
RUN python3 -m venv /opt/greentwin \
    && /opt/greentwin/bin/pip install --no-index --find-links /wheels \
        -c /wheels/constraints.txt -r /wheels/requirements.txt

FROM python
COPY --from=install /opt/greentwin /opt/greentwin
ENV PATH=/opt/greentwin/bin:$PATH VIRTUAL_ENV=/opt/greentwin
