# A look-alike of AWS's Lambda Python 3.11 base image (public.ecr.aws/lambda/python:3.11), built locally for
# `sam local`, which cannot pull one here: Debian 12's python3.11 as /var/lang, the runtime interface
# client (awslambdaric) started by /var/runtime/bootstrap, the runtime's boto3, /var/task and /opt.
# SAM adds its Runtime Interface Emulator (/var/rapid/aws-lambda-rie) and the layers on top, as it does
# with AWS's image.
ARG BASE=engram-base:bookworm
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# image-certs/: the build host's own CAs, for a network that intercepts TLS to PyPI (used for pip only)
COPY image-certs/ /tmp/image-certs/
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && cat /etc/ssl/certs/ca-certificates.crt /tmp/image-certs/*.crt > /tmp/pip-ca.pem 2>/dev/null; \
    python3 -m venv /var/lang \
    && /var/lang/bin/pip install -q --cert /tmp/pip-ca.pem awslambdaric==3.1.1 boto3==1.44.8 \
    && rm -rf /tmp/image-certs /tmp/pip-ca.pem && mkdir -p /var/task /var/runtime /opt
COPY lambda-bootstrap /var/runtime/bootstrap
ENV LAMBDA_TASK_ROOT=/var/task LAMBDA_RUNTIME_DIR=/var/runtime LANG=en_US.UTF-8 TZ=:/etc/localtime \
    PATH=/var/lang/bin:/usr/local/bin:/usr/bin:/bin:/opt/bin \
    LD_LIBRARY_PATH=/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib:/opt/lib
WORKDIR /var/task
ENTRYPOINT ["/var/runtime/bootstrap"]
