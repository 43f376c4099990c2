#!/usr/bin/env bash
# Make sure the PostgreSQL and Redis that the tests use are up; used by `make test` (and CI).
#
# Idempotent. Per service:
#   - CNBRAIN_TEST_POSTGRES_URL / CNBRAIN_TEST_REDIS_URL set: only check that server answers
#     (nothing is started or installed).
#   - otherwise the local server on its standard port (PostgreSQL 127.0.0.1:5432, Redis
#     127.0.0.1:6379): nothing to do when it answers; started with the machine's own command
#     when it does not; installed from Debian's packages first (as root) when its binaries are
#     missing.
# Prints one line per service; exits non-zero with the reason when a service cannot be had.
# SERVICES_WAIT_S (default 30) bounds the wait for a started server to answer.
set -uo pipefail

WAIT_S="${SERVICES_WAIT_S:-30}"
URL_WAIT_S=5
PG_HOST=127.0.0.1
PG_PORT=5432
REDIS_HOST=127.0.0.1
REDIS_PORT=6379
APT_UPDATED=0
FAILED=0

say() { printf '%s\n' "$*"; }
fail() {
    say "$1: NOT AVAILABLE: $2" >&2
    FAILED=1
}

# A URL with its password replaced by ***.
redact() { sed -E 's#^([a-z][a-z0-9+.-]*://[^:/@]*):[^@/]*@#\1:***@#' <<<"$1"; }

# host and port of a URL, as "host port" ([v6] hosts keep their brackets off).
host_port() {
    local rest="${1#*://}" default_port="$2" hostport host port
    rest="${rest##*@}"
    hostport="${rest%%[/?]*}"
    if [[ "$hostport" =~ ^\[([^]]+)\](:([0-9]+))?$ ]]; then
        host="${BASH_REMATCH[1]}" port="${BASH_REMATCH[3]:-$default_port}"
    elif [[ "$hostport" =~ ^([^:]*)(:([0-9]+))?$ ]]; then
        host="${BASH_REMATCH[1]:-localhost}" port="${BASH_REMATCH[3]:-$default_port}"
    else
        return 1
    fi
    printf '%s %s\n' "$host" "$port"
}

# True when something accepts TCP connections at host port.
tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# Run "$@" until it succeeds or $1 seconds pass.
wait_for() {
    local limit="$1" start=$SECONDS
    shift
    until "$@"; do
        ((SECONDS - start >= limit)) && return 1
        sleep 0.5
    done
}

is_root() { [[ "$(id -u)" == 0 ]]; }

