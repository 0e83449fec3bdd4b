# Muster's two commands: `make demo` and `make test`. Everything else is a step of those.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Pinned Kubernetes binaries are built once into this cache (see hack/build-k8s.sh).
export MUSTER_K8S_CACHE ?= $(HOME)/.cache/muster/k8s
# Which Kubernetes the control plane runs: a minor release pinned in hack/k8s/versions
# (`make e2e K8S_VERSION=1.35`) or an exact one; unset, the newest pinned.
ifdef K8S_VERSION
export MUSTER_K8S_VERSION := $(K8S_VERSION)
endif

.PHONY: venv lint unit e2e test test-matrix test-peers peers soak demo bench bench-e2e bench-peers k8s helm manifests image clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

lint: venv
	$(VENV)/bin/ruff check base extender quota localcluster tests bench hack
	$(VENV)/bin/ruff format --check base extender quota localcluster tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) hack/module_size.py

unit: venv
	$(PY) -m pytest tests/unit

k8s:
	hack/build-k8s.sh

# The pinned helm (hack/helm/go.mod), built once into ~/.cache/muster/helm.
helm:
	hack/build-helm.sh >/dev/null

# manifests/ rendered from charts/muster (edit the chart, then run this).
manifests: venv helm
	$(PY) hack/render_manifests.py

e2e: venv k8s
	$(PY) -m pytest -n 2 --dist loadgroup tests/e2e

# The e2e tier on every Kubernetes minor release pinned (each built once), with a
# summary line per release: passed or failed, and how long it took.
test-matrix: venv helm
	hack/test-matrix.sh $(PY)

# The peers Muster is measured against (issue 25), built from their Go modules.
peers:
	hack/build-peers.sh scheduler-plugins
	hack/build-peers.sh kueue
	nice -n 10 hack/build-peers.sh koordinator

# Each peer on the local control plane, shown to work (not in `make test`): scheduler-plugins'
# scheduler, Kueue's controller manager beside kube-scheduler, and Koordinator's koord-scheduler;
# then the cases where Muster decides otherwise, on scheduler-plugins and on Muster.
test-peers: venv peers
	MUSTER_K8S_VERSION=1.35 hack/build-k8s.sh
	$(PY) -m pytest -m peers tests/e2e/test_peers.py tests/e2e/test_peer_agreement.py

# The whole suite: lint, unit tests and the e2e tier against real binaries, on three
# pytest-xdist workers: each half of the e2e tier on its own control plane, the soak slice
# on a third, the unit tests wherever a worker is free.
test: venv lint k8s helm
	$(PY) -m pytest -n 3 --dist loadgroup tests

demo: venv k8s
	$(PY) hack/demo.py

# The randomized soak with injected faults (issue #14, item 7): SOAK_SECONDS (600) of a
# seeded job stream; SOAK_SEED replays one (a random one otherwise, printed).
# `make test` runs a 180 s slice of it (tests/soak/test_soak.py).
SOAK_SECONDS ?= 600
soak: venv k8s
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_SEED=$(SOAK_SEED) $(PY) -m tests.soak

# Every benchmark (about ten minutes); the end-to-end one needs the control-plane
# binaries and Go (it builds bench/noop-extender).
bench: venv k8s
	$(PY) -m bench

bench-e2e: venv k8s
	$(PY) -m bench.e2e

# The head-to-head (issue 25): one seeded GPU trace replayed on each system, each on its own
# control plane (about 7 minutes a system); the table in Markdown, the figures in JSON.
SEED ?= 1
PEER_SYSTEMS ?= kube-scheduler,muster,scheduler-plugins,kueue,koordinator
bench-peers: venv peers
	MUSTER_K8S_VERSION=1.35 hack/build-k8s.sh
	$(PY) -m bench.peers --systems $(PEER_SYSTEMS) --seed $(SEED) --json peers-seed$(SEED).json --markdown

# The container image (needs Docker or Podman; tests/packaging checks the recipe without).
CONTAINER ?= $(shell command -v docker || command -v podman)
image:
	$(CONTAINER) build -t muster:0.1.0 .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
