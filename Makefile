# The two set-up commands (README): `make demo` and `make test`. Both create the environment if
# missing and are quick when it is already installed.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
QUESTION ?= $(shell head -n1 examples/questions.txt)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-unit check lint lock bench clean

# install.sh also installs the Debian packages and tests/js's npm packages the tests use (see there).
$(STAMP): pyproject.toml constraints.txt scripts/install.sh tests/js/package-lock.json
	PY=$(PY) VENV=$(VENV) bash scripts/install.sh
	touch $(STAMP)

install: $(STAMP)

# Refresh constraints.txt (the lock) from pyproject.toml; UPGRADE=1 moves to the newest releases.
lock:
	PY=$(PY) VENV=$(VENV) UPGRADE=$(UPGRADE) bash scripts/lock.sh
	touch $(STAMP)

NEXT ?= $(shell sed -n 3p examples/questions.txt)

# The tree `demo` lives in the user's home for trees (adrap trees), so it answers from anywhere.
demo: $(STAMP)
	$(BIN)/adrap build examples/sample --tree demo
	$(BIN)/adrap query "$(QUESTION)" --tree demo --max-tokens 600
	@echo
	@echo "Next, from any directory:"
	@echo '  $(abspath $(BIN))/adrap query "$(NEXT)" --tree demo'

# Most of the suite waits on daemons, servers and browsers, so it runs on more workers than cores
# (pytest-xdist); TEST_WORKERS=0 runs it in this process. Each worker (and each adrap process it
# starts) runs its math libraries on one thread: more workers than cores already fill them, and
# a second OpenMP/BLAS thread per worker only waits its turn (4 workers embedding at once on 2
# cores: 18 % slower with the libraries' own threads).
TEST_WORKERS ?= 4
TEST_THREADS ?= OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(TEST_THREADS) $(BIN)/python -m pytest -m "not slow" -q -n $(TEST_WORKERS) --dist worksteal

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/build.py
	$(BIN)/python bench/query.py
	$(BIN)/python bench/quality.py

clean:
	rm -rf .adrap .pytest_cache .mypy_cache .ruff_cache
