#!/usr/bin/env bash
# A multi-node Slurm cluster on this machine, for the execution backend's tests and for trying the
# Slurm adapter by hand; used by `make test` (and CI).
#
#   bash scripts/slurm.sh start    # idempotent: installs, configures and starts what is missing
#   bash scripts/slurm.sh status   # one line per daemon; exits non-zero when one is not up
#   bash scripts/slurm.sh stop     # stops the daemons that `start` started
#
# `start`, as root:
#   - installs Debian's slurm-wlm, munge, slurmrestd and slurmdbd when a binary is missing;
#   - uses the MariaDB on 127.0.0.1:3306 (root, empty password) for accounting: database
#     slurm_acct_db, user slurm (its password is generated once and kept in slurmdbd.conf);
#     starts the local MariaDB with the machine's own command when it does not answer;
#   - writes /etc/slurm/{slurm.conf,slurmdbd.conf,gres.conf}, each marked as written here (a
#     file without that mark is never overwritten: the script stops and says so);
#     SLURM_SH_NODES (default 2, at most 8) nodes node1, node2, ..., each with this machine's
#     CPUs, 80% of its memory shared among them and SLURM_SH_GPUS (default 4) GPUs `gpu:fake`,
#     whose device files are stand-ins (/run/cnbrain-slurm/fake-gpu/nodeK/gpuN, character
#     devices with /dev/null's numbers: Slurm 22.05 wants a device per GPU), each GPU also
#     cut into SLURM_SH_SHARDS (default 100) shards (`shard`), which a job asking a fraction
#     of a GPU takes;
#   - gives every node an address of its own, so that multi-node jobs really run across
#     nodes: a bridge cnbrain-br at 10.77.0.1/24 for node1 and the controller, and for node K
#     (K >= 2) a network namespace cnbrain-nodeK joined to it at 10.77.0.K;
#   - starts munged, slurmdbd (then registers the cluster and the REST user's account),
#     slurmctld, one `slurmd -N nodeK` per node (node K >= 2 in its namespace) and slurmrestd
#     with JWT authentication on 127.0.0.1:6820, run as the unprivileged system user
#     cnbrain-slurm;
#   - writes a JWT for cnbrain-slurm (lifespan SLURM_SH_TOKEN_LIFESPAN_S, default 7 days; renewed
#     by every `start`) to /run/cnbrain-slurm/token (mode 0600, owner root), and waits until
#     the REST ping answers with it.
# The REST user cnbrain-slurm is an Operator in Slurm's accounting, so that resuming a job it
# stopped may give the stopped time back to the job's time limit (docs/execution.md). Prints one
# line per daemon, the REST URL and where its token is (as a credential of a brain's store:
# `credentials` in the brain's settings); exits non-zero with the reason when something cannot
# be had. SLURM_SH_WAIT_S (default 60) bounds each wait.
set -uo pipefail

WAIT_S="${SLURM_SH_WAIT_S:-60}"
GPUS="${SLURM_SH_GPUS:-4}"
SHARDS="${SLURM_SH_SHARDS:-100}"
NODES="${SLURM_SH_NODES:-2}"
TOKEN_LIFESPAN_S="${SLURM_SH_TOKEN_LIFESPAN_S:-604800}"

CLUSTER=cnbrain
ACCOUNT=cnbrain
REST_USER=cnbrain-slurm
REST_HOST=127.0.0.1
REST_PORT=6820
REST_URL="http://$REST_HOST:$REST_PORT"
API=v0.0.38
DB_HOST=127.0.0.1
DB_PORT=3306
DB_NAME=slurm_acct_db
DB_USER=slurm

CONF_DIR=/etc/slurm
STATE_DIR=/run/cnbrain-slurm
TOKEN_FILE="$STATE_DIR/token"
STARTED_DIR="$STATE_DIR/started"
FAKE_GPU_DIR="$STATE_DIR/fake-gpu"
JWT_KEY=/var/spool/slurmctld/jwt_hs256.key
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm
MARK="# Written by cnbrain scripts/slurm.sh; edit the script, not this file."
BRIDGE=cnbrain-br
SUBNET=10.77.0
CTLD_ADDR="$SUBNET.1"

APT_UPDATED=0

say() { printf '%s\n' "$*"; }
die() {
    say "slurm.sh: $*" >&2
    exit 1
}
is_root() { [[ "$(id -u)" == 0 ]]; }

