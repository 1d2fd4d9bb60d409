# The two set-up commands: `make serve` and `make test`. Each creates .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# setuptools' notice on every editable install ("be careful with folders ...") says nothing
# to someone who typed `make serve`.
PIP := PYTHONWARNINGS=ignore $(BIN)/python -m pip

# A bare `make`: what there is to make.
help:
	@echo "make serve   run an exec-server on ws://127.0.0.1:8765 (LISTEN=ws://127.0.0.1:PORT to choose)"
	@echo "make test    the whole suite: lint, types, the core's checks and the live tests"
	@echo "other targets: lint typecheck coverage live fuzz-long fuzz-live bench compare clean"

.PHONY: help serve test packages checks live live-1 live-2 reference lint typecheck coverage fuzz-long fuzz-live bench compare clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Reinstall when the project metadata changes; the package itself is editable. Serving needs
# only the package's own dependencies; the tests add their tools and trio.
$(VENV)/.serving: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[dev,trio]'
	touch $(VENV)/.serving $@

# Loopback only; set LISTEN=ws://127.0.0.1:PORT to choose the port.
LISTEN ?= ws://127.0.0.1:8765
serve: $(VENV)/.serving
	$(BIN)/execproto serve --listen $(LISTEN)

# The core's checks (CPU-bound) and the live suite (mostly waiting on processes, sockets and
# timeouts, so split in two halves by tests/shard.py) run side by side on the two cores; each
# one's output is shown whole when it ends.
test: $(VENV)/.installed reference packages
	$(MAKE) --no-print-directory -j3 --output-sync=target checks live-1 live-2

# The system's parts the sandbox and its tests use, installed when they can be (.ci/packages).
packages:
	@.ci/packages

checks: lint typecheck coverage

LIVE := tests --ignore=tests/core fuzz
live: $(VENV)/.installed
	$(BIN)/python -m pytest $(LIVE)

live-1 live-2: live-%: $(VENV)/.installed
	$(BIN)/python -m pytest -p tests.shard --shard $*/2 $(LIVE)

# The reference codex, which some tests compare with or drive (tests/reference.py finds it).
# Without npm, or when the install fails, those tests are skipped: the build goes on.
REFERENCE_DIR := $(HOME)/.cache/execproto/codex-0.171.0
reference:
	@if ls $(REFERENCE_DIR)/node_modules/@openai/codex-linux-x64/vendor/*/bin/codex >/dev/null 2>&1; then :; \
	elif ! command -v npm >/dev/null 2>&1; then \
		echo "npm not found: codex 0.171.0 not installed, the tests that need it will be skipped"; \
	elif mkdir -p $(REFERENCE_DIR) 2>/dev/null && npm install --prefix $(REFERENCE_DIR) --no-save --no-audit --no-fund \
			@openai/codex@0.171.0 >$(REFERENCE_DIR)/npm.log 2>&1; then \
		echo "installed codex 0.171.0 in $(REFERENCE_DIR)"; \
	else echo "npm install @openai/codex@0.171.0 failed (see $(REFERENCE_DIR)/npm.log): the tests that need it will be skipped"; fi

lint: $(VENV)/.installed
	$(BIN)/ruff check .

typecheck: $(VENV)/.installed
	$(BIN)/python -m mypy src/execproto
	$(BIN)/python -m mypy src/adapters

# The core suite runs under coverage; the floor is part of the core's contract.
coverage: $(VENV)/.installed
	$(BIN)/python -m coverage run -m pytest tests/core
	$(BIN)/python -m coverage report --fail-under=95

fuzz-long: $(VENV)/.installed
	EXECPROTO_FUZZ_RANDOM=1 EXECPROTO_FUZZ_EXAMPLES=1000000 $(BIN)/python -m pytest fuzz -q -p no:cacheprovider

# Random frames at a live server over a real websocket (processes run inside bubblewrap).
fuzz-live: $(VENV)/.installed
	EXECPROTO_FUZZ_RANDOM=1 EXECPROTO_LIVE_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest fuzz/fuzz_live.py -q -p no:cacheprovider

bench: $(VENV)/.installed
	$(BIN)/python bench/core.py

# execproto beside the reference exec-server and OpenSSH, where those are installed.
compare: $(VENV)/.installed
	$(BIN)/python bench/compare.py

clean:
	rm -rf $(VENV) .coverage .mypy_cache .pytest_cache .hypothesis
