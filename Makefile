# Thin aliases over real commands. `make run` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.run-installed
SAM_VENV := .venv-sam
# The local DynamoDB (dynalite on LevelDB), pinned in infra/dynamodb/package-lock.json.
NODE_DEPS := infra/dynamodb/node_modules/.installed
# LibreChat's config schema (librechat-data-provider), pinned in infra/librechat/package-lock.json: the
# example librechat.yaml is checked with it
LIBRECHAT_DEPS := infra/librechat/node_modules/.installed
# openapi-typescript, openapi-fetch and tsc, pinned in tests/typescript/package-lock.json: a TypeScript client
# generated from the OpenAPI document is compiled and run against the stack
TYPESCRIPT_DEPS := tests/typescript/node_modules/.installed

.PHONY: lint check image test-container sam-local run test test-browser test-unit test-integration test-deploy lint-template bench bench-quick bench-scale bench-maintenance build deploy clean

# What the stack runs on (make run): the package, the local stack's parts and the local embedder; none of
# the test or lint tools. The first install downloads ~1 GB (torch's CPU wheel is most of it).
$(RUN_STAMP): requirements-local.txt requirements-gateway.txt requirements-embedder.txt layers/engram/requirements.txt pyproject.toml
	@test -x $(PY) || { echo "make: creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); }
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@echo "make: installing what the stack runs on into $(VENV) (once; the first time ~1 GB, mostly torch)..."
	# torch first and alone: the CPU wheel, never a multi-GB CUDA build.
	$(PY) -m pip install --disable-pip-version-check --progress-bar on torch==2.13.0
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -r requirements-local.txt -r requirements-embedder.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $(RUN_STAMP)

# Everything else the tests, the benchmarks and the gates need (requirements-dev.txt), over the runtime.
$(STAMP): $(RUN_STAMP) requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

$(NODE_DEPS): infra/dynamodb/package-lock.json
	@command -v node >/dev/null || { echo "engram's local stack keeps its records in dynalite, which needs Node.js 20 or newer:"; \
	  echo "install it (https://nodejs.org, or your package manager) and run make again."; exit 1; }
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || { \
	  echo "the local DynamoDB (dynalite) needs Node.js 20 or newer; this is $$(node --version)."; exit 1; }
	cd infra/dynamodb && npm ci --no-audit --no-fund --silent
	touch $@

$(LIBRECHAT_DEPS): infra/librechat/package-lock.json $(NODE_DEPS)
	cd infra/librechat && npm ci --no-audit --no-fund --silent
	touch $@

$(TYPESCRIPT_DEPS): tests/typescript/package-lock.json $(NODE_DEPS)
	cd tests/typescript && npm ci --no-audit --no-fund --silent
	touch $@

run: $(RUN_STAMP) $(NODE_DEPS)
	@$(PY) -m infra.local_stack

# Every tier in one run, side by side (the tests mostly wait on servers, Docker and processes): the
# container tier, the deploy and browser tiers, and unit + integration on two xdist workers (a module per
# worker, the longest first) run as three pytest processes at once (tests/tiers.py); each prints its 25
# slowest tests.
test: $(STAMP) $(SAM_VENV)/.installed $(NODE_DEPS) $(LIBRECHAT_DEPS) $(TYPESCRIPT_DEPS)
	@sh infra/install-chromium.sh
	$(PY) tests/tiers.py

# The gates and the unit tests: what to run before every commit (under two minutes).
check: lint
	$(PY) -m pytest -q tests/unit

# The gates: style (ruff, rules pinned in pyproject.toml: mccabe sees nested functions), types (one mypy run
# over the package, infra, the functions and the bench, options per module in pyproject.toml, so its cache
# serves the next run), complexity (xenon: no block worse than C) and what xenon cannot see (infra/house.py:
# closures, maintainability, module and class sizes).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy layers/engram/engram infra functions tests/bench
	$(VENV)/bin/xenon --max-absolute C layers functions infra
	$(PY) -m infra.house

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

test-integration: $(STAMP) $(NODE_DEPS) $(LIBRECHAT_DEPS) $(TYPESCRIPT_DEPS)
	$(PY) -m pytest -q tests/integration

test-browser: $(STAMP) $(NODE_DEPS)
	@sh infra/install-chromium.sh
	$(PY) -m pytest -q tests/browser

# The stack as `sam build` makes it, each function in a fresh runtime Python against moto (tests/deploy).
test-deploy: $(STAMP) $(SAM_VENV)/.installed
	$(PY) -m pytest -q tests/deploy

# aws-sam-cli in its own venv: installed into the app's venv it downgrades boto3 and pydantic.
$(SAM_VENV)/.installed:
	test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --disable-pip-version-check aws-sam-cli==1.170.0 cfn-lint==1.58.0
	touch $@

# checkov in a venv of its own too: it pins versions the other two would fight over.
CHECKOV_VENV := .venv-checkov
$(CHECKOV_VENV)/.installed:
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --disable-pip-version-check checkov==3.3.30
	touch $@

# Every finding is fixed or suppressed in template.yaml with a one-line reason (Metadata: checkov / cfn-lint).
lint-template: $(SAM_VENV)/.installed $(CHECKOV_VENV)/.installed
	AWS_DEFAULT_REGION=us-east-1 $(SAM_VENV)/bin/cfn-lint --include-checks I -- template.yaml
	AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --template-file template.yaml
	$(CHECKOV_VENV)/bin/checkov --quiet --compact --skip-download --framework cloudformation --file template.yaml

bench: $(STAMP) $(NODE_DEPS)
	$(PY) tests/bench/run.py

bench-quick: $(STAMP) $(NODE_DEPS)
	$(PY) tests/bench/run.py --quick

# Issue 32's curve: the Discord door at 100 / 1,000 / 10,000 servers and 10 / 1,000 / 10,000 opted-in users,
# and the embedded engine at 1 M points; one JSON object a line (tests/bench/scale.py says what each means).
bench-scale: $(STAMP) $(NODE_DEPS)
	mkdir -p bench-results
	$(PY) tests/bench/scale.py | tee bench-results/scale.jsonl

# Issue 32's maintenance at size: a rebuild and a re-embed of N records (1,000,000 by default; RECORDS=20000
# for a quick one) through the worker, each job timed (tests/bench/maintenance.py says what each means).
RECORDS ?= 1000000
bench-maintenance: $(STAMP) $(NODE_DEPS)
	mkdir -p bench-results
	$(PY) tests/bench/maintenance.py --records $(RECORDS) | tee bench-results/maintenance.jsonl

# env.json with this data dir's keys and freshly signed Discord events in .engram/ (README: sam local).
# Every function of the built template invoked through SAM's Runtime Interface Emulator in a locally built
# look-alike of the Lambda Python 3.11 image, against make run's DynamoDB and SQS (started if not up) and a
# Qdrant for the run, on Docker's default bridge; then `sam local start-api`. Each answer is checked.
sam-local: $(STAMP) $(SAM_VENV)/.installed $(NODE_DEPS)
	sh infra/image/lambda-base.sh
	mkdir -p .aws-sam && SAM_CLI_TELEMETRY=0 flock .aws-sam/.build.lock $(SAM_VENV)/bin/sam build >/dev/null
	$(PY) -m infra.sam_local --invoke

# The container image: EMBEDDER=local (engram:latest) or EMBEDDER=off (engram:lean); BASE=debian:bookworm-slim
# where a registry can be pulled from (default: a Debian 12 base built here with debootstrap).
image:
	EMBEDDER=$(or $(EMBEDDER),local) BASE=$(BASE) sh infra/image/build.sh

test-container: $(STAMP) $(SAM_VENV)/.installed $(NODE_DEPS)
	$(PY) -m pytest -q tests/container

build: $(SAM_VENV)/.installed
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam build

# sam from its own venv (it is not on PATH: make installs it there); --guided asks for what samconfig.toml
# leaves open and saves the answers
deploy: build
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam deploy --guided

# The venvs, SAM's build, and earlier builds of engram's images (untagged: the classic builder's cache)
# where a Docker engine answers.
clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) .aws-sam infra/dynamodb/node_modules infra/librechat/node_modules \
	  tests/typescript/node_modules
	! docker info >/dev/null 2>&1 || docker image prune -f --filter label=engram.inputs
