# ML Systems, Measured. The two commands of the README:
#   make serve   set up, build and serve the site with the committed measurements
#   make test    what CI runs: set up, regenerate stale CPU records, tests, check, strict build
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN := $(shell grep -m1 '^torch==' requirements.txt)
DEVICE ?= cpu
DEMO ?=

# Caches stay inside the project's ignored .cache folder.
export TORCHINDUCTOR_CACHE_DIR := $(CURDIR)/.cache/inductor
export TRITON_CACHE_DIR := $(CURDIR)/.cache/triton
export MPLCONFIGDIR := $(CURDIR)/.cache/matplotlib
export JUPYTER_CONFIG_DIR := $(CURDIR)/.cache/jupyter
export XDG_CACHE_HOME := $(CURDIR)/.cache/xdg
export NO_MKDOCS_2_WARNING := 1
export PYTHONUNBUFFERED := 1

.PHONY: help setup browser serve build test test-fast pytest regen regen-stale check clean exercise gpu-wheels gpu-plan

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"   # first, alone: the CPU wheel, never a CUDA build
	$(PY) -m pip install -q -r requirements.txt
	touch $@

setup: $(VENV)/.installed  ## create .venv with every pinned dependency (torch first)

browser:  ## install Debian's chromium for the browser tests, unless CHROMIUM names a browser (never a Playwright download)
	@[ -x "$${CHROMIUM:-/usr/bin/chromium}" ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium; fi; }

serve: setup  ## build and serve the site at http://127.0.0.1:8000 (committed measurements)
	$(PY) -m mkdocs serve -a 127.0.0.1:8000

build: setup  ## build the site into site/ (strict: any warning fails)
	$(PY) -m mkdocs build --strict

test: setup  ## everything CI runs: regenerate stale CPU records, tests, check, strict build
	$(PY) -m scripts.regen --stale --device cpu
	$(PY) -m pytest
	$(PY) -m scripts.check
	$(PY) -m mkdocs build --strict

pytest: setup  ## only the test suite
	$(PY) -m pytest

test-fast: setup  ## the inner loop: the tests not marked slow (no demo runs, no site build); CI runs them all
	$(PY) -m pytest -m "not slow"

regen: setup  ## regenerate records: make regen [DEMO=name] [DEVICE=cpu|cuda|auto]
	$(PY) -m scripts.regen $(DEMO) --device $(DEVICE)

regen-stale: setup  ## regenerate only missing or stale records on DEVICE
	$(PY) -m scripts.regen --stale --device $(DEVICE)

gpu-wheels: setup  ## fetch the wheels a lent GPU machine lacks (jsonschema and its dependencies) into .cache/wheels
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .cache/wheels $$($(PY) -m pip freeze | grep -E '^(jsonschema|jsonschema-specifications|referencing|rpds-py|attrs|typing_extensions)==')

gpu-plan:  ## the GPU campaign's plan, no GPU needed: make gpu-plan [BUDGET=9] [CALLS=2]
	@$(if $(wildcard $(PY)),$(PY),python3) -m scripts.gpu_campaign --plan --budget-min $(or $(BUDGET),9) --calls $(or $(CALLS),2)

check:  ## the fast gate: freshness, claims, plausibility, page structure (runs no demo)
	@$(if $(wildcard $(PY)),$(PY),python3) -m scripts.check

exercise: setup  ## grade a coding exercise: make exercise NAME=layer_norm [SOLUTION=path] [SEED=n] (no NAME: the list)
	$(PY) -m exercises $(NAME) $(if $(SOLUTION),--solution $(SOLUTION)) $(if $(SEED),--seed $(SEED)) --device $(if $(filter command line environment,$(origin DEVICE)),$(DEVICE),auto)

clean:  ## remove build output and caches (keeps .venv)
	rm -rf site .cache .pytest_cache artifacts
