# Two commands for a fresh machine with only Python 3.10+:
#   make demo   set up .venv, install fastsoftmax, run the demo
#   make test   set up .venv, install fastsoftmax with test tools, run all tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fastsoftmax demo

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	FASTSOFTMAX_BENCH_FULL=1 $(BIN)/python -m pytest benchmarks --benchmark-enable \
		--benchmark-group-by=group --benchmark-columns=median,iqr,rounds \
		--benchmark-warmup=on --benchmark-sort=name

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff mypy
	$(BIN)/ruff check fastsoftmax tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .benchmarks
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
