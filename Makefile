# Every target sets up what it needs: a fresh clone runs `make run` or `make test` directly.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint typecheck bench-core clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## run: check the bundled example cluster and place a scripted job mix on it
run: $(STAMP)
	$(BIN)/topogang validate config/examples/example-cluster.yaml
	$(BIN)/topogang demo

## test: lint, type-check and run the whole test suite
test: $(STAMP) lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## bench-core: in-process gang decisions per second vs a naive first-fit
bench-core: $(STAMP)
	$(BIN)/python -m loadtest.bench_core

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
