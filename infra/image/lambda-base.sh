#!/bin/sh
# The Lambda Python 3.11 look-alike `sam local` runs functions in, tagged as AWS's image so that
# `sam local invoke --skip-pull-image` finds it without pulling. Built again only when its inputs change.
set -e
cd "$(dirname "$0")"
export DOCKER_BUILDKIT=0
TAG=public.ecr.aws/lambda/python:3.11-x86_64
sh ./engine.sh
sh ./base.sh
BASE=${ENGRAM_BASE:-engram-base:bookworm}
HASH=$( { cat lambda-python.Dockerfile lambda-bootstrap; docker image inspect -f '{{ .Id }}' "$BASE"; } | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{ index .Config.Labels "engram.inputs" }}' "$TAG" 2>/dev/null)" = "$HASH" ]; then
  echo "Lambda base image $TAG is up to date"
  exit 0
fi
rm -rf image-certs && mkdir image-certs
cp /usr/local/share/ca-certificates/*.crt image-certs/ 2>/dev/null || true
trap 'rm -rf image-certs' EXIT
echo "building $TAG (a local look-alike of AWS's Lambda Python 3.11 image)..."
start=$(date +%s)
docker build -q --network host -f lambda-python.Dockerfile --build-arg BASE="$BASE" --label engram.inputs="$HASH" \
  -t "$TAG" -t public.ecr.aws/lambda/python:3.11 . >/dev/null
echo "built $TAG in $(( $(date +%s) - start )) s"