apt_install() {
    if ! is_root; then
        say "need root to install $* (run: apt-get update && apt-get install -y $*)" >&2
        return 1
    fi
    local log=/tmp/cnbrain-services-apt.log
    if ((APT_UPDATED == 0)); then
        # A failed update is not fatal: the package lists (or cached packages) may suffice.
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 ||
            say "apt-get update failed (see $log); trying the install with the lists at hand" >&2
        APT_UPDATED=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
        tail -n 5 "$log" >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------------- PostgreSQL

pg_url_ready() {
    # pg_isready understands libpq URLs, not SQLAlchemy's postgresql+driver:// form.
    local url
    url="$(sed -E 's#^postgres(ql)?\+[a-z0-9]+://#postgresql://#' <<<"$1")"
    if command -v pg_isready >/dev/null; then
        pg_isready -q -t 3 -d "$url"
    else
        local hp
        hp="$(host_port "$url" 5432)" || return 1
        # shellcheck disable=SC2086
        tcp_open $hp
    fi
}

pg_local_ready() { pg_isready -q -t 3 -h "$PG_HOST" -p "$PG_PORT"; }

pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

pg_initialise() {
    # As on this machine kind: a cluster "main", trust auth on the socket and on loopback,
    # a superuser role root and the databases root and test.
    local ver
    ver="$(pg_version)"
    if [[ -z "$ver" ]]; then
        ver="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
        pg_createcluster "$ver" main >/dev/null || return 1
    fi
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    cat >"$hba" <<'EOF'
local all all trust
host all all 127.0.0.1/32 trust
host all all ::1/128 trust
EOF
    chown postgres:postgres "$hba"
}

pg_create_defaults() {
    local psql=(psql -q -h "$PG_HOST" -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1)
    "${psql[@]}" -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'root')
        THEN CREATE ROLE root SUPERUSER LOGIN; END IF; END\$\$;" >/dev/null || return 1
    local db
    for db in root test; do
        if [[ -z "$("${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]]; then
            createdb -h "$PG_HOST" -p "$PG_PORT" -U postgres -O root "$db" || return 1
        fi
    done
}

ensure_postgres() {
    if [[ -n "${CNBRAIN_TEST_POSTGRES_URL:-}" ]]; then
        local shown
        shown="$(redact "$CNBRAIN_TEST_POSTGRES_URL")"
        if wait_for "$URL_WAIT_S" pg_url_ready "$CNBRAIN_TEST_POSTGRES_URL"; then
            say "postgresql: ready at $shown (CNBRAIN_TEST_POSTGRES_URL; not managed here)"
        else
            fail postgresql "$shown (CNBRAIN_TEST_POSTGRES_URL) does not answer"
        fi
        return
    fi
    if command -v pg_isready >/dev/null && pg_local_ready; then
        say "postgresql: ready at $PG_HOST:$PG_PORT (already running)"
        return
    fi
    local how=started installed=0
    if ! command -v pg_ctlcluster >/dev/null || [[ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]]; then
        apt_install postgresql || {
            fail postgresql "not installed, and installing it failed"
            return
        }
        installed=1 how="installed and started"
    fi
    if ((installed)) || [[ -z "$(pg_version)" ]]; then
        pg_initialise || {
            fail postgresql "could not initialise a cluster"
            return
        }
    fi
    local ver out
    ver="$(pg_version)"
    if ! out="$(pg_ctlcluster --skip-systemctl-redirect "$ver" main start 2>&1)"; then
        # "already running" (still starting up) is fine: the wait below decides.
        [[ -n "$out" ]] && say "postgresql: pg_ctlcluster said: $out" >&2
    fi
    if ! wait_for "$WAIT_S" pg_local_ready; then
        fail postgresql "started with 'pg_ctlcluster --skip-systemctl-redirect $ver main start' \
but $PG_HOST:$PG_PORT did not answer within ${WAIT_S}s; see /var/log/postgresql/postgresql-$ver-main.log"
        return
    fi
    if ((installed)); then
        # The package may have started the cluster before pg_hba.conf was rewritten.
        pg_ctlcluster --skip-systemctl-redirect "$ver" main reload >/dev/null 2>&1
        sleep 1
        pg_create_defaults || {
            fail postgresql "running, but creating the role root and databases root, test failed"
            return
        }
    fi
    say "postgresql: ready at $PG_HOST:$PG_PORT ($how)"
}

# ------------------------------------------------------------------------------------- Redis

redis_url_ready() {
    if command -v redis-cli >/dev/null; then
        [[ "$(timeout 3 redis-cli --no-auth-warning -u "$1" ping 2>/dev/null)" == PONG ]]
    else
        local hp
        hp="$(host_port "$1" 6379)" || return 1
        # shellcheck disable=SC2086
        tcp_open $hp
    fi
}

redis_local_ready() {
    [[ "$(timeout 3 redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]
}

ensure_redis() {
    if [[ -n "${CNBRAIN_TEST_REDIS_URL:-}" ]]; then
        local shown
        shown="$(redact "$CNBRAIN_TEST_REDIS_URL")"
        if wait_for "$URL_WAIT_S" redis_url_ready "$CNBRAIN_TEST_REDIS_URL"; then
            say "redis: ready at $shown (CNBRAIN_TEST_REDIS_URL; not managed here)"
        else
            fail redis "$shown (CNBRAIN_TEST_REDIS_URL) does not answer PING"
        fi
        return
    fi
    if command -v redis-cli >/dev/null && redis_local_ready; then
        say "redis: ready at $REDIS_HOST:$REDIS_PORT (already running)"
        return
    fi
    local how=started
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        apt_install redis-server || {
            fail redis "not installed, and installing it failed"
            return
        }
        how="installed and started"
        # The package's own init script may have started one already.
        if wait_for 3 redis_local_ready; then
            say "redis: ready at $REDIS_HOST:$REDIS_PORT (installed; started by the package)"
            return
        fi
    fi
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null
    local out
    if ! out="$(redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log 2>&1)"; then
        local hint=""
        is_root || hint=" (not root: run this script as root)"
        fail redis "redis-server did not start$hint: $(tr -s '\n' ' ' <<<"$out")"
        return
    fi
    if ! wait_for "$WAIT_S" redis_local_ready; then
        fail redis "started redis-server on port $REDIS_PORT but it did not answer PING within \
${WAIT_S}s; see /var/log/redis/ci.log"
        return
    fi
    say "redis: ready at $REDIS_HOST:$REDIS_PORT ($how)"
}

ensure_postgres
ensure_redis
if ((FAILED)); then
    say "services.sh: a service the tests need is missing (see above)" >&2
    exit 1
fi