# Run "$@" until it succeeds or $1 seconds pass.
wait_for() {
    local limit="$1" start=$SECONDS
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - start >= limit)) && return 1
        sleep 0.5
    done
}

# The last lines of a log file, indented, for an error message.
log_tail() { [[ -f "$1" ]] && tail -n "${2:-8}" "$1" | sed 's/^/    /'; }

apt_install() {
    local log=/tmp/cnbrain-slurm-apt.log
    if ((APT_UPDATED == 0)); then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$log" 2>&1 ||
            say "apt-get update failed (see $log); trying the install with the lists at hand" >&2
        APT_UPDATED=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
        tail -n 5 "$log" >&2
        return 1
    fi
}

# ------------------------------------------------------------------------------ daemons' pids

# The pid file of a daemon.
pid_file() {
    case "$1" in
    munged) echo /run/munge/munged.pid ;;
    slurmdbd) echo "$RUN_DIR/slurmdbd.pid" ;;
    slurmctld) echo "$RUN_DIR/slurmctld.pid" ;;
    slurmd) echo "$RUN_DIR/slurmd.pid" ;; # a single-node configuration's, stopped on start
    slurmd-*) echo "$RUN_DIR/$1.pid" ;;
    slurmrestd) echo "$STATE_DIR/slurmrestd.pid" ;;
    esac
}

# The pid of a running daemon (from its pid file, checked against /proc), or nothing.
daemon_pid() {
    local file pid
    file="$(pid_file "$1")"
    [[ -r "$file" ]] || return 1
    pid="$(tr -dc 0-9 <"$file")"
    [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "${1%%-*}" ]] || return 1
    # A killed daemon not yet reaped by its parent is no daemon.
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
    echo "$pid"
}

running() { daemon_pid "$1" >/dev/null; }

# Remember that this script started a daemon, so that `stop` stops it (and no other).
mark_started() {
    mkdir -p "$STARTED_DIR"
    touch "$STARTED_DIR/$1"
}

stop_daemon() {
    local name="$1" pid
    if pid="$(daemon_pid "$name")"; then
        kill "$pid" 2>/dev/null
        local start=$SECONDS
        while [[ -d "/proc/$pid" ]] && ((SECONDS - start < 20)); do sleep 0.2; done
        if [[ -d "/proc/$pid" ]]; then
            kill -9 "$pid" 2>/dev/null
            say "$name: killed (pid $pid did not stop within 20 s)"
        else
            say "$name: stopped (pid $pid)"
        fi
    else
        say "$name: not running"
    fi
    rm -f "$STARTED_DIR/$name"
}

# ------------------------------------------------------------------------------ installation

