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
#     tests/builders/test_devcontainer.py (exported as ENVBUILDER_DEVCONTAINER_CLI).
#   - three current engines beside Debian 12's dockerd 20.10, from a Debian sid root that
#     debootstrap makes in $STATE_DIR/sid-root (about 45 s, 720 MB; made again only when its
#     package list changes): dockerd 28 with the containerd image store (sid-containerd),
#     dockerd 28 with the classic overlay2 store (sid-classic) and podman 5's Docker-compatible
#     API (podman), each with its own socket, data ($STATE_DIR/engines/NAME, with its logs),
#     containerd, cgroup parent and bridge, the same registry mirror, and debian:bookworm-slim
#     pulled; exported as ENVBUILDER_TEST_ENGINES='NAME=DOCKER_HOST ...' (tests/conftest.py's
#     engine_hosts). Under CI=true a root that cannot be made is an error.
# Idempotent: whatever already runs is left alone. Progress goes to stderr; stdout carries only
# `export` lines, so `eval "$(.ci/services.sh)"` sets ENVBUILDER_TEST_REGISTRY, SLURM_CONF,
# ENVBUILDER_TEST_ENGINES and friends.
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
# openssh-server: tests/image/test_docker_ssh.py starts its own sshd on 127.0.0.1 (DOCKER_HOST=ssh://).
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

# --- current engines from Debian sid, beside the Debian 12 one (issue 29) ---
#
# Debian 12's dockerd (20.10, classic store) is older than any engine users run. Three current
# ones run from a Debian sid root ($SID_ROOT, made by debootstrap from Debian's packages):
# dockerd with the containerd image store (sid-containerd), dockerd with the classic overlay2
# store (sid-classic), and podman's Docker-compatible API service (podman). Each has its own
# data, exec root, socket, managed containerd, cgroup parent and bridge; none touches iptables,
# docker0 or the host's engine. Clients on the host use DOCKER_HOST=unix://$SID_ROOT/run/...
# (ENVBUILDER_TEST_ENGINES lists them).
#
# Measured on a 2-core CI machine (December 2026): the debootstrap takes about 45 s and the root
# uses about 720 MB (docker.io 28.5, containerd 2.1, podman 5.8); each engine's images live in
# $ENGINES_DIR/NAME.
SID_ROOT="$STATE_DIR/sid-root"
# The stamp holds the package list the root was made with: a change makes it again.
SID_STAMP="$STATE_DIR/sid-root.stamp"
ENGINES_DIR="$STATE_DIR/engines"
# uidmap: podman's user namespaces (rootless needs it; rootful uses it for --userns);
# netavark + aardvark-dns: podman's network stack; crun: podman's usual runtime (runc runs its
# containers here, see podman_containers_conf);
# fuse-overlayfs: podman's overlay where the kernel's cannot be used (rootless on old kernels);
# catatonit: podman's init (--init); iproute2: `ip` in the root, for debugging its networks.
SID_PACKAGES=(docker.io containerd iptables ca-certificates podman uidmap netavark aardvark-dns
    crun fuse-overlayfs catatonit iproute2)
# name:containerd-snapshotter:bridge:third octet (a bridge name has at most 15 characters).
SID_DOCKERDS=(sid-containerd:true:ebci-sidctrd:0 sid-classic:false:ebci-sidclassic:1)
# The engines' networks are in 198.18.0.0/15, the block RFC 2544 reserves for benchmarking: never
# routed, so nothing on this machine or beyond targets it, and it cannot collide with docker0's
# 172.17.0.0/16 or with the private ranges the host's engine, a VPN or a LAN use. dockerd insists
# on an IPv4 subnet for its default bridge (left without one, it took 172.18.0.0/16 and
# 172.19.0.0/16 here), so each bridge gets a fixed one (198.18.N.1/24); podman's default network
# is 198.18.2.0/24 (its pool 198.18.48.0/20). Containers that reach local services use host
# networking, never these addresses.
# NO "default-address-pools" in a sid daemon.json: dockerd 28 restarting with them deletes the
# interface named docker0 (moby's removeDefaultBridgeInterface runs whenever pools are set and a
# default network was stored, whatever "bridge" names), which broke the host's engine here once.
# `docker network create` on these engines thus takes dockerd's default pools (172.x): give
# such networks a --subnet in 198.18.0.0/15.
PODMAN_DIR="$ENGINES_DIR/podman"

