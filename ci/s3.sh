#!/usr/bin/env bash
# A private, throw-away S3-compatible server for the archive store tests:
# moto's server mode, from the Python package registry, on 127.0.0.1.
#
#   eval "$(ci/s3.sh start)"   # prints export lines for the tests
#   cargo test --test cli s3::
#   ci/s3.sh stop              # uses RUNWS_S3_DIR from the exports
#
# `start` makes a virtual environment with moto[server] (in
# RUNWS_S3_VENV, else ~/.cache/runws-ci/moto) when none is there yet,
# installing Debian's python3-venv first when root and missing, then starts
# the server on a free port in a fresh temporary directory. Everything but
# the export lines goes to stderr. The server checks no signatures; the
# tests still sign with throw-away keys, as a real store needs.
set -euo pipefail

log() { printf 's3.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

VENV=${RUNWS_S3_VENV:-${HOME:-/tmp}/.cache/runws-ci/moto}
MOTO_VERSION=${RUNWS_MOTO_VERSION:-5.2.1}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import moto.server, boto3' 2>/dev/null; then
        return
    fi
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        [ "$(id -u)" -eq 0 ] || die "python3-venv is missing and installing it needs root"
        log "installing python3-venv from Debian packages"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update >&2
        apt-get install -y --no-install-recommends python3-venv python3-pip >&2
    fi
    log "installing moto[server] $MOTO_VERSION into $VENV"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2
}

free_port() {
    "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    if [ -n "${RUNWS_S3_DIR:-}" ] && [ -f "$RUNWS_S3_DIR/port" ]; then
        exports "$RUNWS_S3_DIR" "$(cat "$RUNWS_S3_DIR/port")"
        return
    fi
    ensure_venv
    local dir port
    dir=$(mktemp -d "${TMPDIR:-/tmp}/runws-s3.XXXXXX")
    port=$(free_port)
    # Its own session, so the test run's signals do not reach it.
    setsid "$VENV/bin/python" -m moto.server -H 127.0.0.1 -p "$port" >"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    echo "$port" >"$dir/port"
    local i
    for i in $(seq 1 100); do
        if "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" 2>/dev/null; then
            exports "$dir" "$port"
            return
        fi
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || { cat "$dir/server.log" >&2; die "the server exited"; }
        sleep 0.1
    done
    cat "$dir/server.log" >&2
    die "the server did not answer on port $port"
}

exports() {
    local dir=$1 port=$2
    echo "export RUNWS_S3_DIR=$dir"
    echo "export RUNWS_TEST_S3_ENDPOINT=http://127.0.0.1:$port"
    echo "export RUNWS_TEST_S3_PYTHON=$VENV/bin/python"
}

stop() {
    local dir=${RUNWS_S3_DIR:-}
    [ -n "$dir" ] && [ -f "$dir/pid" ] || { log "no server to stop (RUNWS_S3_DIR unset)"; return 0; }
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    rm -rf "$dir"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) die "usage: ci/s3.sh start|stop" ;;
esac