ensure_packages() {
    local missing=() bin
    for bin in munged slurmctld slurmd slurmdbd slurmrestd sacctmgr scontrol; do
        command -v "$bin" >/dev/null || missing+=("$bin")
    done
    ((${#missing[@]} == 0)) && return 0
    is_root || die "missing ${missing[*]}; run as root to install them (apt-get install -y slurm-wlm munge slurmrestd slurmdbd)"
    say "installing slurm-wlm munge slurmrestd slurmdbd (missing: ${missing[*]})"
    apt_install slurm-wlm munge slurmrestd slurmdbd ||
        die "installing slurm-wlm munge slurmrestd slurmdbd failed (see /tmp/cnbrain-slurm-apt.log)"
    for bin in "${missing[@]}"; do
        command -v "$bin" >/dev/null || die "$bin still missing after installing the packages"
    done
}

# shellcheck disable=SC2120 # called with arguments through wait_for
mysql_root() { mysql --protocol=TCP -h "$DB_HOST" -P "$DB_PORT" -u root --batch --skip-column-names "$@"; }

ensure_mariadb() {
    wait_for 1 mysql_root -e 'SELECT 1' && return 0
    if [[ ! -x /usr/sbin/mariadbd ]]; then
        say "installing mariadb-server (no MariaDB answers on $DB_HOST:$DB_PORT)"
        apt_install mariadb-server || die "MariaDB is not installed, and installing it failed"
    fi
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >/dev/null 2>&1
    wait_for "$WAIT_S" mysql_root -e 'SELECT 1' ||
        die "MariaDB does not answer on $DB_HOST:$DB_PORT as root with an empty password"
}

ensure_user() {
    getent passwd "$REST_USER" >/dev/null && return 0
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin "$REST_USER" || die "could not create the system user $REST_USER"
}

ensure_dirs() {
    mkdir -p /var/spool/slurmctld /var/spool/slurmd "$LOG_DIR" "$RUN_DIR" /run/munge "$STATE_DIR"
    chown slurm:slurm /var/spool/slurmctld "$LOG_DIR" "$RUN_DIR"
    chown munge:munge /run/munge
    chmod 0755 "$STATE_DIR"
    if [[ ! -s /etc/munge/munge.key ]]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    # Slurm 22.05 drops a GPU that has no File=, and wants a File= to be a device: the fake
    # GPUs are character devices with /dev/null's numbers, one per GPU (the node has no
    # device cgroups, so they only label the GPUs; CUDA_VISIBLE_DEVICES counts them).
    local i node
    for node in $(node_names); do
        mkdir -p "$FAKE_GPU_DIR/$node" "/var/spool/slurmd/$node"
        for ((i = 0; i < GPUS; i++)); do
            [[ -c "$FAKE_GPU_DIR/$node/gpu$i" ]] || mknod -m 0666 "$FAKE_GPU_DIR/$node/gpu$i" c 1 3 ||
                die "could not make the fake GPU device $FAKE_GPU_DIR/$node/gpu$i"
        done
    done
    if [[ ! -s "$JWT_KEY" ]]; then
        dd if=/dev/urandom of="$JWT_KEY" bs=32 count=1 status=none
    fi
    chown slurm:slurm "$JWT_KEY"
    chmod 0600 "$JWT_KEY"
}

# ----------------------------------------------------------------------------- configuration

CHANGED=()

# Write stdin to $1 (owner $2, mode $3) when its content differs; record the change.
write_conf() {
    local file="$1" owner="$2" mode="$3" new
    new="$(cat)"
    if [[ -e "$file" ]] && ! head -n 1 "$file" | grep -qxF "$MARK"; then
        die "$file exists and was not written by this script; move it away to let the script write its own"
    fi
    if [[ ! -e "$file" ]] || [[ "$(cat "$file")" != "$new" ]]; then
        printf '%s\n' "$new" >"$file"
        CHANGED+=("$(basename "$file")")
    fi
    chown "$owner" "$file"
    chmod "$mode" "$file"
}

# The value of Key= in a file written here, or nothing.
conf_value() { [[ -r "$2" ]] && sed -n "s/^$1=//p" "$2" | head -n 1; }

# The nodes' names, node1 to node$NODES.
node_names() {
    local k
    for ((k = 1; k <= NODES; k++)); do echo "node$k"; done
}

# The address of node K (node1 shares the controller's).
node_addr() { echo "$SUBNET.$1"; }

node_lines() {
    local cpus mem_mib k gres=""
    cpus="$(nproc)"
    mem_mib="$(awk -v n="$NODES" '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8 / n}' /proc/meminfo)"
    ((GPUS > 0)) && gres=" Gres=gpu:fake:$GPUS,shard:$((GPUS * SHARDS))"
    for ((k = 1; k <= NODES; k++)); do
        echo "NodeName=node$k NodeAddr=$(node_addr "$k") CPUs=$cpus RealMemory=$mem_mib$gres State=UNKNOWN"
    done
}

# The bridge (node1's and the controller's address) and, for every node K >= 2, a network
# namespace cnbrain-nodeK joined to it by a veth pair: cnb-nodeK outside, eth0 inside.
ensure_network() {
    command -v ip >/dev/null || apt_install iproute2 || die "ip is missing and installing iproute2 failed"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge || die "could not add the bridge $BRIDGE"
    fi
    # (No `| grep -q` under pipefail: grep's early exit can fail the pipeline.)
    [[ "$(ip addr show dev "$BRIDGE")" == *"inet $CTLD_ADDR/"* ]] ||
        ip addr add "$CTLD_ADDR/24" dev "$BRIDGE" || die "could not give $BRIDGE the address $CTLD_ADDR"
    ip link set "$BRIDGE" up || die "could not bring up $BRIDGE"
    local k ns veth
    for ((k = 2; k <= NODES; k++)); do
        ns="cnbrain-node$k" veth="cnb-node$k"
        [[ -e "/run/netns/$ns" ]] || ip netns add "$ns" || die "could not add the network namespace $ns"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$ns" || die "could not add the veth pair $veth"
        fi
        ip link set "$veth" master "$BRIDGE" && ip link set "$veth" up || die "could not join $veth to $BRIDGE"
        [[ "$(ip -n "$ns" addr show dev eth0)" == *"inet $(node_addr "$k")/"* ]] ||
            ip -n "$ns" addr add "$(node_addr "$k")/24" dev eth0 || die "could not address eth0 in $ns"
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || die "could not bring up $ns's links"
    done
}

write_configs() {
    local db_pass
    db_pass="$(conf_value StoragePass "$CONF_DIR/slurmdbd.conf")"
    [[ -n "$db_pass" ]] || db_pass="$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
    DB_PASS="$db_pass"

    local gres_types="" gres_conf="" node
    if ((GPUS > 0)); then
        gres_types="GresTypes=gpu,shard"
        for node in $(node_names); do
            gres_conf+="NodeName=$node Name=gpu Type=fake File=$FAKE_GPU_DIR/$node/gpu[0-$((GPUS - 1))]"$'\n'
            gres_conf+="NodeName=$node Name=shard Count=$((GPUS * SHARDS)) File=$FAKE_GPU_DIR/$node/gpu[0-$((GPUS - 1))]"$'\n'
        done
        gres_conf="${gres_conf%$'\n'}"
    else
        gres_conf="# No generic resources."
    fi

    write_conf "$CONF_DIR/slurm.conf" root:root 0644 <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmctldAddr=$CTLD_ADDR
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu,gres/shard
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
DefMemPerCPU=500
MinJobAge=300
KillWait=5
MailProg=/bin/true
$gres_types
$(node_lines)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

    write_conf "$CONF_DIR/gres.conf" root:root 0644 <<EOF
$MARK
$gres_conf
EOF

    write_conf "$CONF_DIR/slurmdbd.conf" slurm:slurm 0600 <<EOF
$MARK
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
DbdHost=localhost
SlurmUser=slurm
PidFile=$RUN_DIR/slurmdbd.pid
LogFile=$LOG_DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=$DB_HOST
StoragePort=$DB_PORT
StorageUser=$DB_USER
StoragePass=$db_pass
StorageLoc=$DB_NAME
EOF
}

ensure_database() {
    # shellcheck disable=SC2119 # the statements come on standard input
    mysql_root <<EOF || die "could not create the database $DB_NAME and its user $DB_USER in MariaDB"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
EOF
}

# ----------------------------------------------------------------------------------- daemons

changed() {
    local name
    for name in "${CHANGED[@]}"; do [[ "$name" == "$1" ]] && return 0; done
    return 1
}

munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munged() {
    running munged && munge_ok && return 0
    su -s /bin/sh munge -c /usr/sbin/munged >/dev/null 2>&1
    wait_for "$WAIT_S" munge_ok || die "munged: started but credentials do not verify; see /var/log/munge/munged.log
$(log_tail /var/log/munge/munged.log)"
    mark_started munged
}

dbd_ok() { timeout 10 sacctmgr -n -P show cluster format=cluster; }

start_slurmdbd() {
    if running slurmdbd && changed slurmdbd.conf; then stop_daemon slurmdbd >/dev/null; fi
    if ! running slurmdbd; then
        slurmdbd >/dev/null 2>&1 || die "slurmdbd: did not start; see $LOG_DIR/slurmdbd.log
$(log_tail "$LOG_DIR/slurmdbd.log")"
        mark_started slurmdbd
    fi
    wait_for "$WAIT_S" dbd_ok || die "slurmdbd: does not answer within ${WAIT_S}s; see $LOG_DIR/slurmdbd.log
$(log_tail "$LOG_DIR/slurmdbd.log")"
}

# The cluster, an account for the REST user, and the user as an Operator (may suspend jobs).
ensure_associations() {
    if [[ -z "$(sacctmgr -n -P show cluster "$CLUSTER" format=cluster 2>/dev/null)" ]]; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr could not add the cluster $CLUSTER"
        # A running slurmctld registers with the new cluster only when restarted.
        running slurmctld && stop_daemon slurmctld >/dev/null
    fi
    if [[ -z "$(sacctmgr -n -P show account "$ACCOUNT" format=account 2>/dev/null)" ]]; then
        sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" \
            description="cnbrain jobs" organization=cnbrain >/dev/null ||
            die "sacctmgr could not add the account $ACCOUNT"
    fi
    if [[ -z "$(sacctmgr -n -P show user "$REST_USER" format=user 2>/dev/null)" ]]; then
        sacctmgr -i add user "$REST_USER" account="$ACCOUNT" cluster="$CLUSTER" \
            adminlevel=Operator >/dev/null || die "sacctmgr could not add the user $REST_USER"
    fi
}

ctld_ok() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
    if running slurmctld && (changed slurm.conf || changed gres.conf); then stop_daemon slurmctld >/dev/null; fi
    if ! running slurmctld; then
        slurmctld >/dev/null 2>&1 || die "slurmctld: did not start; see $LOG_DIR/slurmctld.log
$(log_tail "$LOG_DIR/slurmctld.log")"
        mark_started slurmctld
    fi
    wait_for "$WAIT_S" ctld_ok || die "slurmctld: does not answer within ${WAIT_S}s; see $LOG_DIR/slurmctld.log
$(log_tail "$LOG_DIR/slurmctld.log")"
}

node_state() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -n 1; }

node_ready() {
    case "$(node_state "$1")" in
    idle | mixed | allocated | completing) return 0 ;;
    *) return 1 ;;
    esac
}

