#!/bin/sh
# Builds the compose stack's three images from Debian's packages alone, for a machine that cannot
# pull from a container registry (Debian's archive and PyPI are enough):
#   greentwin-base:bookworm     debootstrap of Debian bookworm (minbase), imported, upgraded
#   greentwin:local             Debian's Python 3.11, the CPU build of torch, the project's wheel
#   greentwin-postgres:local    Debian's PostgreSQL 15, with the postgres image's entry point contract
#   greentwin-mosquitto:local   Debian's Mosquitto 2, laid out like eclipse-mosquitto:2
# then `GREENTWIN_IMAGE=greentwin:local GREENTWIN_POSTGRES_IMAGE=greentwin-postgres:local
# GREENTWIN_MOSQUITTO_IMAGE=greentwin-mosquitto:local docker compose -f deploy/compose.yaml up`.
#
#   sh deploy/local-images/build.sh            build what is missing or out of date (needs root)
#   sh deploy/local-images/build.sh --status   one line per image: NAME current|stale|missing; builds nothing
#
# Every image carries the hash of what it was built from (label org.greentwin.inputs): a rerun
# rebuilds only images whose inputs changed. The service image is two: greentwin-runtime:local
# (Python and the pinned dependencies, rebuilt when constraints.txt or the project's dependencies
# change) and greentwin:local on top (the project's wheel, seconds to rebuild).
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR (default: what this machine's apt sources name,
# else deb.debian.org), TORCH_INDEX_URL (where torch's CPU wheel comes from when pip has no copy at
# hand), PYTHON (the interpreter that builds the wheels: the repository's .venv when there is one),
# GREENTWIN_IMAGES_CACHE (the wheelhouse and build contexts; default ~/.cache/greentwin-images).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SUITE=bookworm
LABEL=org.greentwin.inputs
BASE=greentwin-base:$SUITE
RUNTIME=greentwin-runtime:local
SERVICE=greentwin:local
POSTGRES=greentwin-postgres:local
MOSQUITTO=greentwin-mosquitto:local
CACHE=${GREENTWIN_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/greentwin-images}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi

die() { echo "build.sh: $*" >&2; exit 1; }
say() { echo "build.sh: $*" >&2; }
sha() { sha256sum | cut -c1-16; }

# The first URI this machine's apt sources give for a suite ($1) whose name matches $2
# (deb822 .sources files and one-line sources.list alike).
apt_uri() {
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v want="$1" -v pat="$2" 'BEGIN { RS = ""; FS = "\n" }
            { uris = ""; suites = ""; types = "";
              for (i = 1; i <= NF; i++) {
                  if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
                  if ($i ~ /^Suites:/) { suites = " " $i " " }
                  if ($i ~ /^Types:/) { types = " " $i " " }
                  if ($i ~ /^Enabled:[ \t]*no/) { types = "" } }
              if (types ~ / deb / && suites ~ (" " want " ") && uris ~ pat) { split(uris, u, " "); print u[1]; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        sed -e 's/\[[^]]*\]//' "$f" | awk -v want="$1" -v pat="$2" '$1 == "deb" && $3 == want && $2 ~ pat { print $2; exit }'
    done
}
MIRROR=${DEBIAN_MIRROR:-$(apt_uri "$SUITE" '/debian/?$' | head -n 1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-$(apt_uri "$SUITE-security" 'security' | head -n 1)}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}

label_of() { docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true; }
id_of() { docker image inspect -f '{{ .Id }}' "$1" 2>/dev/null || echo none; }
state_of() {  # image, wanted hash
    have=$(label_of "$1")
    if [ -z "$have" ] || [ "$have" = "<no value>" ]; then echo missing; elif [ "$have" = "$2" ]; then echo current; else echo stale; fi
}

# What each image is made from. A parent's image id is part of its children's hash.
base_hash() { printf '%s\n' "$SUITE minbase 1" "$MIRROR" "$SECURITY" | cat - "$HERE/base.Dockerfile" | sha; }
file_hash() { parent=$1; shift; { echo "$parent"; cat "$@"; } | sha; }
runtime_hash() {
    { id_of "$BASE"; cat "$HERE/runtime.Dockerfile" "$ROOT/constraints.txt"; deps; torch_version; } | sha
}
# The project's dependencies as pyproject.toml lists them (not the rest of the file: a new pytest
# marker must not rebuild torch's layer).
deps() {
    "$PYTHON" -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; print("\n".join(p["dependencies"]))' \
        "$ROOT/pyproject.toml"
}
torch_version() { sed -n 's/^torch==\([^ ]*\)$/\1/p' "$ROOT/constraints.txt"; }
# Exactly what the wheel is built from, copied out of the work tree (caches left behind).
stage_source() {
    rm -rf "$1" && mkdir -p "$1"
    (cd "$ROOT" && tar -c --exclude=__pycache__ --exclude='*.pyc' pyproject.toml README.md \
        app twin policy safety audit wire control plantsim migrations) | tar -C "$1" -x
}
source_hash() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum) | sha; }
service_hash() {  # staged source directory
    { id_of "$RUNTIME"; cat "$HERE/greentwin.Dockerfile" "$ROOT/deploy/entrypoint.sh"; source_hash "$1"; } | sha
}

status() {
    mkdir -p "$CACHE"
    stage_source "$CACHE/source"
    printf '%s\t%s\n' "$BASE" "$(state_of "$BASE" "$(base_hash)")"
    printf '%s\t%s\n' "$RUNTIME" "$(state_of "$RUNTIME" "$(runtime_hash)")"
    printf '%s\t%s\n' "$POSTGRES" "$(state_of "$POSTGRES" "$(file_hash "$(id_of "$BASE")" "$HERE/postgres.Dockerfile" "$HERE/postgres-entrypoint.sh")")"
    printf '%s\t%s\n' "$MOSQUITTO" "$(state_of "$MOSQUITTO" "$(file_hash "$(id_of "$BASE")" "$HERE/mosquitto.Dockerfile" "$HERE/mosquitto-entrypoint.sh")")"
    printf '%s\t%s\n' "$SERVICE" "$(state_of "$SERVICE" "$(service_hash "$CACHE/source")")"
}

# docker build on the host's network: the builds reach Debian's archive the way this machine does,
# whatever the container network can reach.
build() {  # tag, hash, dockerfile, context, build args...
    tag=$1 hash=$2 file=$3 context=$4; shift 4
    started=$(date +%s)
    old=$(id_of "$tag")
    log=$CACHE/$(basename "$file" .Dockerfile).log
    say "building $tag (log: $log)"
    docker build --network host --label "$LABEL=$hash" -t "$tag" -f "$file" "$@" "$context" >"$log" 2>&1 \
        || die "building $tag failed: $(grep -v '^ *$' "$log" | tail -n 1); full log: $log"
    # The image this one replaces goes at the end, once nothing built here stands on it.
    if [ "$old" != none ] && [ "$old" != "$(id_of "$tag")" ]; then REPLACED="$old $REPLACED"; fi
    say "$tag built in $(( $(date +%s) - started )) s, $(docker image inspect -f '{{ .Size }}' "$tag" | awk '{ printf "%.0f MB", $1 / 1e6 }')"
}

build_base() {
    hash=$(base_hash)
    [ "$(state_of "$BASE" "$hash")" = current ] && return 0
    [ "$(id -u)" = 0 ] || die "debootstrap needs root: run as root (sudo sh $0)"
    command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
    rootfs=$CACHE/rootfs
    rm -rf "$rootfs"
    started=$(date +%s)
    say "debootstrap $SUITE from $MIRROR"
    debootstrap --variant=minbase --components=main "$SUITE" "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || die "debootstrap failed (last line: $(tail -n 1 "$CACHE/debootstrap.log")); full log: $CACHE/debootstrap.log"
    say "debootstrap took $(( $(date +%s) - started )) s"
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"* "$rootfs/var/log/"*.log
    : > "$rootfs/etc/resolv.conf"
    # Fixed timestamps and numeric owners: the same root file system gives the same layer.
    tar -C "$rootfs" --numeric-owner --sort=name --mtime=@0 -c . \
        | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
              --change 'CMD ["bash"]' - "$BASE-rootfs" >/dev/null
    rm -rf "$rootfs"
    build "$BASE" "$hash" "$HERE/base.Dockerfile" "$HERE" \
        --build-arg "ROOTFS=$BASE-rootfs" --build-arg "MIRROR=$MIRROR" --build-arg "SECURITY=$SECURITY" \
        --build-arg "SUITE=$SUITE"
    docker rmi "$BASE-rootfs" >/dev/null 2>&1 || true
}

# torch's CPU wheel: the copy pip already finds without an index (a wheel directory in its
# configuration), else PyTorch's CPU index.
fetch_torch() {
    version=$(torch_version)
    [ -n "$version" ] || die "constraints.txt pins no torch version"
    if "$PYTHON" -m pip download --quiet --no-index --no-deps --only-binary :all: -d "$1" "torch==$version+cpu" 2>/dev/null; then
        say "torch $version+cpu: the wheel pip finds at hand (copied, not downloaded)"
    elif "$PYTHON" -m pip download --quiet --no-deps --only-binary :all: --index-url "$TORCH_INDEX_URL" \
            -d "$1" "torch==$version+cpu"; then
        say "torch $version+cpu: from $TORCH_INDEX_URL"
    else
        die "torch==$version+cpu is neither at hand nor on $TORCH_INDEX_URL: set PIP_FIND_LINKS to a directory holding its wheel, or TORCH_INDEX_URL to a reachable copy of PyTorch's CPU index"
    fi
}

build_runtime() {
    hash=$(runtime_hash)
    [ "$(state_of "$RUNTIME" "$hash")" = current ] && return 0
    context=$CACHE/runtime
    rm -rf "$context" && mkdir -p "$context/wheels"
    fetch_torch "$context/wheels"
    { echo "torch==$(torch_version)+cpu"; deps; } > "$context/wheels/requirements.txt"
    cp "$ROOT/constraints.txt" "$context/wheels/constraints.txt"
    started=$(date +%s)
    # Every dependency as a wheel, resolved under the pins (sdists built here, for this Python).
    "$PYTHON" -m pip wheel --quiet --wheel-dir "$context/wheels" --find-links "$context/wheels" \
        -c "$ROOT/constraints.txt" -r "$context/wheels/requirements.txt" >"$CACHE/wheelhouse.log" 2>&1 \
        || die "pip could not gather the dependencies' wheels under constraints.txt: $(tail -n 1 "$CACHE/wheelhouse.log"); full log: $CACHE/wheelhouse.log"
    say "wheelhouse: $(ls "$context/wheels" | grep -c '\.whl$') wheels in $(( $(date +%s) - started )) s"
    build "$RUNTIME" "$hash" "$HERE/runtime.Dockerfile" "$context" --build-arg "BASE=$BASE"
    docker image prune -f --filter label=org.greentwin.stage=install >/dev/null
    rm -rf "$context"
}

build_service() {
    stage_source "$CACHE/source"
    hash=$(service_hash "$CACHE/source")
    [ "$(state_of "$SERVICE" "$hash")" = current ] && return 0
    context=$CACHE/service
    rm -rf "$context" && mkdir -p "$context"
    "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$context" "$CACHE/source" >"$CACHE/wheel.log" 2>&1 \
        || die "pip could not build the project's wheel: $(tail -n 1 "$CACHE/wheel.log"); full log: $CACHE/wheel.log"
    cp "$ROOT/deploy/entrypoint.sh" "$context/entrypoint.sh"
    build "$SERVICE" "$hash" "$HERE/greentwin.Dockerfile" "$context" --build-arg "RUNTIME=$RUNTIME"
}

build_plain() {  # tag, dockerfile, entrypoint script
    hash=$(file_hash "$(id_of "$BASE")" "$2" "$3")
    [ "$(state_of "$1" "$hash")" = current ] && return 0
    build "$1" "$hash" "$2" "$HERE" --build-arg "BASE=$BASE"
}

command -v docker >/dev/null || die "docker missing: apt-get install docker.io"
docker info >/dev/null 2>&1 || die "no Docker daemon answers (start dockerd)"
case "${1:-}" in
    --status) status; exit 0 ;;
    "") ;;
    *) die "usage: $0 [--status]" ;;
esac
mkdir -p "$CACHE"
REPLACED=""
build_base
build_plain "$POSTGRES" "$HERE/postgres.Dockerfile" "$HERE/postgres-entrypoint.sh"
build_plain "$MOSQUITTO" "$HERE/mosquitto.Dockerfile" "$HERE/mosquitto-entrypoint.sh"
build_runtime
build_service
for old in $REPLACED; do docker rmi "$old" >/dev/null 2>&1 || true; done
status
