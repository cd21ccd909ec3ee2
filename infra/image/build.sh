#!/bin/sh
# make image: engram's container image. EMBEDDER=local (engram:latest, the local embedder bundled) or off
# (engram:lean). BASE: a pulled Debian 12 image, or (default) the one infra/image/base.sh builds here.
# Built again only when its inputs change: the hash of every file the Dockerfile copies and the arguments.
set -e
cd "$(dirname "$0")/../.."
EMBEDDER=${EMBEDDER:-local}
case "$EMBEDDER" in local) TAG=${TAG:-engram:latest} ;; off) TAG=${TAG:-engram:lean} ;;
  *) echo "EMBEDDER is local or off, not $EMBEDDER" >&2; exit 2 ;; esac
export DOCKER_BUILDKIT=0  # the classic builder: no buildx plugin on these machines
sh infra/image/engine.sh
if [ -z "$BASE" ]; then
  sh infra/image/base.sh
  BASE=${ENGRAM_BASE:-engram-base:bookworm}
fi
rm -rf image-wheels image-certs && mkdir image-wheels image-certs
cp /usr/local/share/ca-certificates/*.crt image-certs/ 2>/dev/null || true  # a TLS-intercepting network's CAs
TORCH_INDEX=https://download.pytorch.org/whl/cpu
if [ "$EMBEDDER" = local ] && ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
  ln /opt/wheels/torch-2.13.0+cpu-*.whl image-wheels/ 2>/dev/null || cp /opt/wheels/torch-2.13.0+cpu-*.whl image-wheels/
  TORCH_INDEX=  # the CPU wheel is on this machine's disk
fi
BASE_ID=$(docker image inspect -f '{{ .Id }}' "$BASE" 2>/dev/null || echo "$BASE")
HASH=$( { git ls-files -z Dockerfile .dockerignore pyproject.toml requirements-local.txt requirements-embedder.txt \
          template.yaml layers/engram functions infra | xargs -0 sha256sum; echo "$EMBEDDER $TORCH_INDEX $BASE_ID"; } \
        | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "engram.inputs" }}' "$TAG" 2>/dev/null)" = "$HASH" ]; then
  rm -rf image-wheels image-certs
  echo "image $TAG is up to date"
  exit 0
fi
echo "building $TAG (EMBEDDER=$EMBEDDER, BASE=$BASE)..."
start=$(date +%s)
docker build -q --network host --build-arg BASE="$BASE" --build-arg EMBEDDER="$EMBEDDER" \
  --build-arg TORCH_INDEX="$TORCH_INDEX" --label engram.inputs="$HASH" -t "$TAG" . >/dev/null
rm -rf image-wheels image-certs
# the image this one replaces under the tag is left untagged: without this every rebuild kept ~1-2.5 GB
# (41 GB over a few weeks of make test on one machine). Only engram's own, and none a container uses.
docker image prune -f --filter label=engram.inputs >/dev/null 2>&1 || true
echo "built $TAG in $(( $(date +%s) - start )) s"
