#!/usr/bin/env bash
# Start the services envbuilder's integration tests need, on a Debian bookworm machine:
#   - a Docker engine (Debian's docker.io, legacy builder) on /var/run/docker.sock,
#   - two local registries: 127.0.0.1:5000 (no auth; also the engine's registry mirror) and
#     127.0.0.1:5001 (htpasswd: envbuilder / envbuilder-test),
#   - debian:bookworm-slim, seeded from debootstrap and served by the mirror, so that
#     `docker pull debian:bookworm-slim` works without a public registry. The seed is
#     reproducible (.ci/seed_image.py): the same digest on every machine while Debian's archive
#     serves the same bookworm packages; its files stay in $STATE_DIR/seed.
# Idempotent: whatever already runs is left alone. Progress goes to stderr; stdout carries only
# `export` lines, so `eval "$(.ci/services.sh)"` sets ENVBUILDER_TEST_REGISTRY and friends.
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
if [ "$SEED_REPOSITORY" != library/debian ]; then SEED_DIR="$STATE_DIR/seed-${SEED_REPOSITORY//\//-}"; fi
CI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DOCKER_SOCK=/var/run/docker.sock
# openssh-server: tests/test_docker_ssh.py starts its own sshd on 127.0.0.1 (DOCKER_HOST=ssh://).
PACKAGES=(docker.io docker-registry debootstrap shellcheck chromium apache2-utils iptables curl python3-venv openssh-client
    openssh-server)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

log() { printf 'services.sh: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
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

main() {
    if [ "${1:-}" != "--no-install" ]; then install_packages; fi
    $SUDO mkdir -p "$STATE_DIR"
    start_registry "$REGISTRY_PORT" 200
    start_registry "$AUTH_REGISTRY_PORT" 401
    start_engine
    seed_base_image
    check_pull
    printf 'export ENVBUILDER_TEST_REGISTRY=127.0.0.1:%s\n' "$REGISTRY_PORT"
    printf 'export ENVBUILDER_TEST_AUTH_REGISTRY=127.0.0.1:%s\n' "$AUTH_REGISTRY_PORT"
    printf 'export ENVBUILDER_TEST_AUTH_USER=%s\n' "$AUTH_USER"
    printf 'export ENVBUILDER_TEST_AUTH_PASSWORD=%s\n' "$AUTH_PASSWORD"
}

main "$@"
