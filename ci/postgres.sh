#!/usr/bin/env bash
# A private, throw-away PostgreSQL server for the store tests.
#
#   eval "$(ci/postgres.sh start)"   # prints export lines for the tests
#   cargo test --lib store
#   ci/postgres.sh stop              # uses RUNWS_PG_DIR from the exports
#
# `start` installs PostgreSQL from Debian packages when no server binaries are
# found, makes a cluster in a fresh temporary directory owned by a non-root
# user (PostgreSQL refuses to run as root), listening only on 127.0.0.1 on a
# free port, and creates the database `runws_test`. Everything but the export
# lines goes to stderr. Run again with RUNWS_PG_DIR set to a live cluster, it
# only prints the exports again.
#
# The cluster lives in /tmp (or RUNWS_PG_PARENT), which the server's
# account must be able to enter.
#
# `ctl DIR start|stop` starts or stops that cluster; RUNWS_TEST_PG_CTL is this
# command without its last word, so the restart test can run `$CTL stop` and
# `$CTL start`.
#
# The password below is a fixed test value for a server that lives only on
# 127.0.0.1 for the length of a CI job; it guards nothing.
set -euo pipefail

PG_USER_NAME=runws
PG_PASSWORD=runws-test-password-not-secret
PG_DATABASE=runws_test
MARKER=.runws-test-cluster

log() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

bin_dir() {
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$d" ] && [ -x "$d/initdb" ]; then
        echo "$d"
        return
    fi
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
        return
    fi
    return 1
}

ensure_installed() {
    if bin_dir >/dev/null; then
        return
    fi
    [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and installing it needs root"
    log "installing PostgreSQL from Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y postgresql >&2
    bin_dir >/dev/null || die "PostgreSQL installed, but no initdb found under /usr/lib/postgresql/*/bin"
}

# The account the server runs as: ourselves unless we are root.
server_user() {
    if [ "$(id -u)" -ne 0 ]; then
        id -un
        return
    fi
    if id postgres >/dev/null 2>&1; then
        echo postgres
        return
    fi
    if ! id runws-pg >/dev/null 2>&1; then
        log "creating the system user runws-pg"
        useradd --system --no-create-home --shell /usr/sbin/nologin runws-pg >&2
    fi
    echo runws-pg
}

# Runs a command as the server's account.
as_user() {
    local user=$1
    shift
    if [ "$(id -un)" = "$user" ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$user" -- "$@"
    else
        su -s /bin/sh "$user" -c "$(printf '%q ' "$@")"
    fi
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

print_exports() {
    local dir=$1 port self
    port=$(cat "$dir/port")
    self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
    echo "export RUNWS_PG_DIR=$(printf '%q' "$dir")"
    echo "export RUNWS_TEST_PG_URL=postgres://$PG_USER_NAME:$PG_PASSWORD@127.0.0.1:$port/$PG_DATABASE"
    echo "export RUNWS_TEST_PG_CTL=$(printf '%q' "$(printf '%q ctl %q' "$self" "$dir")")"
    # TLS: the CA that signed the server's certificate (for `localhost`
    # only), another CA, and a database the server accepts over TLS only.
    echo "export RUNWS_TEST_PG_CA=$(printf '%q' "$dir/tls/ca.crt")"
    echo "export RUNWS_TEST_PG_OTHER_CA=$(printf '%q' "$dir/tls/other-ca.crt")"
    echo "export RUNWS_TEST_PG_PORT=$port"
    echo "export RUNWS_TEST_PG_TLS_ONLY_DB=${PG_DATABASE}_tls_only"
}

# A CA, a server certificate it signs for `localhost` (no IP address), and
# a second CA that signed nothing: made when the cluster is made, never
# kept anywhere else.
make_certificates() {
    local tls=$1
    mkdir -p "$tls"
    command -v openssl >/dev/null 2>&1 || die "openssl is needed to make the test certificates"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=runws test CA" \
        -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=runws other CA" \
        -keyout "$tls/other-ca.key" -out "$tls/other-ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
        -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$tls/ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
        -days 2 -extfile "$tls/ext" -out "$tls/server.crt" 2>/dev/null
    chmod 600 "$tls/server.key"
    chmod 644 "$tls/ca.crt" "$tls/other-ca.crt"
    rm -f "$tls/ca.key" "$tls/other-ca.key" "$tls/server.csr"
}

is_running() {
    local dir=$1 bin
    bin=$(bin_dir) || return 1
    [ -f "$dir/$MARKER" ] && as_user "$(cat "$dir/user")" "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

ctl() {
    local dir=$1 action=$2 bin user
    [ -f "$dir/$MARKER" ] || die "\`$dir\` is not a test cluster made by this script"
    bin=$(bin_dir) || die "PostgreSQL is not installed"
    user=$(cat "$dir/user")
    case "$action" in
        start) as_user "$user" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >&2 ;;
        stop) as_user "$user" "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2 ;;
        *) die "usage: postgres.sh ctl DIR start|stop" ;;
    esac
}

start() {
    if [ -n "${RUNWS_PG_DIR:-}" ] && is_running "$RUNWS_PG_DIR"; then
        log "reusing the running cluster in $RUNWS_PG_DIR"
        print_exports "$RUNWS_PG_DIR"
        return
    fi
    ensure_installed
    local bin user dir port tries
    bin=$(bin_dir)
    user=$(server_user)
    # Not $TMPDIR: the server's account must be able to reach the directory,
    # and a private TMPDIR (mode 700) would shut it out.
    dir=$(mktemp -d "${RUNWS_PG_PARENT:-/tmp}/runws-pg.XXXXXX")
    touch "$dir/$MARKER"
    echo "$user" >"$dir/user"
    printf '%s\n' "$PG_PASSWORD" >"$dir/pwfile"
    chown -R "$user" "$dir"
    chmod 700 "$dir"

    as_user "$user" "$bin/initdb" -D "$dir/data" -U "$PG_USER_NAME" --pwfile="$dir/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-instructions >&2
    rm -f "$dir/pwfile"
    make_certificates "$dir/tls"
    chown -R "$user" "$dir/tls"
    chmod 755 "$dir" "$dir/tls"
    # The TLS-only database first (the first matching line wins): no
    # plaintext line names it, so the server refuses plaintext itself.
    as_user "$user" sh -c "cat '$dir/data/pg_hba.conf' >'$dir/hba.rest' && {
        echo 'hostssl ${PG_DATABASE}_tls_only all 127.0.0.1/32 scram-sha-256'
        echo 'hostnossl ${PG_DATABASE}_tls_only all 127.0.0.1/32 reject'
        cat '$dir/hba.rest'; } >'$dir/data/pg_hba.conf' && rm '$dir/hba.rest'"

    for tries in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 40000))
        port_in_use "$port" && continue
        as_user "$user" sh -c "cat >>'$dir/data/postgresql.conf'" <<EOF
