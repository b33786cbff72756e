# Every target sets up .venv itself, so each works on a fresh machine.
PYTHON ?= python3
# quiet the docs toolchain's notices about its own future, printed on every build
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true
VENV   := .venv
BIN    := $(VENV)/bin
HASH   := $(shell cat pyproject.toml | sha256sum | cut -c1-12)
DEMO   := $(VENV)/.demo-$(HASH)
DEV    := $(VENV)/.dev-$(HASH)

.PHONY: demo test check lint typecheck imports unit fast docs docs-screenshots bench proto clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# what the demo needs: the package and matplotlib
$(DEMO): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[demo]'
	rm -f $(VENV)/.demo-* && touch $@

# tests, benchmarks, stubs: the development tools too (a superset of the demo's)
$(DEV): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.dev-* $(VENV)/.demo-* && touch $@ $(DEMO)

## make demo: the two-party demo (both services on loopback, one release, training; writes demo-output/);
## it prints both parties' web consoles, and with KEEP_RUNNING=1 leaves the services up until Ctrl-C
demo: $(DEMO)
	$(BIN)/labeldp demo $(if $(KEEP_RUNNING),--keep-running)

## make test: ruff, mypy, the import contracts and the whole pytest suite (every tier: the strict docs build and the
## executable examples too, tests/project/test_docs.py); prints the slowest tests
test: lint typecheck imports unit

## make check: the inner loop — the same lint, types and contracts, and the tests that start no Docker,
## Dask cluster, separate service process, PostgreSQL or browser, and are not marked slow, spread over
## every core (pytest-xdist), the lint, types and contracts beside them (each one's output in one piece;
## timed in BENCHMARKS.md, "The test suite": about 10 minutes on 2 cores; make test about 31)
check: $(DEV)
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck imports fast

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV)
	$(BIN)/mypy

imports: $(DEV)
	$(BIN)/lint-imports

# every tier spread over a worker per core (pytest-xdist; work stealing: an idle worker takes tests
# queued for a busy one). Each worker starts its own throwaway PostgreSQL cluster, a database per test.
# Two workers per core measured 33 min against 41 (busier machine) but loaded 2 cores to 9 and timed out
# a 5 s request: not the default. TEST_WORKERS=0 runs one test at a time.
TEST_WORKERS ?= auto
unit: $(DEV)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=20

fast: $(DEV)
	$(BIN)/python -m pytest -q -n auto --dist worksteal --durations=10 \
		-m "not (docker or cluster or processes or postgresql or slow or browser)"

## make docs-screenshots: the consoles' browser tests (headless Chromium), then the pictures docs/console.md
## shows copied from their run into docs/console/ (64-colour palettes: small enough to commit)
docs-screenshots: $(DEV)
	$(BIN)/python -m pytest -q -m browser tests/e2e/test_console_browser.py
	$(BIN)/python -m tests.support.docs_screenshots

## make docs: the documentation site from docs/ (mkdocs.yml), built strict — a broken link, anchor or reference
## fails — into site/ (git-ignored), offline
docs: $(DEV)
	$(BIN)/mkdocs build --strict

## make bench: every benchmark; results land in benchmarks/results/ and are summarized in BENCHMARKS.md
bench: $(DEV)
	PYTHON=$(BIN)/python $(BIN)/python -m benchmarks.run_all

## make proto: regenerate the gRPC stubs in labeldp/v1 (their import path) from proto/labeldp/v1/*.proto (committed)
proto: $(DEV)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/labeldp/v1/*.proto

clean:
	rm -rf $(VENV) demo-output site benchmarks/results .mypy_cache .ruff_cache .pytest_cache