# The slurmd of node K, in its network namespace when K >= 2.
run_slurmd() {
    local k="$1"
    if ((k == 1)); then
        slurmd -N node1
    else
        # nsenter joins the namespace only: `ip netns exec` would remount /sys, and slurmd
        # needs the machine's cgroup mounts there.
        nsenter --net="/run/netns/cnbrain-node$k" slurmd -N "node$k"
    fi
}

start_slurmd() {
    # A slurmd of the single-node configuration this script wrote before runs as `localhost`.
    running slurmd && stop_daemon slurmd >/dev/null
    local k node
    for ((k = 1; k <= NODES; k++)); do
        node="node$k"
        if running "slurmd-$node" && (changed slurm.conf || changed gres.conf); then
            stop_daemon "slurmd-$node" >/dev/null
        fi
        if ! running "slurmd-$node"; then
            run_slurmd "$k" >/dev/null 2>&1 || die "slurmd: $node did not start; see $LOG_DIR/slurmd-$node.log
$(log_tail "$LOG_DIR/slurmd-$node.log")"
            mark_started "slurmd-$node"
        fi
    done
    local start=$SECONDS state
    for node in $(node_names); do
        until node_ready "$node"; do
            state="$(node_state "$node")"
            # A node left down or drained by an earlier configuration comes back here.
            if [[ "$state" == down* || "$state" == drain* ]]; then
                scontrol update nodename="$node" state=resume >/dev/null 2>&1
            fi
            ((SECONDS - start >= WAIT_S)) && die "slurmd: node $node is '${state:-unknown}' after ${WAIT_S}s, not idle; \
reason: $(sinfo -h -N -n "$node" -o '%E' 2>/dev/null); see $LOG_DIR/slurmd-$node.log
$(log_tail "$LOG_DIR/slurmd-$node.log")"
            sleep 0.5
        done
    done
}

