# The two commands of the README: `make up` and `make test`. Both set up what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: up demo brain test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip check
	rm -f $(VENV)/.installed-*
	touch $@

up: $(STAMP)
	$(BIN)/cnbrain up

demo: $(STAMP)
	$(BIN)/cnbrain map show --map china
	$(BIN)/cnbrain place --map china --request examples/requests/gpu-training.json --explain

brain: $(STAMP)
	$(BIN)/cnbrain brain regional

lint: $(STAMP)
	$(BIN)/ruff check services tests
	$(BIN)/ruff format --check services tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	npx --yes @bufbuild/buf@1.75.0 lint

test: lint
	bash scripts/services.sh
	bash scripts/slurm.sh start
	bash scripts/tools.sh
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/cnbrain bench placement
	$(BIN)/cnbrain bench placement --map synthetic:provinces=10,sites_per_province=20,seed=1 --requests 500 --policy topn-cpsat,greedy
	$(BIN)/cnbrain bench map

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
