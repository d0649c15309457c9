# One command surface: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
UV := UV_PROJECT_ENVIRONMENT=$(VENV) $(BIN)/uv
# Starts embedded PostgreSQL/Valkey when DATABASE_URL/REDIS_URL are unset, runs the
# command with them, then stops what it started.
WITH_SERVICES := $(BIN)/python -m config.devservices exec --

.PHONY: help install run dev test check lint typecheck pytest migrate makemigrations-check \
        worker beat web services-up services-down bench clean demo-reset

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  \033[1m%-22s\033[0m %s\n", $$1, $$2}'

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml uv.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) sync --frozen --inexact
	@touch $@

install: $(VENV)/.installed ## Create .venv and install the locked dependencies

# A shell that forbids bytecode files (PYTHONDONTWRITEBYTECODE) would have the launcher compile
# its imports at every start: it keeps them under var/pycache, as it has its processes do.
LAUNCHER := $(if $(PYTHONDONTWRITEBYTECODE),PYTHONDONTWRITEBYTECODE= \
	PYTHONPYCACHEPREFIX=$${PYTHONPYCACHEPREFIX:-$${PLATFORM_VAR_DIR:-$(CURDIR)/var}/pycache}) \
	$(BIN)/python -m config.launcher

run: install ## Start everything (services, migrate, demo tenant, web + worker + beat)
	$(LAUNCHER)

# DEV_BUNDLE=<file> (a variable or in the environment): that bundle is imported into the
# demo tenant at start and again at each change.
dev: install ## make run that reloads the web and the worker on code changes (DEV_BUNDLE=<file>: and re-imports it)
	$(LAUNCHER) --dev $(if $(DEV_BUNDLE),--bundle "$(DEV_BUNDLE)")

test: install ## Lint, type-check and run the whole test suite
	$(MAKE) --no-print-directory lint typecheck
	$(WITH_SERVICES) $(BIN)/pytest

check: test makemigrations-check ## make test, plus makemigrations --check

lint: install ## ruff (lint + format check) and import-linter contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(OFFLINE_URLS) $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null

# mypy's Django plugin and the schema generator import settings, which need service
# URLs; neither connects, so placeholders do when none are set.
OFFLINE_URLS := DATABASE_URL=$${DATABASE_URL:-postgresql://offline@127.0.0.1/offline} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0}

typecheck: install ## mypy with the Django and DRF plugins
	$(OFFLINE_URLS) $(BIN)/mypy

pytest: install ## Only the tests (pass ARGS=... to pytest)
	$(WITH_SERVICES) $(BIN)/pytest $(ARGS)

migrate: install ## Apply database migrations
	$(WITH_SERVICES) $(BIN)/python manage.py migrate

demo-reset: install ## Restore the demo tenant's agents as make run first seeded them (it keeps edits)
	$(WITH_SERVICES) $(BIN)/python manage.py seed_demo_agents --reset

makemigrations-check: install ## Fail when models and migrations disagree
	$(WITH_SERVICES) $(BIN)/python manage.py makemigrations --check --dry-run

web: install ## Run only the ASGI server (services must be up: make services-up)
	$(BIN)/python -m uvicorn config.asgi:application --host $${HOST:-127.0.0.1} --port $${PORT:-8000} --lifespan off

worker: install ## Run only a Celery worker (threads pool)
	$(BIN)/celery -A config worker --pool threads --loglevel INFO

beat: install ## Run only celery beat
	$(BIN)/celery -A config beat --loglevel INFO --schedule var/celerybeat-schedule

services-up: install ## Start (or reuse) the embedded PostgreSQL and Valkey
	$(BIN)/python -m config.devservices up

services-down: install ## Stop the embedded PostgreSQL and Valkey
	$(BIN)/python -m config.devservices down

# `make bench NAME ...` runs only the named benchmarks: the words after `bench` are its
# arguments, not targets. `make bench peers` (opt-in) compares with Aegra, `peers-quick` tiny.
ifeq (bench,$(firstword $(MAKECMDGOALS)))
BENCH_NAMES := $(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS))
$(eval $(BENCH_NAMES):;@:)
endif

bench: install ## Run the benchmarks (DEBUG off, as in production) and record the results; `make bench peers`: against Aegra
	DEBUG=false $(WITH_SERVICES) $(BIN)/python -m bench $(BENCH_NAMES)

clean: ## Remove the virtualenv and caches (var/ data is kept)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