# written by ci/postgres.sh (the last setting wins)
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
ssl = on
ssl_cert_file = '$dir/tls/server.crt'
ssl_key_file = '$dir/tls/server.key'
EOF
        echo "$port" >"$dir/port"
        if ctl "$dir" start; then
            as_user "$user" "$bin/psql" -h "$dir" -p "$port" -U "$PG_USER_NAME" -d postgres -v ON_ERROR_STOP=1 \
                -q -c "CREATE DATABASE $PG_DATABASE" -c "CREATE DATABASE ${PG_DATABASE}_tls_only" >&2
            log "cluster in $dir listening on 127.0.0.1:$port"
            print_exports "$dir"
            return
        fi
        log "could not start on port $port (attempt $tries); trying another"
    done
    die "could not start PostgreSQL; see $dir/server.log"
}

stop() {
    local dir=${1:-${RUNWS_PG_DIR:-}}
    [ -n "$dir" ] || die "usage: postgres.sh stop [DIR] (or set RUNWS_PG_DIR)"
    if [ ! -d "$dir" ]; then
        log "$dir is already gone"
        return
    fi
    [ -f "$dir/$MARKER" ] || die "refusing to remove \`$dir\`: it is not a test cluster made by this script"
    if is_running "$dir"; then
        ctl "$dir" stop
    fi
    rm -rf -- "$dir"
    log "removed $dir"
}

case "${1:-}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    ctl) [ $# -eq 3 ] || die "usage: postgres.sh ctl DIR start|stop"; ctl "$2" "$3" ;;
    *) die "usage: postgres.sh start | stop [DIR] | ctl DIR start|stop" ;;
esac
