# astral-lab — `make` lists the targets. Root-only work happens only inside recipes.
VENV        := .venv
PY          := $(VENV)/bin/python
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup demo test unit bench lint clean distclean

help:
	@echo "astral-lab make targets:"
	@echo "  setup      install apt packages, start Open vSwitch, build $(VENV) (root: sudo make setup)"
	@echo "  demo       setup, then run the demo (.venv/bin/astral-lab demo)"
	@echo "  test       setup, then unit tests and integration tests (root; both must pass)"
	@echo "  unit       unit tests only, no root needed once $(VENV) exists"
	@echo "  bench      setup, then the lab's own benchmarks (python -m benchmarks.run)"
	@echo "  lint       ruff check ."
	@echo "  clean      clean up Mininet leftovers and caches (keeps results/)"
	@echo "  distclean  clean, then remove $(VENV)"
	@echo "Pass pytest options with PYTEST_ARGS, e.g. make unit PYTEST_ARGS='-k shuffle -x'"

setup:
	bash scripts/setup.sh

demo: setup
	$(VENV)/bin/astral-lab demo

# Integration tests drive real processes; a bound keeps a wedged one from eating CI's hour.
test: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)
	timeout --foreground --kill-after=30 2400 $(PY) -m pytest -m integration $(PYTEST_ARGS)

# No setup dependency: setup needs root, unit tests do not. Bootstrap only if root and no venv.
unit:
	@if [ ! -x $(PY) ]; then \
	    if [ "$$(id -u)" -eq 0 ]; then bash scripts/setup.sh; \
	    else echo "make unit: $(VENV) missing; run 'sudo make setup' once first" >&2; exit 1; fi; \
	fi
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

bench: setup
	$(PY) -m benchmarks.run

lint:
	@[ -x $(VENV)/bin/ruff ] || { echo "make lint: $(VENV)/bin/ruff missing; run 'sudo make setup' first" >&2; exit 1; }
	$(VENV)/bin/ruff check .

clean:
	@if [ -x $(VENV)/bin/astral-lab ]; then \
	    echo "$(VENV)/bin/astral-lab clean"; $(VENV)/bin/astral-lab clean; \
	elif ! command -v mn >/dev/null 2>&1; then \
	    echo "make clean: mn not installed; skipping Mininet cleanup"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
	    echo "make clean: not root; skipping 'mn -c' (run: sudo make clean)"; \
	else \
	    echo "mn -c"; mn -c; \
	fi
	find . \( -path ./.git -o -path ./$(VENV) -o -path ./results \) -prune -o \
	    -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache

distclean: clean
	rm -rf $(VENV) *.egg-info