write_token() {
    local out token
    out="$(scontrol token username="$REST_USER" lifespan="$TOKEN_LIFESPAN_S" 2>&1)" ||
        die "scontrol token failed: $out"
    token="${out#SLURM_JWT=}"
    [[ -n "$token" && "$token" != "$out" ]] || die "scontrol token printed no token: $out"
    local tmp="$TOKEN_FILE.tmp"
    if ! (umask 077 && printf '%s\n' "$token" >"$tmp") || ! mv -f "$tmp" "$TOKEN_FILE"; then
        die "could not write $TOKEN_FILE"
    fi
    chmod 0600 "$TOKEN_FILE"
}

rest_ping() {
    local code
    code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 \
        -H "X-SLURM-USER-NAME: $REST_USER" -H "X-SLURM-USER-TOKEN: $(cat "$TOKEN_FILE")" \
        "$REST_URL/slurm/$API/ping")"
    [[ "$code" == 200 ]]
}

start_slurmrestd() {
    if running slurmrestd && ((${#CHANGED[@]} > 0)); then stop_daemon slurmrestd >/dev/null; fi
    if ! running slurmrestd; then
        # A slurmrestd this script has lost track of (its pid file gone) still holds the port.
        local stale
        stale="$(ss -ltnpH "sport = :$REST_PORT" 2>/dev/null | sed -n 's/.*("slurmrestd",pid=\([0-9]*\).*/\1/p' | head -n 1)"
        if [[ -n "$stale" ]]; then
            kill "$stale" 2>/dev/null
            wait_for 20 test ! -d "/proc/$stale" || kill -9 "$stale" 2>/dev/null
        fi
        local log="$LOG_DIR/slurmrestd.log"
        touch "$log"
        chown "$REST_USER" "$log"
        # slurmrestd stays in the foreground: its own session, the user's ids, its pid in a file
        # (the subshell, setsid and setpriv exec, so $! becomes slurmrestd itself once each of
        # them has exec'd the next). It runs in / : a working directory removed later (a
        # checkout deleted) would break its job submissions.
        (cd / && exec setsid setpriv --reuid="$REST_USER" --regid="$REST_USER" --init-groups \
            env SLURM_JWT=daemon slurmrestd -a rest_auth/jwt -s "openapi/$API,openapi/db$API" \
            "$REST_HOST:$REST_PORT") >>"$log" 2>&1 </dev/null &
        local child=$! start=$SECONDS comm=""
        while ((SECONDS - start < WAIT_S)); do
            comm="$(cat "/proc/$child/comm" 2>/dev/null)" || break
            [[ "$comm" == slurmrestd ]] && break
            sleep 0.1
        done
        if [[ "$comm" != slurmrestd ]]; then
            local status="still '$comm' after ${WAIT_S}s"
            [[ -d "/proc/$child" ]] || { wait "$child"; status="exited with status $?"; }
            die "slurmrestd: did not start ($status); see $log
$(log_tail "$log")"
        fi
        echo "$child" >"$(pid_file slurmrestd)"
        mark_started slurmrestd
    fi
    wait_for "$WAIT_S" rest_ping || die "slurmrestd: $REST_URL/slurm/$API/ping does not answer 200 \
within ${WAIT_S}s; see $LOG_DIR/slurmrestd.log
$(log_tail "$LOG_DIR/slurmrestd.log")"
}

# ---------------------------------------------------------------------------------- commands

print_status() {
    local bad=0 name pid
    for name in munged slurmdbd slurmctld $(node_names | sed 's/^/slurmd-/') slurmrestd; do
        if pid="$(daemon_pid "$name")"; then
            case "$name" in
            munged) say "munged: running (pid $pid)" ;;
            slurmdbd) say "slurmdbd: running (pid $pid), accounting in MariaDB $DB_HOST:$DB_PORT/$DB_NAME" ;;
            slurmctld) say "slurmctld: running (pid $pid), cluster $CLUSTER" ;;
            slurmd-*) say "slurmd: running (pid $pid), node ${name#slurmd-} $(node_state "${name#slurmd-}"), \
$(sinfo -h -N -n "${name#slurmd-}" -o 'addr=%o cpus=%c memory=%mMiB gres=%G' 2>/dev/null)" ;;
            slurmrestd) say "slurmrestd: running (pid $pid) as $REST_USER on $REST_HOST:$REST_PORT" ;;
            esac
        else
            say "$name: not running"
            bad=1
        fi
    done
    if [[ -r "$TOKEN_FILE" ]] && rest_ping; then
        say "rest: $REST_URL (OpenAPI $API; user $REST_USER; token in $TOKEN_FILE)"
        say "credential for a brain's store: {local-slurm: {url: \"$REST_URL\", token_file: $TOKEN_FILE}}"
    else
        say "rest: $REST_URL does not answer"
        bad=1
    fi
    return "$bad"
}

cmd_start() {
    is_root || die "start needs root (it installs packages, writes /etc/slurm and starts daemons)"
    ensure_packages
    command -v curl >/dev/null || apt_install curl || die "curl is missing and installing it failed"
    ensure_mariadb
    ensure_user
    ensure_dirs
    ensure_network
    write_configs
    ensure_database
    start_munged
    start_slurmdbd
    ensure_associations
    start_slurmctld
    start_slurmd
    write_token
    start_slurmrestd
    print_status || die "a daemon is not up (see above)"
}

cmd_stop() {
    is_root || die "stop needs root"
    local name
    for name in slurmrestd $(node_names | sed 's/^/slurmd-/') slurmd slurmctld slurmdbd munged; do
        if [[ -e "$STARTED_DIR/$name" ]]; then
            stop_daemon "$name"
        elif running "$name"; then
            say "$name: left running (not started by this script)"
        else
            say "$name: not running"
        fi
    done
    rm -f "$TOKEN_FILE"
}

[[ "$NODES" =~ ^[1-8]$ ]] || die "SLURM_SH_NODES must be a whole number from 1 to 8, not '$NODES'"

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) print_status ;;
*)
    say "usage: bash scripts/slurm.sh start|stop|status" >&2
    exit 2
    ;;
esac