# 0 when CI=true (as tests/conftest.py's in_ci reads it).
in_ci() {
    case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')" in 1 | true | yes) return 0 ;; esac
    return 1
}

# The mounts at and under $SID_ROOT; none when nothing is mounted there.
sid_mounts() {
    awk -v root="$SID_ROOT" '$5 == root || index($5, root "/") == 1 {print $5}' /proc/self/mountinfo
}

# Where the engines are: inside the root, paths are those of the host without $SID_ROOT.
engine_run_dir() { printf '/run/envbuilder/%s' "$1"; }
engine_sock() {
    if [ "$1" = podman ]; then printf '%s/run/envbuilder/podman/podman.sock' "$SID_ROOT"
    else printf '%s/run/envbuilder/%s/docker.sock' "$SID_ROOT" "$1"; fi
}
engine_host() { printf 'unix://%s' "$(engine_sock "$1")"; }
engine_pidfile() { printf '%s%s/%s.pid' "$SID_ROOT" "$(engine_run_dir "$1")" "$1"; }
# sid_docker NAME ARGS...: the host's docker CLI against engine NAME.
sid_docker() { DOCKER_HOST="$(engine_host "$1")" docker "${@:2}"; }
sid_engine_up() { sid_docker "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

stop_engines() {
    local spec
    for spec in "${SID_DOCKERDS[@]}"; do
        stop_pidfile "$(engine_pidfile "${spec%%:*}")" dockerd
    done
    stop_pidfile "$(engine_pidfile podman)" podman
}

# Unmount everything under $SID_ROOT, then remove it; refuses while anything stays mounted
# there (rm -rf would go into the bind-mounted /dev, /sys or $ENGINES_DIR).
remove_sid_root() {
    [ -e "$SID_ROOT" ] || return 0
    stop_engines
    # Lazy and recursive: the engines' own mounts (overlays, netns) go with the root's.
    $SUDO umount -R -l "$SID_ROOT" 2>/dev/null || true
    [ -z "$(sid_mounts)" ] || die "still mounted under $SID_ROOT: $(sid_mounts | tr '\n' ' ')"
    log "removing the old $SID_ROOT"
    $SUDO rm -rf --one-file-system "$SID_ROOT"
}

# debootstrap the sid root once; again only when SID_PACKAGES changed (the stamp says).
make_sid_root() {
    local stamp start secs
    stamp="sid minbase ${SID_PACKAGES[*]}"
    if [ -x "$SID_ROOT/usr/sbin/dockerd" ] && [ "$(cat "$SID_STAMP" 2>/dev/null)" = "$stamp" ]; then
        log "Debian sid root $SID_ROOT already made"
        return 0
    fi
    remove_sid_root
    $SUDO rm -rf --one-file-system "$SID_ROOT.new"
    $SUDO mkdir -p "$ENGINES_DIR"
    log "debootstrap sid into $SID_ROOT (about 45 s; log: $ENGINES_DIR/debootstrap-sid.log)"
    start=$(date +%s)
    if ! $SUDO debootstrap --variant=minbase --include="$(IFS=,; echo "${SID_PACKAGES[*]}")" \
        sid "$SID_ROOT.new" >"$ENGINES_DIR/debootstrap-sid.log" 2>&1; then
        $SUDO rm -rf --one-file-system "$SID_ROOT.new"
        return 1
    fi
    secs=$(($(date +%s) - start))
    if [ ! -x "$SID_ROOT.new/usr/sbin/dockerd" ] || [ ! -x "$SID_ROOT.new/usr/bin/podman" ]; then
        log "debootstrap sid made no dockerd or podman"
        return 1
    fi
    $SUDO mv "$SID_ROOT.new" "$SID_ROOT"
    printf '%s\n' "$stamp" | $SUDO tee "$SID_STAMP" >/dev/null
    log "debootstrap sid took ${secs}s; $SID_ROOT uses $(du -sxh "$SID_ROOT" | cut -f1)"
}

# mount_once TARGET MOUNT-ARGS...: mount unless TARGET already is a mount point (re-runs).
mount_once() {
    local target=$1
    shift
    mountpoint -q "$target" && return 0
    $SUDO mkdir -p "$target"
    $SUDO mount "$@" "$target"
}

# The root bound onto itself (a mount point of its own, private: nothing mounted in it shows up
# elsewhere), proc, sys with the cgroup hierarchies under it, dev with devpts and shm, a tmpfs on
# /run (sockets and pid files: gone at reboot, like the host's), and $ENGINES_DIR at the same
# path inside, so configs and data have one name on both sides. /sys and /dev are recursive binds
# made slaves: mounts and unmounts under the root never reach the host's.
mount_sid_root() {
    if ! mountpoint -q "$SID_ROOT"; then
        $SUDO mount --bind "$SID_ROOT" "$SID_ROOT"
        $SUDO mount --make-private "$SID_ROOT"
    fi
    mount_once "$SID_ROOT/proc" -t proc proc
    if ! mountpoint -q "$SID_ROOT/sys"; then
        mount_once "$SID_ROOT/sys" --rbind /sys
        $SUDO mount --make-rslave "$SID_ROOT/sys"
    fi
    if ! mountpoint -q "$SID_ROOT/dev"; then
        mount_once "$SID_ROOT/dev" --rbind /dev
        $SUDO mount --make-rslave "$SID_ROOT/dev"
    fi
    mount_once "$SID_ROOT/run" -t tmpfs -o mode=0755,nosuid,nodev tmpfs
    mount_once "$SID_ROOT$ENGINES_DIR" --bind "$ENGINES_DIR"
}

# The host's docker group, by number (the root's own docker group has another gid): its members
# use the sid engines' sockets as they use the main engine's. Empty when there is none.
host_docker_gid() { getent group docker | cut -d: -f3; }

# daemon.json of a sid dockerd. Paths are inside the root: data under $ENGINES_DIR/NAME/data
# (the same path on the host), exec root, pid file and socket on the root's /run tmpfs.
# No "containerd" key: dockerd starts a containerd of its own (in the exec root).
sid_daemon_json() {
    local name=$1 snapshotter=$2 bridge=$3 octet=$4 run gid group=""
    run=$(engine_run_dir "$name")
    gid=$(host_docker_gid)
    if [ -n "$gid" ]; then group=$'\n  "group": "'$gid'",'; fi
    cat <<EOJ
{
  "hosts": ["unix://$run/docker.sock"],$group
  "data-root": "$ENGINES_DIR/$name/data",
  "exec-root": "$run/exec",
  "pidfile": "$run/$name.pid",
  "features": {"containerd-snapshotter": $snapshotter},
  "registry-mirrors": ["http://127.0.0.1:$REGISTRY_PORT"],
  "insecure-registries": ["127.0.0.1:$REGISTRY_PORT", "127.0.0.1:$AUTH_REGISTRY_PORT"],
  "iptables": false,
  "ip6tables": false,
  "cgroup-parent": "envbuilder-$name",
  "bridge": "$bridge"
}
EOJ
}

# ensure_bridge NAME ADDRESS: a bridge of the engine's own, so that it never touches docker0
# (never "bridge": "none": such a dockerd deletes docker0), holding ADDRESS and no other IPv4
# address (dockerd takes its subnet from the bridge: "bridge" and "bip" exclude each other).
# Called while the engine is stopped.
ensure_bridge() {
    if ! ip link show "$1" >/dev/null 2>&1; then
        log "creating bridge $1"
        $SUDO ip link add "$1" type bridge
    fi
    if [ "$(ip -4 -o addr show dev "$1" | awk '{print $4}')" != "$2" ]; then
        log "giving bridge $1 the address $2"
        $SUDO ip -4 addr flush dev "$1"
        $SUDO ip addr add "$2" dev "$1"
    fi
}

# write_if_changed FILE CONTENT: 0 when FILE changed (the engine reading it must restart).
write_if_changed() {
    if [ -f "$1" ] && [ "$2" = "$(cat "$1")" ]; then return 1; fi
    printf '%s\n' "$2" | $SUDO tee "$1.tmp" >/dev/null
    $SUDO mv "$1.tmp" "$1"
}

start_sid_dockerd() {
    local name=$1 snapshotter=$2 bridge=$3 octet=$4 dir="$ENGINES_DIR/$1"
    $SUDO mkdir -p "$dir" "$SID_ROOT$(engine_run_dir "$name")"
    if write_if_changed "$dir/daemon.json" \
        "$(sid_daemon_json "$name" "$snapshotter" "$bridge" "$octet")"; then
        log "wrote $dir/daemon.json"
        stop_pidfile "$(engine_pidfile "$name")" dockerd
        # The default network dockerd stored holds the old bridge subnet, which it would put
        # back on the bridge: it makes a new one from the bridge's address instead.
        $SUDO rm -rf "$dir/data/network"
    fi
    if sid_engine_up "$name"; then
        log "engine $name already up"
        return 0
    fi
    ensure_bridge "$bridge" "198.18.$octet.1/24"
    log "starting engine $name: dockerd in $SID_ROOT (log: $dir/dockerd.log)"
    $SUDO setsid nohup chroot "$SID_ROOT" dockerd --config-file "$dir/daemon.json" \
        >>"$dir/dockerd.log" 2>&1 </dev/null &
    wait_for "engine $name (see $dir/dockerd.log)" 90 sid_engine_up "$name"
}

# podman, rootful (root runs it; one storage for the host's root). Rootless would differ: a user
# with /etc/subuid and /etc/subgid ranges (uidmap's newuidmap), storage under the user's home,
# pasta or slirp4netns for networks, and the socket in $XDG_RUNTIME_DIR/podman/podman.sock.
podman_storage_conf() {
    cat <<EOC
[storage]
driver = "overlay"
graphroot = "$PODMAN_DIR/storage"
runroot = "$PODMAN_DIR/run"
EOC
}

# docker.io is rewritten to the local registry (what the dockerds' mirror serves); nothing is
# fetched from a public registry. Short names ("debian:bookworm-slim") resolve to docker.io.
podman_registries_conf() {
    cat <<EOC
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"

[[registry]]
prefix = "docker.io"
location = "127.0.0.1:$REGISTRY_PORT"
insecure = true

[[registry]]
location = "127.0.0.1:$REGISTRY_PORT"
insecure = true

[[registry]]
location = "127.0.0.1:$AUTH_REGISTRY_PORT"
insecure = true
EOC
}

# No systemd in the root: cgroupfs and a file for events. tmp_dir on the root's /run tmpfs
# (podman tells a reboot by it). runc, not crun: on a host with cgroup v1 beside a cgroup2
# hierarchy that holds a controller (hybrid mode, as on this CI machine: hugetlb), crun refuses to
# start containers ("cgroups in hybrid mode not supported"); runc (docker.io's) runs them.
# firewall_driver "none": netavark leaves the host's firewall alone (as "iptables": false does for
# the dockerds); the default network's addresses are in 198.18.0.0/15 (see SID_DOCKERDS).
#
# [containers] default_ulimits: only where this machine's hard limits are below 1048576 (here, a
# sandbox: `ulimit -Hn` 20000, no CAP_SYS_RESOURCE). Rootful podman builds through buildah, which
# gives every RUN step RLIMIT_NOFILE and RLIMIT_NPROC of 1048576 (buildah's
# define.RLimitDefaultValue) and lowers them to the current hard limits only when rootless
# (containers/buildah run_linux.go), so runc could not raise them: "runc create failed: ...
# error setting rlimit type 7: operation not permitted" (7: RLIMIT_NOFILE). `podman run` clamps
# them itself when it lacks CAP_SYS_RESOURCE (libpod's container_internal_common.go), a build
# does not. containers.conf's default_ulimits go to both (buildah's addRlimits puts them first;
# podman's docs, options/ulimit.md: the 1048576 default applies "unless overridden in
# containers.conf(5)"). The value: this shell's hard limits, which podman inherits; soft = hard
# as podman's own default. Docker's containers inherit dockerd's limits, so they never hit this.
podman_default_ulimits() {
    local limits="" name hard
    for name in nofile:n nproc:u; do
        hard=$(ulimit -H"${name#*:}")
        if [ "$hard" != unlimited ] && [ "$hard" -lt 1048576 ]; then
            limits+="${limits:+, }\"${name%%:*}=$hard:$hard\""
        fi
    done
    if [ -n "$limits" ]; then printf '[containers]\ndefault_ulimits = [%s]\n\n' "$limits"; fi
}

podman_containers_conf() {
    podman_default_ulimits
    cat <<EOC
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$PODMAN_DIR/events.log"
tmp_dir = "/run/envbuilder/podman/tmp"
runtime = "runc"

[network]
network_config_dir = "$PODMAN_DIR/networks"
firewall_driver = "none"
default_subnet = "198.18.2.0/24"
default_subnet_pools = [{base = "198.18.48.0/20", size = 24}]
EOC
}

start_podman() {
    local changed=""
    $SUDO mkdir -p "$PODMAN_DIR" "$SID_ROOT/run/envbuilder/podman"
    write_if_changed "$PODMAN_DIR/storage.conf" "$(podman_storage_conf)" && changed=1
    write_if_changed "$PODMAN_DIR/registries.conf" "$(podman_registries_conf)" && changed=1
    write_if_changed "$PODMAN_DIR/containers.conf" "$(podman_containers_conf)" && changed=1
    if [ -n "$changed" ]; then
        log "wrote $PODMAN_DIR/*.conf"
        stop_pidfile "$(engine_pidfile podman)" podman
    fi
    if sid_engine_up podman; then
        log "engine podman already up"
        return 0
    fi
    log "starting engine podman: podman system service in $SID_ROOT (log: $PODMAN_DIR/podman.log)"
    $SUDO rm -f "$(engine_sock podman)"
    # setsid, nohup, chroot and env exec: $! is podman's pid.
    $SUDO setsid nohup chroot "$SID_ROOT" env CONTAINERS_CONF="$PODMAN_DIR/containers.conf" \
        CONTAINERS_STORAGE_CONF="$PODMAN_DIR/storage.conf" \
        CONTAINERS_REGISTRIES_CONF="$PODMAN_DIR/registries.conf" \
        podman system service --time=0 "unix:///run/envbuilder/podman/podman.sock" \
        >>"$PODMAN_DIR/podman.log" 2>&1 </dev/null &
    echo $! | $SUDO tee "$(engine_pidfile podman)" >/dev/null
    wait_for "engine podman (see $PODMAN_DIR/podman.log)" 60 sid_engine_up podman
}

# Pull the seed through the mirror (as a user's `docker pull` goes), then check what the tests
# rely on: the server's version, the image store, and a container on the host's network.
check_engine() {
    local name=$1 version store
    sid_docker "$name" pull -q "$SEED_IMAGE" >/dev/null \
        || die "docker pull $SEED_IMAGE failed on engine $name"
    sid_docker "$name" image inspect "$SEED_IMAGE" >/dev/null 2>&1 \
        || die "no $SEED_IMAGE on engine $name after the pull"
    version=$(sid_docker "$name" version --format '{{.Server.Version}}')
    store=$(sid_docker "$name" info --format '{{json .DriverStatus}}')
    case "$name:$store" in
        sid-containerd:*io.containerd.snapshotter.v1*) ;;
        sid-containerd:*) die "engine $name does not use the containerd image store: $store" ;;
        *:*io.containerd.snapshotter.v1*) die "engine $name uses the containerd image store" ;;
    esac
    sid_docker "$name" run --rm --network host "$SEED_IMAGE" true \
        || die "docker run --network host $SEED_IMAGE failed on engine $name"
    log "engine $name: server $version, image store $store, runs $SEED_IMAGE"
}

