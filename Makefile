# The two set-up commands of the README: `make demo` and `make test`.
# Both create the project's virtual environment on first use.

VENV := .venv
PYTHON ?= python3
# Test workers: three per two CPU cores, since many tests wait on servers and daemons they
# started (one per core left the 2-CPU VM 18 % idle: 871 s; three used 95 %: 798 s);
# `make test TEST_WORKERS=0` runs the tests in this process
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print((os.cpu_count() * 3 + 1) // 2)")
export DAGSTER_HOME := $(CURDIR)/.dagster_home

.PHONY: demo test dev

demo: $(VENV)/installed
	@mkdir -p $(DAGSTER_HOME)
	@cp deploy/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/python deploy/demo.py

# The tests start hundreds of Python processes: each reuses the project's compiled modules
# (a PYTHONDONTWRITEBYTECODE in the environment would have every one compile them again).
test: export PYTHONDONTWRITEBYTECODE :=
test: $(VENV)/installed
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --durations=15

dev: $(VENV)/installed
	@mkdir -p $(DAGSTER_HOME)
	@cp deploy/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	DAGSTER_BIN=$(VENV)/bin deploy/dev.sh

# uv installs the project's packages (downloads in parallel, no bytecode compiled ahead:
# each module is compiled by its first import): on this project's 2-CPU VM, about a
# quarter of pip's wall time for the same packages (benchmarks/README.md, "set-up").
UV := $(VENV)/bin/uv
$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet uv==0.13.9
	$(UV) pip install --quiet --python $(VENV)/bin/python -e '.[dev]'
	$(UV) pip check --quiet --python $(VENV)/bin/python
	@touch $@
