# The two set-up commands: `make serve` and `make test`. Each creates .venv when it is missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test typecheck coverage fuzz-long bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall when the project metadata changes; the package itself is editable.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,trio]'
	touch $@

# The server command arrives with the asyncio adapter; until then say so plainly.
serve: $(VENV)/.installed
	@if [ -f src/adapters/__main__.py ]; then \
		$(BIN)/python -m execproto.adapters serve --listen ws://127.0.0.1:8765; \
	else \
		echo "execproto serve is not built yet: only the protocol core exists so far" >&2; exit 1; \
	fi

test: $(VENV)/.installed typecheck coverage
	$(BIN)/python -m pytest tests --ignore=tests/core fuzz

typecheck: $(VENV)/.installed
	$(BIN)/python -m mypy src/execproto

# The core suite runs under coverage; the floor is part of the core's contract.
coverage: $(VENV)/.installed
	$(BIN)/python -m coverage run -m pytest tests/core
	$(BIN)/python -m coverage report --fail-under=95

fuzz-long: $(VENV)/.installed
	EXECPROTO_FUZZ_EXAMPLES=1000000 $(BIN)/python -m pytest fuzz -q -p no:cacheprovider

bench: $(VENV)/.installed
	$(BIN)/python bench/core.py

clean:
	rm -rf $(VENV) .coverage .mypy_cache .pytest_cache .hypothesis
