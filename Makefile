# Two commands do everything on a fresh machine:  make run  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
EXAMPLE_TEXT := examples/conversation.txt

.PHONY: install run test lint bench-ptb bench-timing clean

install: $(STAMP)

# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The main job on the bundled default model: describe it, then perplexity and scores of example text.
run: install
	$(BIN)/afp info
	$(BIN)/afp ppl --text $(EXAMPLE_TEXT)
	$(BIN)/afp score --text $(EXAMPLE_TEXT)

test: install
	$(BIN)/python -m pytest -q

# Benchmarks (long; run by hand, never by CI). Results go to bench/results/.
bench-ptb: install
	$(BIN)/python -m bench.paper_ptb

bench-timing: install
	$(BIN)/python -m bench.epoch_timing

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info
