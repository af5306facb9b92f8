# build-kernel: every target sets up its own .venv first (torch, CMake 3.28, ninja, ...).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The torch the build environment links against; 2.14.1 is the CUDA 13.0 build.
TORCH  ?= torch==2.14.1
RECIPE ?= nightly-cu130
ARCH   ?=
TARGET ?=
PYTEST_ARGS ?=
# pytest-xdist workers (tests/xdist_groups.py says which tests share one).
PYTEST_WORKERS ?= 2

# ARCH as any arch-list spelling (12.0a,9.0a  "9.0a;12.0a"  "9.0a 12.0a", TORCH_CUDA_ARCH_LIST's), made one
# comma-separated word and quoted: a raw `;` ends the shell command and a space starts a new argument.
comma := ,
empty :=
space := $(empty) $(empty)
ARCH_LIST := $(subst $(space),$(comma),$(strip $(subst ;, ,$(subst $(comma), ,$(ARCH)))))
ARCH_FLAG := $(if $(ARCH_LIST),--arch '$(ARCH_LIST)',)

.PHONY: help venv lint test test-fast demo wheel verify publish plan doctor bench bench-scheduler bench-build bench-regenerate mutate clean distclean

help:
	@echo "make demo      whole pipeline, offline, on the bundled miniature kernel project"
	@echo "make test      the test suite (real git, CMake, nvcc, scikit-build-core, pypiserver)"
	@echo "make wheel RECIPE=nightly-cu130 ARCH=12.0a   build (and verify) a wheel into wheels/"
	@echo "make publish RECIPE=... TARGET=name|url      upload the recipe's wheel to an index"
	@echo "make bench     side-by-side benchmarks (bench/): build policies under a memory cap, then the miniature builds"
	@echo "make bench-regenerate  every bench/ results file and picture remade from its raw output, compared byte for byte"
	@echo "make mutate    mutation testing (mutmut) of the safety logic vs the fast tests -> bench/code_health/results/mutation.json"

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile '$(TORCH)' 'cmake==3.28.*' -e '.[build,verify,publish,test]'
	touch $@

venv: $(VENV)/.installed

test: venv lint
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check build_kernel tests bench
	$(BIN)/mypy build_kernel

test-fast: venv
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not slow and not network" $(PYTEST_ARGS)

demo: venv
	$(BIN)/build-kernel $(ARCH_FLAG) --recipe demo

wheel: venv
	$(BIN)/build-kernel $(ARCH_FLAG) build --recipe $(RECIPE)
	$(BIN)/build-kernel $(ARCH_FLAG) verify --recipe $(RECIPE)

publish: venv
	$(BIN)/build-kernel $(ARCH_FLAG) publish --recipe $(RECIPE) $(if $(TARGET),--to $(TARGET),)

plan: venv
	$(BIN)/build-kernel $(ARCH_FLAG) plan --recipe $(RECIPE)

doctor: venv
	$(BIN)/build-kernel $(ARCH_FLAG) doctor --recipe $(RECIPE)

# The scheduler bench first (policies under a real memory cgroup: needs root; a few minutes), then the
# miniature builds of bench/miniature/side_by_side.py. `make bench-scheduler` / `make bench-build` run one of them.
bench: bench-scheduler bench-build

bench-scheduler: venv
	$(BIN)/python bench/scheduler/policies_under_cap.py

bench-build: venv
	$(BIN)/python bench/miniature/side_by_side.py

# bench/'s studies (bench/README.md): each results file and picture remade from its raw output by its script and
# compared byte for byte; the pictures need the `bench` extra (pip install -e '.[bench]').
bench-regenerate: venv
	$(BIN)/python bench/regenerate.py

# Not part of `make test`: about an hour on 2 cores. MUTATE_ARGS=--extended: more functions;
# MUTATE_ARGS=--survivors: re-test only the mutants not killed last time (kept in mutants/).
MUTATE_ARGS ?=
mutate: venv
	$(BIN)/python -m pip install --quiet -e '.[mutate]'
	$(BIN)/python bench/code_health/mutation.py run $(MUTATE_ARGS)
	$(BIN)/python bench/code_health/mutation.py report --label latest $(MUTATE_ARGS)

# What the targets made: wheels and the records beside them (WHEEL.verify*.json, WHEEL.tests.json), the
# output folder's simple/ pages, the demo's published index, setuptools' build/ and dist/. Not .venv
# (minutes to remake: `make distclean`), nor the build cache (BUILD_KERNEL_CACHE_DIR, ~/.cache/build-kernel).
clean:
	rm -rf wheels/*.whl wheels/*.whl.*.json wheels/simple wheels/published build dist

distclean: clean
	rm -rf $(VENV) *.egg-info
