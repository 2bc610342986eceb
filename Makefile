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

.PHONY: help demo test venv tools build sanity lint changelog units integration molecule ecosystem matrix benchmark clean

help:
	@echo "make demo   start a simulated GPU fleet, reset it with the collection, show the result, clean up"
	@echo "make test   everything CI runs: sanity, lint, changelog, unit, integration, molecule and ecosystem tests"
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

lint: build
	ansible-lint
	$(PY) tests/tools/lint_examples.py $(abspath $(VENV))/bin/ansible-lint

changelog: venv
	antsibull-changelog lint

units: build
	$(PYTEST) tests/unit tests/simulator/tests

integration: build tools
	$(PYTEST) tests/integration tests/benchmarks/test_smoke.py

molecule: build
	tests/tools/molecule

# What Galaxy, Automation Hub and AWX check: the import of the built tarball, the docs, the execution environment.
ecosystem: build tools
	tests/tools/ecosystem

# Every claimed ansible-core but the main venv's 2.21 (which `make test` covers) in its own venv (requirements-matrix.txt);
# about 3-4 minutes a release here.
matrix: build
	tests/tools/matrix

test: sanity lint changelog units integration molecule ecosystem

demo: build
	tests/tools/demo

# Not part of `make test`: a benchmark, not a test (docs/BENCHMARKS.md; about 45 minutes on 2 cores).
benchmark: build
	$(PY) tests/benchmarks/run.py --hosts 1,8,32,64 --reps 3 --doc

clean:
	rm -rf dist tests/output .cache
