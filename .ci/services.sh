#!/usr/bin/env bash
# Start the services envbuilder's integration tests need, on a Debian bookworm machine:
#   - a Docker engine (Debian's docker.io, legacy builder) on /var/run/docker.sock,
#   - two local registries: 127.0.0.1:5000 (no auth; also the engine's registry mirror) and
#     127.0.0.1:5001 (htpasswd: envbuilder / envbuilder-test),
#   - debian:bookworm-slim, seeded from debootstrap and served by the mirror, so that
#     `docker pull debian:bookworm-slim` works without a public registry. The seed is
#     reproducible (.ci/seed_image.py): the same digest on every machine while Debian's archive
#     serves the same bookworm packages; its files stay in $STATE_DIR/seed.
#   - a replica of Debian's snapshot archive on 127.0.0.1:5003 (.ci/apt_snapshot.py): Debian's
#     signed index files and exactly the .debs the committed locks pin, for the rendered
#     Dockerfiles' snapshot sources (snapshot.debian.org is unreachable from CI); exported as
#     ENVBUILDER_APT_PROXY, the apt proxy envbuilder's builds use;
#   - a two-node Slurm cluster on this one machine (Debian's Slurm 22.05, docs/cluster.md):
#     a private munged, one slurmctld and two slurmd (`-N n1`, `-N n2`), all on 127.0.0.1,
#     configured by $STATE_DIR/slurm/slurm.conf (exported as SLURM_CONF).
#   - the Dev Containers CLI (@devcontainers/cli from npm, pinned) under $STATE_DIR, for
#     tests/test_devcontainer.py (exported as ENVBUILDER_DEVCONTAINER_CLI).
# Idempotent: whatever already runs is left alone. Progress goes to stderr; stdout carries only
# `export` lines, so `eval "$(.ci/services.sh)"` sets ENVBUILDER_TEST_REGISTRY, SLURM_CONF and
# friends.
# Usage: .ci/services.sh [--no-install]     (root, or a user with sudo)
set -euo pipefail

STATE_DIR="${ENVBUILDER_CI_STATE:-/var/lib/envbuilder-ci}"
REGISTRY_PORT=5000
AUTH_REGISTRY_PORT=5001
AUTH_USER=envbuilder
AUTH_PASSWORD=envbuilder-test
SEED_IMAGE=debian:bookworm-slim
SEED_SUITE=bookworm
SEED_TAG=bookworm-slim
# Only to try the seed itself without touching the served one (e.g. envbuilder-seedtest/debian).
SEED_REPOSITORY="${ENVBUILDER_SEED_REPOSITORY:-library/debian}"
SEED_DIR="$STATE_DIR/seed"
APT_SNAPSHOT_PORT=5003
APT_SNAPSHOT_DIR="$STATE_DIR/apt-snapshot"
if [ "$SEED_REPOSITORY" != library/debian ]; then SEED_DIR="$STATE_DIR/seed-${SEED_REPOSITORY//\//-}"; fi
CI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DOCKER_SOCK=/var/run/docker.sock
# openssh-server: tests/test_docker_ssh.py starts its own sshd on 127.0.0.1 (DOCKER_HOST=ssh://).
PACKAGES=(docker.io docker-registry debootstrap shellcheck chromium apache2-utils iptables curl python3-venv openssh-client
    openssh-server munge slurmctld slurmd slurm-client)
# The local Slurm cluster (docs/cluster.md): everything it writes lives under $SLURM_DIR.
SLURM_DIR="$STATE_DIR/slurm"
SLURM_CONF_FILE="$SLURM_DIR/slurm.conf"
MUNGE_SOCKET="$SLURM_DIR/munge/munge.socket"
SLURMCTLD_PORT=17000
SLURM_NODES=(n1 n2)
SLURM_NODE_PORTS=(17001 17002)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

log() { printf 'services.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Docker CE (Docker's own packages: docker-ce, containerd.io) conflicts with Debian's docker.io:
# installing docker.io over it would remove it. When it is there, it is kept and used as it is.
docker_ce_installed() {
    dpkg-query -W -f='${Status}' docker-ce 2>/dev/null | grep -q 'install ok installed'
}

