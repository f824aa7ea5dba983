# Two entry points: `make demo` (the main job) and `make test` (the suite). Both create .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pip's build backend warns about editable installs on every install, and pip about index locations
# of this machine's configuration: nothing a user can act on (errors still print)
PIP := PYTHONWARNINGS=ignore $(PY) -m pip install -qq --disable-pip-version-check
BASE_STAMP := $(VENV)/.base-stamp
STAMP := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp

.PHONY: demo test lint bench clean toolchains

# the package alone (numpy, xdsl, lark): what the demo and a user's model need
$(BASE_STAMP): pyproject.toml
	@echo "setting up $(VENV) (the package: numpy, xdsl, lark, flatbuffers)"
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) --upgrade pip
	@$(PIP) -e .
	@touch $(BASE_STAMP)

# the test extra: pytest, filecheck, torch (for numeric checks), onnx/onnxruntime, Ray Serve
$(STAMP): $(BASE_STAMP)
	$(PIP) -e ".[test]"
	touch $(STAMP)

# Cross toolchain and emulator for the ARM targets; installed with apt-get when missing. Where
# apt-get cannot run, the ARM tests skip and say why, except under CI=true, where that is an error
# (tests/test_ci_toolchain.py fails too, should the tools vanish after this step).
toolchains:
	@if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then \
		echo "installing gcc-aarch64-linux-gnu and qemu-user"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			gcc-aarch64-linux-gnu qemu-user >/dev/null ) || { echo "warning: could not install the ARM toolchain"; \
			[ "$$CI" != true ] || { echo "error: CI=true needs aarch64-linux-gnu-gcc and qemu-aarch64"; exit 1; }; }; \
	fi

# ONNX Runtime for the demo's comparison; without a network the demo still runs and says so
$(BENCH_STAMP): $(BASE_STAMP)
	@echo "installing ONNX Runtime for the comparison"
	@$(PIP) -e ".[bench]" || echo "warning: could not install onnxruntime/onnx"
	@touch $(BENCH_STAMP)

# the demo compiles for this machine only: no ARM toolchain, no torch
demo: $(BENCH_STAMP)
	@$(PY) -m compiler.driver.demo

# -rs: every skip prints its reason (machine-dependent: AVX-512 ids, the ARM toolchain).
# -n auto: one pytest worker per core (most of the time is gcc on generated code); --dist loadfile
# keeps a file's tests in one worker, so module-scoped builds are made once and the Ray Serve tests
# share one local cluster. The build cache is safe to share (each build is written to a temporary
# folder and renamed into place). Most of the time is gcc: the runtime is compiled once per flag set
# (backends/c/build.py) and whole-model correctness builds run at -O1 (tests/conftest.py; the
# kernel-level files keep -O3; `XMGE_OPT_LEVEL=-O3 make test` builds everything as shipped).
test: $(STAMP) toolchains
	$(PY) -m pytest -q -rs -n auto --dist loadfile

bench: $(BENCH_STAMP)
	@$(PIP) -e ".[bench,openvino]" || echo "warning: could not install openvino: its columns are skipped"
	$(PY) bench/bench_x86.py

lint: $(STAMP)
	$(VENV)/bin/ruff check compiler dialects semantics passes backends tests bench

clean:
	rm -rf $(VENV) build *.egg-info