# The three engines; sets TEST_ENGINES, the ENVBUILDER_TEST_ENGINES value (empty when the root
# cannot be made outside CI: the engine tests then skip). Not run in $(...): set -e would not
# hold there.
TEST_ENGINES=""
start_sid_engines() {
    local spec name engines=()
    if ! make_sid_root; then
        if in_ci; then die "debootstrap sid failed (see $ENGINES_DIR/debootstrap-sid.log)"; fi
        log "WARNING: debootstrap sid failed (see $ENGINES_DIR/debootstrap-sid.log): no sid engines"
        return 0
    fi
    mount_sid_root
    for spec in "${SID_DOCKERDS[@]}"; do
        name=${spec%%:*}
        # shellcheck disable=SC2086  # split name:snapshotter:bridge:octet into four arguments
        start_sid_dockerd ${spec//:/ }
        engines+=("$name")
    done
    start_podman
    # podman makes its socket root's only (0600); the host's docker group gets it as it gets
    # the dockerds' sockets.
    if [ -n "$(host_docker_gid)" ]; then
        $SUDO chgrp "$(host_docker_gid)" "$(engine_sock podman)"
        $SUDO chmod 0660 "$(engine_sock podman)"
    fi
    engines+=(podman)
    for name in "${engines[@]}"; do check_engine "$name"; done
    for name in "${engines[@]}"; do TEST_ENGINES+="$name=$(engine_host "$name") "; done
    TEST_ENGINES=${TEST_ENGINES% }
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
    start_sid_engines
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
    if [ -n "$TEST_ENGINES" ]; then
        printf "export ENVBUILDER_TEST_ENGINES='%s'\n" "$TEST_ENGINES"
    fi
}

main "$@"
