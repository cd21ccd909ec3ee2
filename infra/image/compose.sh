#!/bin/sh
# Prints the compose command to use (`docker compose`, else `docker-compose`); when neither is there and we
# are root with apt-get, installs Debian's docker-compose (1.29: it reads the Compose spec the example uses).
set -e
if docker compose version >/dev/null 2>&1; then echo "docker compose"; exit 0; fi
if command -v docker-compose >/dev/null 2>&1; then echo "docker-compose"; exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no docker compose: install Docker Compose to run the compose example" >&2
  exit 2
fi
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
echo "docker-compose"
