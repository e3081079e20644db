#!/usr/bin/env bash
# Install and start what the tests need on a fresh Debian machine (root): docker.io, busybox-static,
# openssh-server; dockerd as DESIGN.md section 4 describes; the busybox test image. Idempotent.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p /run/sshd
if ! docker info >/dev/null 2>&1; then
    nohup dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs \
        >/tmp/runner-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/runner-dockerd.log" >&2; exit 1; }
if ! docker image inspect runner-test:busybox >/dev/null 2>&1; then
    rootfs=$(mktemp -d)
    mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/workspace" "$rootfs/etc"
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in $(/bin/busybox --list); do ln -sf busybox "$rootfs/bin/$applet"; done
    echo "root:x:0:0:root:/root:/bin/sh" > "$rootfs/etc/passwd"
    tar -C "$rootfs" -c . | docker import - runner-test:busybox >/dev/null
    rm -rf "$rootfs"
fi
echo "services ready: dockerd, runner-test:busybox"
