# Two commands for a fresh machine with only Python 3.10+:
#   make demo   set up .venv, install fastsoftmax, run the demo
#   make test   set up .venv, install fastsoftmax with test tools, run all tests,
#               build the docs and check the wheel (what CI runs)
# and, on their own:
#   make docs        the Sphinx site in docs/_build/html, gallery run afresh
#   make wheel-test  build the sdist and the wheel into dist/, install the wheel
#                    in a throw-away venv and use it from outside the checkout
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
# The wheel test's environment, made early by `make test` (.ci/wheel-env).
WHEEL_ENV := $(VENV)-wheel

.PHONY: demo test pytest docs wheel-test wheel-env bench lint clean

# pip compiles the installed modules' byte-code one file at a time (more
# than half of the install's time on 2 cores); compileall does it on every
# core. Not left to each module's first import: with PYTHONDONTWRITEBYTECODE
# set, as on some CI machines, every test process would compile from source.
# A file that does not compile is skipped, as pip skips it (-qq, rc ignored).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e ".[test,plot,docs,release]"
	-$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fastsoftmax demo

# The test venv and the wheel test's environment of dependencies are
# installed side by side (pip works mostly on one core); then the tests; then
# the docs and the wheel test side by side: each is mostly one process on one
# core (Sphinx; pip and the wheel's first fit), and neither writes what the
# other reads (the sdist leaves the docs' outputs out, MANIFEST.in). Each
# step's output is printed whole when it is done.
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target $(STAMP) wheel-env
	$(MAKE) --no-print-directory pytest
	$(MAKE) --no-print-directory -j2 --output-sync=target docs wheel-test \
		WHEEL_TEST_ENV=$(WHEEL_ENV)

# Two or more worker processes (pytest-xdist, at most 4): on a fresh clone
# most of the run is Numba compiling each kernel signature once for the disk
# cache, and the workers compile different kernels side by side.
pytest: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 4

# Warnings are errors (-W), every cross-reference must resolve (-n), and the
# gallery's examples run every time (their previous output is removed).
docs: $(STAMP)
	rm -rf docs/_build docs/_generated docs/auto_examples docs/api/generated \
		docs/sg_execution_times.rst
	$(BIN)/sphinx-build -W --keep-going -n -b html docs docs/_build/html

# WHEEL_TEST_ENV: an environment of the dependencies only, from wheel-env
# (used up: the wheel test removes it); unset, the wheel test makes its own.
wheel-test: $(STAMP)
	PYTHON=$(BIN)/python WHEEL_ENV=$(WHEEL_TEST_ENV) .ci/wheel-test

wheel-env:
	PYTHON=$(PYTHON) .ci/wheel-env $(WHEEL_ENV)

bench: $(STAMP)
	FASTSOFTMAX_BENCH_FULL=1 $(BIN)/python -m pytest benchmarks --benchmark-enable \
		--benchmark-group-by=group --benchmark-columns=median,iqr,rounds \
		--benchmark-warmup=on --benchmark-sort=name

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check fastsoftmax tests benchmarks examples docs
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(WHEEL_ENV) build dist *.egg-info .pytest_cache .hypothesis .benchmarks \
		docs/_build docs/_generated docs/auto_examples docs/api/generated \
		docs/sg_execution_times.rst
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
