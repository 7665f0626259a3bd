# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU wheel of torch first, so that no multi-GB CUDA build is pulled in. constraints.txt pins
	# every package to the versions the tests last passed with (regenerate: see README).
	$(BIN)/pip install -q -c constraints.txt "torch==2.13.0"
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/greentwin demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/twin_throughput.py

clean:
	rm -rf $(VENV)
