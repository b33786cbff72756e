# Every target sets up .venv itself, so each works on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: demo test lint typecheck unit bench proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

## make demo: the two-party demo (both services on loopback, one release, training; writes demo-output/)
demo: $(STAMP)
	$(BIN)/labeldp demo

## make test: ruff, mypy and the whole pytest suite
test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q

## make bench: every benchmark; results land in benchmarks/results/ and are summarized in BENCHMARKS.md
bench: $(STAMP)
	PYTHON=$(BIN)/python $(BIN)/python -m benchmarks.run_all

## make proto: regenerate the gRPC stubs in labeldp/v1 (their import path) from proto/labeldp/v1/*.proto (committed)
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/labeldp/v1/*.proto

clean:
	rm -rf $(VENV) demo-output benchmarks/results .mypy_cache .ruff_cache .pytest_cache
