# Every target sets up what it needs: a fresh clone runs `make run` or `make test` directly.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs into one venv: what serving needs (`make run`), and that plus the dev tools (`make test`).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev
# `make run PORT=9097` serves elsewhere (the host stays the config's, 127.0.0.1 for the example)
PORT ?= 9096

.PHONY: setup run test lint typecheck bench-core bench bench-scale bench-kube bench-peers clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(RUN_STAMP) $(STAMP)

setup: $(STAMP)

## run: install only what serving needs, check the bundled example cluster, then serve the extender on
##      it (standalone, 127.0.0.1:$(PORT)); in another terminal: .venv/bin/topogang replay --keep
##      (drives it like kube-scheduler; see the README's "Try it")
run: $(RUN_STAMP)
	$(BIN)/topogang validate config/examples/example-cluster.yaml
	$(BIN)/topogang serve --config config/examples/example-cluster.yaml --port $(PORT)

## test: install the dev tools, then lint, type-check and run the whole test suite: on every core
##       (pytest-xdist, a module per worker at a time; `make test PYTEST_WORKERS=0` runs it in one
##       process), then tests/e2e in one process (they share one control plane; skipped unless
##       TOPOGANG_E2E=1). Both always run; either failing fails the target.
PYTEST_WORKERS ?= auto
test: $(STAMP) lint typecheck
	rc=0; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --ignore=tests/e2e || rc=$$?; \
	$(BIN)/pytest tests/e2e || rc=$$?; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

## bench-core: in-process gang decisions per second vs a naive first-fit
bench-core: $(STAMP)
	$(BIN)/python -m loadtest.bench_core

## bench: the extender vs a no-op extender on the same stack under locust (1,000 nodes, 30% full,
##        1 and 16 users, each server pinned to one core and locust to the other), goals PASS/FAIL,
##        then a 100/1,000/5,000-node scaling table; ~6 min; JSON and CSVs in results/bench/;
##        `make bench TLS=1` adds the extender's verbs over mutual TLS vs plain HTTP (1-user p99 <= 1.2x)
bench: $(STAMP)
	$(BIN)/python -m loadtest.bench $(if $(TLS),--tls)

## bench-scale: a generated 12,500-node x 8-GPU cluster (100,000 GPUs, racks, NVLink/PCIe levels, 12 VCs):
##              RSS after start, at 30% and 80% fill; start to ready; a restart with 80,000 GPUs in bound
##              pods (the soak's in-memory API server); core decisions/s vs 1,000 nodes; filter, prioritize
##              and bind p99 at 1 user vs the no-op; goals PASS/FAIL; ~9 min; JSON in results/bench-scale/
bench-scale: $(STAMP)
	$(BIN)/python -m loadtest.bench_scale

## bench-kube: the real kube-scheduler (e2e control plane, 1,000 KWOK nodes x 8 GPUs) with topogang, and
##             the same jobs through a stock profile without it: pods/s, gang all-bound p50/p99, the
##             scheduler's own metrics, partial gangs; goals PASS/FAIL; ~5 min; JSON in results/bench-kube/
bench-kube: $(STAMP)
	bash scripts/e2e/build-bins.sh etcd kube-apiserver kube-scheduler kwok
	$(BIN)/python -m loadtest.bench_kube

## bench-peers: topogang, the real Kueue (built into ~/.cache/topogang-e2e too) and the stock kube-scheduler,
##              one after another on fresh e2e control planes of the simulator's cluster (80 KWOK nodes x 8
##              GPUs), replaying a warm-started 12 h Philly slice at 120x; the simulator's metrics and goals,
##              its policies on the same slice beside them; ~35 min; table and JSON in results/bench-peers/
bench-peers: $(STAMP)
	bash scripts/e2e/build-bins.sh etcd kube-apiserver kube-scheduler kwok kueue
	$(BIN)/python -m loadtest.bench_peers --simulate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

## e2e: real control plane (etcd, kube-apiserver, kube-scheduler, KWOK, FrameworkController) built from Go
##      modules into ~/.cache/topogang-e2e (first build ~20-40 min on 2 cores, then seconds), then the e2e tests
.PHONY: e2e
e2e: $(STAMP)
	bash scripts/e2e/build-bins.sh etcd kube-apiserver kube-scheduler kwok helm frameworkcontroller frameworkbarrier
	TOPOGANG_E2E=1 $(BIN)/pytest tests/e2e

## manifests: render deploy/*.yaml from the Helm chart deploy/helm/topogang, the one source of both (helm
##            built from Go modules by scripts/e2e/build-bins.sh, cached in ~/.cache/topogang-e2e)
.PHONY: manifests
manifests: $(RUN_STAMP)
	bash scripts/e2e/build-bins.sh helm
	$(BIN)/python scripts/manifests.py

## soak: the Kubernetes mode against an in-memory API server with randomized faults and restarts,
##       longer than the suite's (SOAK_OPS operations for each of SOAK_SEEDS; SOAK_HOSTILE=1 adds tenants
##       pushing past their entitlements, SOAK_CELLS=1 the admin editing the cells); prints the figures
SOAK_OPS ?= 20000
SOAK_SEEDS ?= 1 2 3
.PHONY: soak
soak: $(STAMP)
	$(BIN)/python -m tests.soak.driver --ops $(SOAK_OPS) $(foreach s,$(SOAK_SEEDS),--seed $(s)) $(if $(SOAK_HOSTILE),--hostile) $(if $(SOAK_CELLS),--cells)

## fuzz: hostile requests across every route of a fresh standalone extender (FUZZ_REQUESTS of them, from
##       FUZZ_SEED); prints violations by kind, the server's RSS before and after, and whether the
##       placed gangs and the ledger stayed unchanged; fails on any violation or RSS growth over 50 MB
FUZZ_REQUESTS ?= 10000
FUZZ_SEED ?= 1
.PHONY: fuzz
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --requests $(FUZZ_REQUESTS) --seed $(FUZZ_SEED)
