#!/bin/sh
# The Debian 12 base image, built here: no registry can be reached on these machines, Debian's packages can.
# debootstrap's minimal system, imported as $ENGRAM_BASE (default engram-base:bookworm). Built again only
# when this script changes (its hash is the image's engram.inputs label).
set -e
TAG=${ENGRAM_BASE:-engram-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
HASH=$(cat "$0" | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "engram.inputs" }}' "$TAG" 2>/dev/null)" = "$HASH" ]; then
  echo "base image $TAG is up to date"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  else
    echo "debootstrap is needed to build the base image here (apt-get install debootstrap), or pass a" >&2
    echo "pulled one: make image BASE=debian:bookworm-slim" >&2
    exit 2
  fi
fi
ROOT=$(mktemp -d /tmp/engram-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "building $TAG with debootstrap from $MIRROR (about a minute)..."
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" >/dev/null
# as debian:bookworm-slim has them: updates and security next to main, no apt caches kept
cat > "$ROOT/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
tar -C "$ROOT" -c . | docker import --change "LABEL engram.inputs=$HASH" --change 'CMD ["/bin/bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$TAG" >/dev/null
echo "built $TAG"
