# The two set-up commands of the README: `make demo` and `make test`.
# Both create the project's virtual environment on first use.

VENV := .venv
PYTHON ?= python3
export DAGSTER_HOME := $(CURDIR)/.dagster_home

.PHONY: demo test dev

demo: $(VENV)/installed
	@mkdir -p $(DAGSTER_HOME)
	@cp deploy/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/python deploy/demo.py

test: $(VENV)/installed
	$(VENV)/bin/python -m pytest

dev: $(VENV)/installed
	@mkdir -p $(DAGSTER_HOME)
	@cp deploy/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	DAGSTER_BIN=$(VENV)/bin deploy/dev.sh

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	$(VENV)/bin/pip check
	@touch $@
