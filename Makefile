# The two commands a newcomer types: `make demo` (the main job) and `make test`.
# Both create .venv, install es-sched into it, and bring up the real stack (Kafka, PostgreSQL,
# OpenSearch) with `es-sched stack up`, which installs what is missing on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-full test-cluster test-secured lint unit stack-up stack-down stack-status clean bench core

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# The workflow core compiled by mypyc (ADR 51), rebuilt when a source of it changes; a process
# loads it only while it matches the sources (es_sched/domain/__init__.py), else the Python.
# Without a C compiler or Python.h the build says so and leaves none: the tests then run on
# the Python core (CORE_MODE, expanded when a recipe runs, after the build).
CORE_BUILD := es_sched/domain/_compiled/build.json
CORE_MODE = $(if $(wildcard $(CORE_BUILD)),compiled,auto)
$(CORE_BUILD): $(STAMP) $(wildcard es_sched/domain/*.py) tools/build_core.py
	$(BIN)/python tools/build_core.py

core: $(CORE_BUILD)

# The peers of bench/side_by_side.py (Celery + Redis's client) come with the `bench` extra.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $@

stack-up: $(STAMP) $(CORE_BUILD)
	$(BIN)/es-sched stack up

stack-down: $(STAMP)
	$(BIN)/es-sched stack down

stack-status: $(STAMP)
	$(BIN)/es-sched stack status

# The main job: real videos through the whole pipeline (see README, "make demo"); it prints the
# console's URL. `make demo DEMO_ARGS=--keep` leaves the roles, workers and console running.
demo: stack-up
	$(BIN)/es-sched demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The tiers (README, "Testing"): `make unit` is the inner loop (no services, under two
# minutes); `make test` is what CI runs: lint, then every tier against the real stack at the
# CI test scale (ES_SCHED_TEST_SCALE=ci, a 20-minute budget on 2 cores), printing the 25
# slowest tests; `make test-full` runs the loads the tests were written with.
# The integration tests mostly wait on the system they load, so make test runs modules side
# by side in TEST_WORKERS processes (a module to a process: its shared fixtures stay whole).
TEST_WORKERS ?= 4
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile --durations=25

unit: $(STAMP) $(CORE_BUILD)
	ES_SCHED_CORE=$(CORE_MODE) $(BIN)/pytest -m unit -n 2 tests/unit

# `secured` (a private SASL_SSL broker, about 2.5 min) runs in test-full and test-secured: it
# does not fit test's 20-minute budget.
test: stack-up lint
	ES_SCHED_CORE=$(CORE_MODE) $(BIN)/pytest $(PYTEST_PARALLEL) -m "not secured"

test-full: stack-up lint
	ES_SCHED_TEST_SCALE=full ES_SCHED_CORE=$(CORE_MODE) $(BIN)/pytest $(PYTEST_PARALLEL)

# The three-node Kafka fault test alone (its own private cluster; about 3-5 min); `make test`
# runs it too.
test-cluster: $(STAMP)
	$(BIN)/pytest -m cluster tests/integration/test_cluster.py

# The secured Kafka's ACL matrix and a role set over SASL_SSL alone (its own private broker,
# ADR 73); `make test-full` runs it too.
test-secured: $(STAMP)
	$(BIN)/pytest -m secured tests/integration/test_secured_kafka.py

clean: stack-down
	rm -rf .state $(VENV) es_sched/domain/_compiled

# es-sched side by side with Celery + Redis and the transactional Kafka loop's limit, in one
# run (bench/side_by_side.py; about 35 min for 3 rounds on 2 cores; run it on a quiet machine).
# Debian's redis-server is installed with apt-get when missing (as root).
# `make bench BENCH_ARGS=--quick` is a 3-minute smoke run; `BENCH_ARGS="--label 'quiet machine'"`.
bench: stack-up $(BENCH_STAMP)
	PYTHONPATH=. $(BIN)/python bench/side_by_side.py $(BENCH_ARGS)

# The generated documentation: the architecture picture from its Graphviz source (needs `dot`:
# apt-get install -y graphviz) and the settings reference from es_sched/settings.py, which
# tests/unit/tools/test_settings_reference.py checks is current.
.PHONY: docs
docs: $(STAMP)
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg
	$(BIN)/python tools/settings_reference.py > docs/settings.md.tmp
	mv docs/settings.md.tmp docs/settings.md
	$(BIN)/python tools/adr_index.py > docs/adr/README.md.tmp
	mv docs/adr/README.md.tmp docs/adr/README.md
