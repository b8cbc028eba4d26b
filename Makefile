# The two commands of the README: `make demo` and `make test` (both set up .venv first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch 2.13.0 is pinned for the install only: on the reference machines pip takes its CPU wheel
# from disk, where an unpinned torch could pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0
PYTEST := $(BIN)/python -m pytest

.PHONY: setup demo demo-model test test-slow bench clean help

help:
	@echo "make setup      create .venv and install interp with its test tools"
	@echo "make demo       run the main job on the embedded default (prints the run folder last)"
	@echo "make demo-model retrain the shipped demo model (interp/demo_model/) from the embedded default"
	@echo "make test       the default test suite"
	@echo "make test-slow  the slow tests (longer training runs)"
	@echo "make bench      the benchmarks (ratios measured side by side)"

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

test: setup
	$(PYTEST) -q

test-slow: setup
	$(PYTEST) -q -m slow -o addopts="--jaxtyping-packages=interp,beartype.beartype"

bench: setup
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/mn_estimators.py
	$(BIN)/python bench/regulariser_step.py
	$(BIN)/python bench/generation.py

clean:
	rm -rf $(VENV) runs .pytest_cache
