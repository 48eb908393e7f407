# Developer entry points. Everything Python runs from .venv (created by `make venv`); the local control
# plane (etcd, kube-apiserver, kube-controller-manager) is built from source into .cache/cluster/bin.

SHELL       := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed

BACKEND ?= kai  # make demo BACKEND=upstream: kube-scheduler + kwok nodes, upstream Workload API

.PHONY: help venv cluster operators test unit lint demo bench bench-full clean distclean image helm manifests tools ui-screenshots

help:
	@echo "make venv     - create $(VENV) and install the package with the test and dev extras"
	@echo "make cluster  - build etcd, kube-apiserver, kube-controller-manager from source (cached)"
	@echo "make image    - build the OCI image with podman (installs podman/runc/mmdebstrap when missing)"
	@echo "make tools    - install Prometheus (server + promtool) and Chromium from Debian packages when missing (root)"
	@echo "make helm     - build helm from its Go module into .cache/cluster/bin (cached)"
	@echo "make operators - build the workload operators the tests and the demo run (JobSet, KubeRay, LWS, Kubeflow training-operator, Kubeflow Trainer) from their Go modules (cached)"
	@echo "make manifests - render deploy/rbac.yaml and deploy/manifests/ from deploy/chart"
	@echo "make test     - venv + cluster, then pytest"
	@echo "make unit     - every test that needs no cluster, no image and no long fuzz run (helm is built on first use; docs/development.md)"
	@echo "make lint     - ruff + mypy"
	@echo "make demo     - run the demo against a local cluster (BACKEND=upstream: real kube-scheduler + kwok nodes)"
	@echo "make bench    - quick benchmarks: benchmarks/bench_*.py --quick + the cluster benchmark's quick profile"
	@echo "make bench-full - every benchmark in full + the cluster benchmark's full profile"
	@echo "make ui-screenshots - the web view's browser test; copies its README screenshots into docs/images/"
	@echo "make clean    - remove caches of the Python tools; distclean also removes $(VENV) and .cache"

venv: $(VENV_STAMP)

# reinstalled only when pyproject.toml changes
$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	@touch $@

# stdlib only, so it needs no venv; prints progress and skips binaries that are up to date
cluster:
	$(PYTHON) devtools/cluster/build.py

# every test: the image first (installs podman/runc/mmdebstrap when missing; tests/deploy runs the image) and the
# tools (Prometheus, Chromium for the metrics and browser tests),
# then the suite, then the long fuzz run (10,000 examples per core fuzz test, 10,000 10-step sequences of the planning property: a few minutes)
test: venv cluster operators image tools
	$(VENV)/bin/pytest -q
	$(VENV)/bin/pytest -q -m fuzz_long tests/fuzz

# every test that starts no control plane (tests/conftest.py marks those `cluster` from the fixtures they use),
# builds no image and is not the long fuzz run (tests/deploy renders the chart with helm, built on first use)
unit: venv
	$(VENV)/bin/pytest -q -m "not cluster and not image and not fuzz_long"

lint: venv
	$(VENV)/bin/ruff check grouper devtools tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: venv cluster operators
	$(PY) -m devtools.demo --backend $(BACKEND)

# quick: every benchmarks/bench_*.py (in its --quick mode where it has one; those results go to
# benchmarks/results/quick/, not committed), then the cluster benchmark's quick profile (< 15 min on 2 cores)
bench: venv cluster
	@mkdir -p benchmarks/results/quick
	@shopt -s nullglob; for f in benchmarks/bench_*.py; do \
	  name=$$(basename "$$f" .py); name=$${name#bench_}; \
	  if grep -q -- '"--quick"' "$$f"; then echo "== $$f --quick"; \
	    $(PY) "$$f" --quick --out "benchmarks/results/quick/$$name.json"; \
	  else echo "== $$f"; $(PY) "$$f"; fi; \
	done
	@echo "== benchmarks/cluster_bench.py --profile quick"
	$(PY) benchmarks/cluster_bench.py --profile quick

# every benchmark in full, then every cluster scenario (30,000-pod bursts, the restart over 100,000 pods;
# prints its estimated duration first)
bench-full: venv cluster
	@shopt -s nullglob; for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) "$$f"; done
	$(PY) benchmarks/cluster_bench.py --profile full

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .cache

# schema-driven fuzzing (schemathesis) of the HTTP API over an in-memory state; fails on any 5xx or any
# answer that does not match the OpenAPI schema. FUZZ_MAX_EXAMPLES = generated requests per operation.
.PHONY: fuzz-api
fuzz-api: venv
	FUZZ_MAX_EXAMPLES=$${FUZZ_MAX_EXAMPLES:-500} $(VENV)/bin/pytest -q -p no:cacheprovider tests/api/test_api_fuzz.py

# The OCI image, with podman (Debian packages, installed when missing; needs root). IMAGE_BASE: `local` = a
# base made here from Debian packages with mmdebstrap (cached in .cache/image/), `public` = the Dockerfile's
# default public slim Python image, or any image reference.
IMAGE_TAG  ?= localhost/kai-pod-grouper:dev
IMAGE_BASE ?= local
image:
	$(PYTHON) -m devtools.image --tag $(IMAGE_TAG) --base $(IMAGE_BASE)

# Prometheus (server, promtool) and Chromium (driven by Playwright) from Debian's packages, installed with
# apt-get when missing (needs root, like `make image`); stdlib only, so it needs no venv
tools:
	$(PYTHON) -m devtools.tools

# the real workload operators (devtools/cluster/go/<name>/go.mod), like the control plane; not part of
# `make cluster` so the control plane stays as fast to build
operators:
	$(PYTHON) devtools/cluster/build.py --only jobset kuberay lws kubeflow trainer

# helm, from its Go module (devtools/helm/go.mod), like the control plane
helm:
	$(PYTHON) devtools/cluster/build.py --only helm

# deploy/rbac.yaml and deploy/manifests/ are the chart rendered with its default values
manifests: venv helm
	$(PY) -m devtools.chart

# the README's screenshots of the web view come from its browser test (tests/ui/test_ui_browser.py)
ui-screenshots: venv cluster tools
	GROUPER_UI_SCREENSHOTS=1 $(VENV)/bin/pytest -q tests/ui/test_ui_browser.py
