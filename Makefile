# Two entry points for a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make demo PORT=8001 MQTT_URL=mqtt://broker:1883`: the API's port and the MQTT broker (default:
# GREENTWIN_MQTT_URL, else mqtt://127.0.0.1:1883, with an embedded broker when nothing listens there).
PORT ?= 8000
MQTT_URL ?=

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt tools/install_deps.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, its CPU build where one can be had (a wheel at hand, else PyTorch's CPU index,
	# else PyPI's build, said in one line), so no multi-GB CUDA build is pulled in by accident;
	# then the project with its dev extras, every package pinned by constraints.txt.
	$(BIN)/python tools/install_deps.py --extras dev
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/greentwin demo --port $(PORT)$(if $(MQTT_URL), --mqtt-url $(MQTT_URL))

test: $(STAMP)
	$(BIN)/python -m pytest -q

# ruff on everything; mypy on the floors the rest stands on (pyproject's [tool.mypy] files).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/twin_throughput.py

clean:
	rm -rf $(VENV)
