# Everything starts from nothing: the first target that needs the venv creates it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-fast lint install clean bench rehearsal demo up chaos test-containers

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[server,integrations,dev,embeddings]'
	touch $(STAMP)

install: $(STAMP)

# The suite runs on two processes (pytest-xdist), each test file whole on one of them so its
# module-scoped live API starts once; each process has its own private Redis and every
# PostgreSQL test its own schema. TEST_WORKERS=0 runs it in this process alone.
TEST_WORKERS ?= 2
# The bytecode is written first: the suite starts hundreds of interpreters (workers, `om api`,
# the CLI) and each would otherwise compile the packages again where PYTHONDONTWRITEBYTECODE is
# set.
test: $(STAMP)
	$(BIN)/python -m compileall -q om_core om_workers om_api tests
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# The pure core and the in-memory contract tests: seconds, no Redis, no database, no workers.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/core tests/contract tests/test_layers.py

# The embedded stack (private Redis, SQLite, a worker, the API) and a scripted agent session.
demo: $(STAMP)
	$(BIN)/om demo

# The embedded stack in the foreground (API, worker, beat, Flower); Ctrl-C stops it.
# Ports: `make up API_PORT=8080 FLOWER_PORT=5556`, or OM_API_PORT / OM_FLOWER_PORT in the
# environment (defaults 8000 and 5555; 0 picks a free one). A port already in use is named in
# one line before anything starts (exit code 2).
up: $(STAMP)
	$(BIN)/om up $(if $(API_PORT),--api-port $(API_PORT)) $(if $(FLOWER_PORT),--flower-port $(FLOWER_PORT))

# Benchmarks write tests/bench/results.md and results.png; not part of `make test`.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[server,integrations,dev,embeddings,bench]'
	$(BIN)/python -m tests.bench

# The compose topology as local processes (PostgreSQL on 127.0.0.1:5432 needed), one worker
# killed mid-load; see tests/deploy/rehearsal.py.
WORKERS ?= 3
rehearsal: $(STAMP)
	$(BIN)/python -m tests.deploy.rehearsal --workers $(WORKERS)

# The fault matrix (tests/chaos): the topology behind fault proxies, a mixed load, each fault in
# turn on the Redis broker and on RabbitMQ, then Redis restarted five times under load and
# malformed input against both stores; writes tests/chaos/results.md. PostgreSQL needed.
# `python -m tests.chaos --only redis-restarts,malformed` re-runs just those two parts.
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos

# The deployment for real (tests/containers): as root, installs podman, podman-compose, runc
# and debootstrap when missing, builds the base images once (later runs reuse them) and the
# service image from deploy/, runs the compose topology (API, two workers, beat, Flower,
# Redis, PostgreSQL), the client tour and the container suite against it, then removes its own
# containers, networks and volumes; writes tests/containers/results.md. Not part of `make test`.
test-containers: $(STAMP)
	$(BIN)/python -m tests.containers

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict om_core om_workers om_api

clean:
	rm -rf $(VENV) build *.egg-info
