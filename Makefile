# Two commands do everything on a fresh machine:  make run  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
EXAMPLE_TEXT := examples/conversation.txt

.PHONY: install run demo test bench-cores bench-report docs clean

HOST ?= 127.0.0.1
PORT ?= 8000

install: $(STAMP)

# torch is pinned and installed first, by pip (which reads this machine's pip settings, where a CPU
# wheel may come from a local index): an unpinned torch pulls a multi-GB CUDA build. The project and
# its extras then go in by uv, Astral's drop-in for pip (an installer only: nothing imports it). It
# resolves and installs their 90 packages in about 4 s where pip takes about 23 s, most of it
# resolving; the versions are pip's, and the torch already there is kept. uv reads the system's
# certificate store (--system-certs): a TLS proxy whose CA the system trusts works. Where uv cannot be
# had, or fails, pip does it.
#
# Nothing is byte-compiled at install time (pip would compile all 12,700 files, one at a time: 72 s
# on 2 cores; compileall on both cores 21 s): Python compiles the modules a run imports, once, as
# it imports them (about 1,600 files for the core, torch and numpy), and keeps them, because every
# recipe here may write bytecode even where the environment says PYTHONDONTWRITEBYTECODE (without
# it each new process would compile torch again).
unexport PYTHONDONTWRITEBYTECODE

# The project, editable, with the extra $(1): by uv, else (no uv, or it failed) by pip.
install_extra = $(BIN)/uv pip install --quiet --system-certs --python $(BIN)/python -e '.[$(1)]' \
	|| $(BIN)/pip install --quiet --no-compile -e '.[$(1)]'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "afp-rescore needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) -V 2>&1). Run: make PYTHON=python3.11 ..." >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile $(TORCH)
	-$(BIN)/pip install --quiet uv
	$(call install_extra,test)
	touch $(STAMP)

# The main job: the rescoring server on the bundled default model (Ctrl-C stops it).
run: install
	@echo "Starting afp-rescore on http://$(HOST):$(PORT) (docs: http://$(HOST):$(PORT)/docs). Then, in another shell:"
	@echo "  curl -s -H 'Content-Type: text/plain' --data-binary @examples/lattice.txt 'http://$(HOST):$(PORT)/v1/rescore?nbest=2'"
	@echo "  curl -s -H 'Content-Type: application/json' -d '{\"sentences\": [\"YEAH I THINK SO\"]}' http://$(HOST):$(PORT)/v1/perplexity"
	$(BIN)/afp serve --host $(HOST) --port $(PORT)

# The same model from the command line: describe it, score example text, rescore example lattices.
demo: install
	$(BIN)/afp info
	$(BIN)/afp ppl --text $(EXAMPLE_TEXT)
	$(BIN)/afp score --text $(EXAMPLE_TEXT)
	$(BIN)/afp rescore --nbest 2 examples/lattice.txt

# The suite on TEST_JOBS pytest-xdist workers (default 2: the CI machine's cores); TEST_JOBS=0 runs it in one process.
# --assert=plain: each worker collects every test module, and rewriting their 3,400 asserts took
# 6 of its 14 s of collection; a failure still names its test and assert line, and plain `pytest`
# (or TEST_ASSERT=rewrite) shows the values.
TEST_JOBS ?= 2
TEST_ASSERT ?= plain
test: install
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal --assert=$(TEST_ASSERT)

# Build docker/Dockerfile.cpu with docker or podman (installed when missing and run as root) and
# exercise the image: health, answers equal to the host's, non-root, read-only models, graceful stop.
# Prints "docker-check: skipped: ..." and succeeds when no container engine can be had.
.PHONY: docker-check
docker-check: install
	$(BIN)/python docker/check.py

# Benchmarks (long; run by hand, never by CI). Results go to bench/results/.
# The cost per link, every core from one command and the server (needs the PocketSphinx sets: docs/benchmarks.md).
bench-cores: install
	$(BIN)/python -m bench.cores --sets runs/pocketsphinx/dev_clean runs/pocketsphinx/dev_other runs/pocketsphinx/dense_other

bench-report: install
	$(BIN)/python -m bench.report

# The documentation site (docs/, mkdocs.yml) into site/, strict: a broken link or reference fails.
# The `docs` extra is installed into .venv the first time (it is not needed to run or test the service).
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -c 'import mkdocs, material, mkdocstrings_handlers.python' 2>/dev/null \
		|| { $(call install_extra,docs); }
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "docs: open site/index.html (or run $(BIN)/mkdocs serve)"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis *.egg-info site
