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

.PHONY: help demo test venv build sanity lint changelog units integration molecule benchmark clean

help:
	@echo "make demo   start a simulated GPU fleet, reset it with the collection, show the result, clean up"
	@echo "make test   everything CI runs: sanity, lint, changelog, unit, integration and molecule tests"

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	test -x $(PY) || "$$(tests/tools/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

build: venv
	rm -rf dist $(COLLECTIONS)/ansible_collections/gpuops/hygiene
	ansible-galaxy collection build --force --output-path dist .
	ansible-galaxy collection install --no-deps --force -p $(COLLECTIONS) dist/gpuops-hygiene-*.tar.gz

sanity: venv
	tests/tools/sanity

lint: build
	ansible-lint

changelog: venv
	antsibull-changelog lint

units: build
	$(PYTEST) tests/unit tests/simulator/tests

integration: build
	$(PYTEST) tests/integration tests/benchmarks/test_smoke.py

molecule: build
	tests/tools/molecule

test: sanity lint changelog units integration molecule

demo: build
	tests/tools/demo

# Not part of `make test`: a benchmark, not a test (docs/BENCHMARKS.md; about 45 minutes on 2 cores).
benchmark: build
	$(PY) tests/benchmarks/run.py --hosts 1,8,32,64 --reps 3 --doc

clean:
	rm -rf dist tests/output .cache
