#!/usr/bin/env bash
# Bring up the real services the backend tests use (DESIGN §4). Idempotent; run as root.
#
#   - packages: bubblewrap docker.io busybox-static openssh-server chromium redis-server postgresql (and git), installed
#     only when missing (the distributed tests start their own redis-server and PostgreSQL on free ports)
#     (chromium is the browser the dashboard's Playwright tests drive: /usr/bin/chromium)
#   - dockerd on the default socket (vfs driver, no bridge, no iptables), log in $RUNNER_CI_DIR
#   - test image runner-test:busybox built from a busybox rootfs (no registry needed)
#
# sshd is not started here: the test fixtures start their own sshd on a free port in a
# temporary directory (tests/backends/conftest.py). To point the tests at an existing server
# instead, set RUNNER_TEST_SSH=user@host:port and RUNNER_TEST_SSH_KEY=/path/to/key.
set -euo pipefail

CI_DIR=${RUNNER_CI_DIR:-/tmp/runner-ci}
IMAGE=${RUNNER_TEST_DOCKER_IMAGE:-runner-test:busybox}
mkdir -p "$CI_DIR"

log() { printf '[services] %s\n' "$*" >&2; }

install_packages() {
    local missing=()
    # the sandbox of every agent run on the local backend (runner/backends/sandbox.py)
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    [ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || missing+=(busybox-static)
    command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
    command -v git >/dev/null 2>&1 || missing+=(git)
    [ -x /usr/bin/chromium ] || missing+=(chromium)
    # PostgreSQL and Redis: the tests start their own servers in temp folders (tests/pgserver.py
    # uses the newest /usr/lib/postgresql/N/bin)
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages present"
        return
    fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_dockerd() {
    if docker info >/dev/null 2>&1; then
        log "dockerd already running"
        return
    fi
    log "starting dockerd (log: $CI_DIR/dockerd.log)"
    nohup dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs \
        >"$CI_DIR/dockerd.log" 2>&1 &
    echo $! >"$CI_DIR/dockerd.pid"
    for _ in $(seq 1 120); do
        if docker info >/dev/null 2>&1; then
            log "dockerd ready"
            return
        fi
        sleep 0.5
    done
    log "dockerd did not come up; last log lines:"
    tail -n 30 "$CI_DIR/dockerd.log" >&2
    exit 1
}

busybox_binary() {
    # prefer the static build: the image has no libc
    for candidate in /bin/busybox /usr/bin/busybox; do
        if [ -x "$candidate" ] && ! ldd "$candidate" >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
    command -v busybox
}

build_image() {
    if docker image inspect "$IMAGE" >/dev/null 2>&1; then
        log "image $IMAGE present"
        return
    fi
    local rootfs bb
    rootfs=$(mktemp -d)
    chmod 0755 "$rootfs"  # the image root; mktemp makes it 0700
    bb=$(busybox_binary)
    log "building $IMAGE from $bb"
    mkdir -p "$rootfs"/{bin,tmp,workspace,etc,root,proc,sys,dev}
    cp "$bb" "$rootfs/bin/busybox"
    for applet in $("$rootfs/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
    chmod 1777 "$rootfs/tmp"
    tar -C "$rootfs" -c . | docker import -c 'ENV PATH=/bin' - "$IMAGE" >/dev/null
    rm -rf "$rootfs"
    log "image $IMAGE built"
}

prepare_sshd() {
    # sshd refuses to start as root without its privilege-separation directory
    mkdir -p /run/sshd
    chmod 0755 /run/sshd
}

install_packages
start_dockerd
build_image
prepare_sshd
echo "RUNNER_TEST_DOCKER_IMAGE=$IMAGE"
