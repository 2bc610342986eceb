# gpuops.hygiene: the two commands of the README are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
COLLECTIONS := $(CURDIR)/tests/output/collections
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export PATH := $(abspath $(VENV))/bin:$(PATH)
PYTEST := $(PY) -m pytest -c tests/pytest.ini

.PHONY: help demo test prereqs-demo prereqs-test venv tools build sanity lint changelog units system integration adversary-ci adversary molecule ecosystem matrix benchmark role-spec clean

help:
	@echo "make demo   start a simulated GPU fleet, reset it with the collection, show the result, clean up"
	@echo "make test   everything CI runs: sanity, lint, changelog, unit, system, integration, adversary, molecule and ecosystem tests"
	@echo "make adversary  many more hostile worlds than CI draws (ADVERSARY_EXAMPLES, default 300)"
	@echo "make matrix sanity and a playbook smoke on every ansible-core that requires_ansible claims (CI runs it)"

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	test -x $(PY) || "$$(tests/tools/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

# Ecosystem tools (galaxy-importer, antsibull-docs, ansible-builder, ansible-runner) in a venv of their own.
TOOLS := tests/output/tools
tools: $(TOOLS)/.installed

$(TOOLS)/.installed: requirements-tools.txt
	test -x $(TOOLS)/bin/python || "$$(tests/tools/find-python)" -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-tools.txt
	touch $@

build: venv
	rm -rf dist $(COLLECTIONS)/ansible_collections/gpuops/hygiene
	ansible-galaxy collection build --force --output-path dist .
	ansible-galaxy collection install --no-deps --force -p $(COLLECTIONS) dist/gpuops-hygiene-*.tar.gz

sanity: venv
	tests/tools/sanity

# mypy reads the checkout as the package ansible_collections.gpuops.hygiene through a link under tests/output.
MYPY_TREE := tests/output/mypy/ansible_collections/gpuops

lint: build
	$(PY) -m ruff check plugins
	mkdir -p $(MYPY_TREE) && ln -sfn ../../../../.. $(MYPY_TREE)/hygiene
	$(PY) -m mypy -p ansible_collections.gpuops.hygiene.plugins
	ansible-lint
	$(PY) tests/tools/lint_examples.py $(abspath $(VENV))/bin/ansible-lint

changelog: venv
	antsibull-changelog lint

# Pure: no root, no process but the tests' own, no /dev/nvidia*, no ansible-playbook (tests/unit/conftest.py guards it).
units: build
	$(PYTEST) tests/unit

# The modules on a whole machine (every process in a scan, mounts, chosen PIDs) and the simulator's own tests: root.
# They run in a PID and mount namespace of their own, whose processes are all the suite's: a scan must not meet the
# machine's own PID 1 (which may be unreadable even to root) nor another run's processes. sh, its PID 1, reaps orphans.
system: build
	unshare --pid --fork --mount-proc --kill-child sh -c '"$$@"; exit $$?' system $(PYTEST) tests/system tests/simulator/tests

integration: build tools
	$(PYTEST) tests/integration tests/benchmarks/test_smoke.py tests/benchmarks/test_names.py tests/benchmarks/test_costmodel.py

# The adversary (tests/adversary): hostile worlds built for real, the modules run against them, invariants checked.
# CI draws a fixed, derandomized set of worlds (ADVERSARY_EXAMPLES, 30 by default; a few minutes) and the tests of
# the invariants and of the kept regressions.
adversary-ci: build
	$(PYTEST) tests/adversary

# New worlds every run, bigger floods, shrinking; failing examples kept in tests/output/adversary-db and tried first
# next time (ADVERSARY_EXAMPLES, 300 by default: about half an hour here).
adversary: build
	ADVERSARY_PROFILE=deep $(PYTEST) tests/adversary/test_worlds.py --hypothesis-show-statistics

molecule: build
	tests/tools/molecule

# What Galaxy, Automation Hub and AWX check: the import of the built tarball, the docs, the execution environment.
ecosystem: build tools
	tests/tools/ecosystem

# Every claimed ansible-core but the main venv's 2.21 (which `make test` covers) in its own venv (requirements-matrix.txt);
# about 3-4 minutes a release here.
matrix: build
	tests/tools/matrix

# The role's variables gpu_reset_<option> from gpu_host_reset's documentation (roles/gpu_reset/meta/argument_specs.yml
# and defaults/main.yml); a unit test fails when they are not what this writes.
role-spec: build
	$(PY) tests/tools/role_spec.py

# Every missing system program named at once, with its Debian package, before anything is built or tested.
prereqs-demo prereqs-test: prereqs-%:
	tests/tools/prereqs $*

test: prereqs-test
	$(MAKE) sanity lint changelog units system integration adversary-ci molecule ecosystem

demo: prereqs-demo
	$(MAKE) build
	tests/tools/demo

# Not part of `make test`: a benchmark, not a test (docs/BENCHMARKS.md; about 20 minutes on 2 cores).
benchmark: build
	$(PY) tests/benchmarks/run.py --hosts 1,8,32,64 --reps 3 --doc

clean:
	rm -rf dist tests/output .cache
