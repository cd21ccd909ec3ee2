#!/bin/sh
# A Docker engine for `make image`, the container test and `make sam-local`. When none answers, one is
# started as these VMs allow (no iptables: the default bridge works host<->container, with no NAT to the
# outside; overlay2 storage, else vfs), after installing Debian's docker.io when it is missing and we are
# root with apt-get. The default bridge stays on: `sam local` creates its containers on it (with
# --bridge=none they get no interface at all, even after `docker network connect`).
set -e
docker info >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "no Docker engine answers: start one (dockerd), or run this as root to have it started" >&2
  exit 2
fi
if ! command -v dockerd >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "no Docker engine and no apt-get to install one: install Docker and run make again" >&2
    exit 2
  fi
  echo "installing Debian's docker.io (the engine for the container image and its test)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
# A dockerd stopped without its shutdown (a machine stopped mid-run) leaves its pid file behind, and the
# next one refuses to start ("pid file found, ensure docker is not running"): a file naming no live
# process is removed
for file in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
  if [ -f "$file" ] && ! kill -0 "$(cat "$file")" 2>/dev/null; then
    echo "removing $file: the process it names is gone"
    rm -f "$file"
  fi
done
# overlay2 where the kernel mounts overlayfs (each build step a thin layer), else vfs (each step a full copy)
for driver in overlay2 vfs; do
  echo "starting dockerd (--iptables=false --storage-driver=$driver; log: /tmp/engram-dockerd.log)"
  nohup dockerd --iptables=false --storage-driver=$driver >/tmp/engram-dockerd.log 2>&1 &
  pid=$!
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && exit 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  kill $pid 2>/dev/null || true
  sleep 1
done
echo "dockerd did not start; its log:" >&2
tail -20 /tmp/engram-dockerd.log >&2
exit 1