install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        if [ "$pkg" = docker.io ] && docker_ce_installed; then
            log "Docker CE is installed: keeping it (Debian's docker.io is not installed)"
            continue
        fi
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then return; fi
    log "installing ${missing[*]}"
    # Other jobs may hold the dpkg lock for a while: wait instead of failing.
    $SUDO apt-get -q -o DPkg::Lock::Timeout=600 update >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -q -y -o DPkg::Lock::Timeout=600 \
        install --no-install-recommends "${missing[@]}" >&2
}

# wait_for DESCRIPTION SECONDS COMMAND...: poll COMMAND once a second.
wait_for() {
    local what=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 1
    done
    die "$what did not come up within ${secs}s"
}

http_status() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" || true
}

registry_up() { [ "$(http_status "http://127.0.0.1:$1/v2/")" = "$2" ]; }

write_registry_config() {
    local port=$1 dir="$STATE_DIR/registry-$1"
    $SUDO mkdir -p "$dir/data"
    {
        printf 'version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n'
        printf 'storage:\n  filesystem:\n    rootdirectory: %s/data\n  delete:\n    enabled: true\n' "$dir"
        printf 'http:\n  addr: 127.0.0.1:%s\n' "$port"
        if [ "$port" = "$AUTH_REGISTRY_PORT" ]; then
            printf 'auth:\n  htpasswd:\n    realm: envbuilder-test\n    path: %s/htpasswd\n' "$dir"
        fi
    } | $SUDO tee "$dir/config.yml" >/dev/null
    if [ "$port" = "$AUTH_REGISTRY_PORT" ]; then
        # The registry accepts bcrypt entries only (-B).
        htpasswd -Bbn "$AUTH_USER" "$AUTH_PASSWORD" | $SUDO tee "$dir/htpasswd" >/dev/null
    fi
}

start_registry() {
    local port=$1 expect=$2 dir="$STATE_DIR/registry-$1"
    if registry_up "$port" "$expect"; then
        log "registry on 127.0.0.1:$port already up"
        return
    fi
    write_registry_config "$port"
    log "starting registry on 127.0.0.1:$port (log: $dir/registry.log)"
    $SUDO setsid nohup docker-registry serve "$dir/config.yml" \
        >"$dir/registry.log" 2>&1 </dev/null &
    wait_for "registry on 127.0.0.1:$port" 30 registry_up "$port" "$expect"
}

engine_up() { docker info >/dev/null 2>&1; }

die_docker_ce() {
    die "Docker CE's engine $1. The tests need it to use the local registry as its mirror: add
    \"registry-mirrors\": [\"http://127.0.0.1:$REGISTRY_PORT\"],
    \"insecure-registries\": [\"127.0.0.1:$REGISTRY_PORT\", \"127.0.0.1:$AUTH_REGISTRY_PORT\"]
to /etc/docker/daemon.json, run \`systemctl restart docker\` (your containers stop), then run $0 again"
}

engine_has_mirror() {
    docker info --format '{{range .RegistryConfig.Mirrors}}{{.}} {{end}}' 2>/dev/null \
        | grep -q "127.0.0.1:$REGISTRY_PORT"
}

start_engine() {
    if engine_up; then
        if engine_has_mirror; then
            log "Docker engine already up"
            return
        fi
        # Docker CE's engine belongs to its owner: it is never stopped or replaced here.
        if docker_ce_installed; then die_docker_ce "runs without the registry mirror"; fi
        # Debian's package starts dockerd through its init script on install, without the
        # mirror. Only that instance (the one with the init script's pid file) is replaced.
        if [ -x /etc/init.d/docker ] && [ -f /var/run/docker-ssd.pid ]; then
            log "stopping the init script's dockerd (it has no registry mirror)"
            $SUDO /etc/init.d/docker stop >&2 || true
            wait_for "old dockerd to stop" 30 bash -c "! docker info"
        else
            die "a Docker engine runs without --registry-mirror=http://127.0.0.1:$REGISTRY_PORT; \
restart it with the flags in $0 (or add \"registry-mirrors\" to /etc/docker/daemon.json)"
        fi
    fi
    if docker_ce_installed; then die_docker_ce "is not running"; fi
    $SUDO mkdir -p "$STATE_DIR"
    log "starting dockerd (log: $STATE_DIR/dockerd.log)"
    $SUDO setsid nohup dockerd \
        --host "unix://$DOCKER_SOCK" \
        --registry-mirror "http://127.0.0.1:$REGISTRY_PORT" \
        --insecure-registry "127.0.0.1:$REGISTRY_PORT" \
        --insecure-registry "127.0.0.1:$AUTH_REGISTRY_PORT" \
        >"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
    wait_for "dockerd (see $STATE_DIR/dockerd.log)" 60 engine_up
}

# The digest the registry serves for $SEED_REPOSITORY:$SEED_TAG ("" when it serves none).
served_digest() {
    curl -s -I --max-time 5 -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://127.0.0.1:$REGISTRY_PORT/v2/$SEED_REPOSITORY/manifests/$SEED_TAG" \
        | tr -d '\r' | awk 'tolower($1) == "docker-content-digest:" {print $2}'
}

# Seeded = the registry serves the image .ci/seed_image.py built here (an older, irreproducible
# seed from `docker import` is replaced).
seeded() {
    [ -f "$SEED_DIR/manifest.json" ] || return 1
    [ "$(served_digest)" = "sha256:$(sha256sum "$SEED_DIR/manifest.json" | cut -d' ' -f1)" ]
}

# Make the debootstrap tree look like the official slim image where our Dockerfiles care:
# apt works (updates + security suites), no caches or docs, no apt lists.
slim_down() {
    local root=$1 uri
    uri=$(awk '$1 == "deb" {print $2; exit}' "$root/etc/apt/sources.list")
    [ -n "$uri" ] || die "debootstrap wrote no apt source"
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s-security %s-security main\n' \
        "$uri" "$SEED_SUITE" "$uri" "$SEED_SUITE" "$uri" "$SEED_SUITE" >"$root/etc/apt/sources.list"
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Acquire::GzipIndexes "true";' >"$root/etc/apt/apt.conf.d/docker-gzip-indexes"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' \
        >"$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
    mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
    cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
        "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/*/[!c]* "$root"/usr/share/man/* \
        "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/log/apt/* \
        "$root"/debootstrap
    # Like the official image: the container runtime provides these.
    : >"$root/etc/resolv.conf"
    : >"$root/etc/hostname"
}

# debootstrap + slim_down + .ci/seed_image.py: the image's digest depends only on the package
# versions Debian's archive serves (see docs/docker.md), not on the machine or the day.
build_seed() {
    local rootfs
    rootfs=$(mktemp -d /tmp/envbuilder-seed.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "$SUDO rm -rf '$rootfs' '$SEED_DIR.new'" EXIT
    log "debootstrap $SEED_SUITE into $rootfs (about 20-60 s)"
    $SUDO debootstrap --variant=minbase "$SEED_SUITE" "$rootfs" >"$STATE_DIR/debootstrap.log" 2>&1 \
        || die "debootstrap failed, see $STATE_DIR/debootstrap.log"
    $SUDO bash -c "$(declare -f slim_down die log); SEED_SUITE=$SEED_SUITE; slim_down '$rootfs'"
    log "writing the reproducible image into $SEED_DIR"
    $SUDO rm -rf "$SEED_DIR.new"
    $SUDO python3 "$CI_DIR/seed_image.py" build "$rootfs" --out "$SEED_DIR.new" >&2
    $SUDO rm -rf "$SEED_DIR" "$rootfs"
    $SUDO mv "$SEED_DIR.new" "$SEED_DIR"
    trap - EXIT
}

seed_base_image() {
    local mirror_ref="127.0.0.1:$REGISTRY_PORT/$SEED_REPOSITORY:$SEED_TAG"
    if seeded; then
        log "$mirror_ref already served by 127.0.0.1:$REGISTRY_PORT"
    else
        # The files of an earlier seed are pushed again (e.g. after the registry lost its data).
        [ -f "$SEED_DIR/manifest.json" ] || build_seed
        log "pushing $SEED_DIR as $mirror_ref"
        python3 "$CI_DIR/seed_image.py" push "$SEED_DIR" --registry "127.0.0.1:$REGISTRY_PORT" \
            --name "$SEED_REPOSITORY" --tag "$SEED_TAG" >&2
        seeded || die "the registry does not serve $mirror_ref after the push"
    fi
    docker pull -q "$mirror_ref" >/dev/null || die "docker pull $mirror_ref failed"
    if [ "$SEED_REPOSITORY" = library/debian ]; then docker tag "$mirror_ref" "$SEED_IMAGE"; fi
    log "$mirror_ref is $(served_digest)"
}

check_pull() {
    # Through the mirror, as a user's `docker pull` would go.
    docker pull -q "$SEED_IMAGE" >/dev/null || die "docker pull $SEED_IMAGE failed"
    log "docker pull $SEED_IMAGE works"
}

# --- the replica of Debian's snapshot archive (docs/reproducibility.md, "apt snapshots") ---

apt_snapshot_up() {
    [ "$(http_status "http://127.0.0.1:$APT_SNAPSHOT_PORT/archive/debian/20000101T000000Z/dists/bookworm/InRelease")" = 200 ]
}

# Built from the committed locks' apt pins; built again (and restarted) when they change.
start_apt_snapshot() {
    local pins
    pins=$(python3 "$CI_DIR/apt_snapshot.py" pins --lock "$CI_DIR"/../lockfiles/*.lock.toml)
    if apt_snapshot_up && [ "$pins" = "$(cat "$APT_SNAPSHOT_DIR/pins.txt" 2>/dev/null)" ]; then
        log "apt snapshot replica on 127.0.0.1:$APT_SNAPSHOT_PORT already up"
        return
    fi
    stop_pidfile "$STATE_DIR/apt-snapshot.pid" python3
    log "building the apt snapshot replica in $APT_SNAPSHOT_DIR (Debian's signed indexes, pinned .debs)"
    $SUDO python3 "$CI_DIR/apt_snapshot.py" build --lock "$CI_DIR"/../lockfiles/*.lock.toml \
        --out "$APT_SNAPSHOT_DIR" --cache "$STATE_DIR/apt-debs" >&2 \
        || die "building the apt snapshot replica failed"
    printf '%s\n' "$pins" | $SUDO tee "$APT_SNAPSHOT_DIR/pins.txt" >/dev/null
    log "starting the apt snapshot replica on 127.0.0.1:$APT_SNAPSHOT_PORT"
    $SUDO setsid nohup python3 "$CI_DIR/apt_snapshot.py" serve "$APT_SNAPSHOT_DIR" \
        --port "$APT_SNAPSHOT_PORT" >"$STATE_DIR/apt-snapshot.log" 2>&1 </dev/null &
    echo $! | $SUDO tee "$STATE_DIR/apt-snapshot.pid" >/dev/null
    wait_for "the apt snapshot replica (see $STATE_DIR/apt-snapshot.log)" 30 apt_snapshot_up
}

# --- the local Slurm cluster (docs/cluster.md) ---

# munged, private to this cluster: its own key, socket and pid file under $SLURM_DIR/munge, so a
# system munged (or none) does not matter. It runs as the munge user, as Debian's unit does.
munge_up() {
    [ -S "$MUNGE_SOCKET" ] && munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null
}

start_munge() {
    local dir="$SLURM_DIR/munge"
    if munge_up 2>/dev/null; then
        log "munged on $MUNGE_SOCKET already up"
        return
    fi
    $SUDO install -d -o munge -g munge -m 0755 "$dir"
    if [ ! -s "$dir/munge.key" ]; then
        log "creating the cluster's munge key $dir/munge.key"
        $SUDO runuser -u munge -- mungekey --create --keyfile="$dir/munge.key" >&2
    fi
    log "starting munged on $MUNGE_SOCKET (log: $dir/munged.log)"
    # munged forks into the background itself once its socket is ready.
    $SUDO runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$dir/munge.key" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        </dev/null >&2
    wait_for "munged (see $dir/munged.log)" 30 munge_up
}

# The whole slurm.conf. Why each non-default line is there:
# - two NodeName lines on 127.0.0.1 with their own Port: Slurm's way to run several slurmd on
#   one host (`slurmd -N NAME`); %n in the spool dir and pid file keeps them apart.
# - SlurmdParameters=config_overrides: the nodes are what this file says (CPUs=2 each), not
#   what slurmd measures, so a smaller machine does not drain them.
# - proctrack/linuxproc, task/none, no accounting: no cgroups or database needed;
#   MailProg=/bin/true: no mailer is installed (and no job asks for mail).
# - CommunicationParameters: the daemons bind 127.0.0.1 (what the names resolve to), not *.
# - KillWait=2, MinJobAge=300: a killed job is gone fast, a finished one stays visible to
#   `scontrol show job` for 5 minutes (tests read its final state).
slurm_conf() {
    local i
    cat <<EOF
# Written by .ci/services.sh; rewritten (and the daemons restarted) when it changes.
ClusterName=envbuilder-ci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=${SLURM_NODE_PORTS[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool-%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MailProg=/bin/true
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=300
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
EOF
    for i in "${!SLURM_NODES[@]}"; do
        printf 'NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%s CPUs=2 State=UNKNOWN\n' \
            "${SLURM_NODES[$i]}" "${SLURM_NODE_PORTS[$i]}"
    done
    printf 'PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n'
}

# pid_alive PIDFILE NAME: the pid file names a live process whose command is NAME.
pid_alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

slurmctld_up() { SLURM_CONF="$SLURM_CONF_FILE" scontrol ping 2>/dev/null | grep -q 'is UP'; }
slurmd_up() { pid_alive "$SLURM_DIR/slurmd-$1.pid" slurmd; }

# Every node answers (idle, allocated, mixed, completing: not down, drained or unresponsive).
slurm_nodes_up() {
    local states
    states=$(SLURM_CONF="$SLURM_CONF_FILE" sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    [ "$(printf '%s\n' "$states" | grep -cE '^n[0-9]+ (idle|alloc|mix|comp)$')" \
        = "${#SLURM_NODES[@]}" ]
}

# stop_pidfile PIDFILE NAME: stop the daemon this script started (and only that one).
stop_pidfile() {
    local pid i
    pid_alive "$1" "$2" || return 0
    pid=$(cat "$1")
    log "stopping $2 (pid $pid)"
    $SUDO kill "$pid"
    for ((i = 0; i < 30; i++)); do
        pid_alive "$1" "$2" || return 0
        sleep 1
    done
    die "$2 (pid $pid) did not stop within 30s"
}

stop_slurm_daemons() {
    local node
    for node in "${SLURM_NODES[@]}"; do stop_pidfile "$SLURM_DIR/slurmd-$node.pid" slurmd; done
    stop_pidfile "$SLURM_DIR/slurmctld.pid" slurmctld
}

# Write slurm.conf when it differs from slurm_conf's; running daemons read the old one, so they
# are restarted then (a plain re-run finds it unchanged and touches nothing).
write_slurm_conf() {
    local new
    new=$(slurm_conf)
    if [ -f "$SLURM_CONF_FILE" ] && [ "$new" = "$(cat "$SLURM_CONF_FILE")" ]; then return; fi
    log "writing $SLURM_CONF_FILE"
    stop_slurm_daemons
    printf '%s\n' "$new" | $SUDO tee "$SLURM_CONF_FILE.tmp" >/dev/null
    $SUDO mv "$SLURM_CONF_FILE.tmp" "$SLURM_CONF_FILE"
}

start_slurm() {
    local node
    $SUDO mkdir -p "$SLURM_DIR/state"
    start_munge
    write_slurm_conf
    if slurmctld_up; then
        log "slurmctld on 127.0.0.1:$SLURMCTLD_PORT already up"
    else
        log "starting slurmctld on 127.0.0.1:$SLURMCTLD_PORT (log: $SLURM_DIR/slurmctld.log)"
        # slurmctld and slurmd daemonize themselves; their logs go to the files in slurm.conf.
        $SUDO slurmctld -f "$SLURM_CONF_FILE" </dev/null >&2
        wait_for "slurmctld (see $SLURM_DIR/slurmctld.log)" 30 slurmctld_up
    fi
    for node in "${SLURM_NODES[@]}"; do
        if slurmd_up "$node"; then
            log "slurmd $node already up"
            continue
        fi
        $SUDO mkdir -p "$SLURM_DIR/spool-$node"
        log "starting slurmd $node (log: $SLURM_DIR/slurmd-$node.log)"
        $SUDO slurmd -f "$SLURM_CONF_FILE" -N "$node" </dev/null >&2
    done
    wait_for "Slurm nodes ${SLURM_NODES[*]} (see $SLURM_DIR/*.log)" 60 slurm_nodes_up
    log "Slurm cluster up: $(SLURM_CONF="$SLURM_CONF_FILE" sinfo -h -N -o '%N=%t' | tr '\n' ' ')"
}

# The Dev Containers CLI, pinned. It needs Node.js >= 20 (its package.json `engines`): the one
# on this kind of machine is 20; Debian's own nodejs (bookworm: 18) is installed only when there
# is no npm at all, and the version check below then says whether the CLI runs.
DEVCONTAINER_CLI_VERSION=0.89.0
DEVCONTAINER_DIR="$STATE_DIR/devcontainers-cli-$DEVCONTAINER_CLI_VERSION"
DEVCONTAINER_CLI="$DEVCONTAINER_DIR/node_modules/.bin/devcontainer"

install_devcontainer_cli() {
    if [ -x "$DEVCONTAINER_CLI" ] \
        && [ "$("$DEVCONTAINER_CLI" --version 2>/dev/null)" = "$DEVCONTAINER_CLI_VERSION" ]; then
        return
    fi
    if ! command -v npm >/dev/null 2>&1; then
        log "installing nodejs and npm (for the Dev Containers CLI)"
        $SUDO apt-get -q -o DPkg::Lock::Timeout=600 update >&2
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get -q -y -o DPkg::Lock::Timeout=600 \
            install --no-install-recommends nodejs npm >&2
    fi
    log "installing @devcontainers/cli@$DEVCONTAINER_CLI_VERSION in $DEVCONTAINER_DIR"
    $SUDO mkdir -p "$DEVCONTAINER_DIR"
    $SUDO npm install --no-audit --no-fund --prefix "$DEVCONTAINER_DIR" \
        "@devcontainers/cli@$DEVCONTAINER_CLI_VERSION" >&2
    "$DEVCONTAINER_CLI" --version >/dev/null || die "the Dev Containers CLI does not run"
}

main() {
    if [ "${1:-}" != "--no-install" ]; then install_packages; fi
    $SUDO mkdir -p "$STATE_DIR"
    start_registry "$REGISTRY_PORT" 200
    start_registry "$AUTH_REGISTRY_PORT" 401
    start_engine
    seed_base_image
    check_pull
    start_apt_snapshot
    start_slurm
    if [ "${1:-}" != "--no-install" ]; then install_devcontainer_cli; fi
    printf 'export ENVBUILDER_TEST_REGISTRY=127.0.0.1:%s\n' "$REGISTRY_PORT"
    printf 'export ENVBUILDER_TEST_AUTH_REGISTRY=127.0.0.1:%s\n' "$AUTH_REGISTRY_PORT"
    printf 'export ENVBUILDER_TEST_AUTH_USER=%s\n' "$AUTH_USER"
    printf 'export ENVBUILDER_TEST_AUTH_PASSWORD=%s\n' "$AUTH_PASSWORD"
    printf 'export ENVBUILDER_APT_PROXY=http://127.0.0.1:%s\n' "$APT_SNAPSHOT_PORT"
    printf 'export ENVBUILDER_TEST_SLURM=1\n'
    printf 'export SLURM_CONF=%s\n' "$SLURM_CONF_FILE"
    if [ -x "$DEVCONTAINER_CLI" ]; then
        printf 'export ENVBUILDER_DEVCONTAINER_CLI=%s\n' "$DEVCONTAINER_CLI"
    fi
}

main "$@"
