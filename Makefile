# stoker — the two commands a new user needs are `make demo` and `make test`.
JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=
export CCACHE_DIR ?= $(HOME)/.cache/ccache
# Share cache hits between checkouts and build folders.
export CCACHE_BASEDIR ?= $(CURDIR)
export CCACHE_NOHASHDIR ?= 1

.PHONY: all deps build test test-unit test-asan test-stress fuzz bench bench-scoreboard demo clean format format-check lint cuda-check soak fuzz-long image

all: build

deps:
	bash scripts/install-deps.sh

# The container image (docs/deploy.md): the full two-stage build of deploy/Containerfile with podman,
# on a Debian 12 base image made here from Debian packages when podman's storage lacks it.
IMAGE ?= localhost/stoker:latest
image:
	deploy/build-image.sh --tag $(IMAGE)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Everything CI runs: dependencies, build, every test suite (unit, integration against the Swift S3
# server, fuzz smoke runs), the sanitizer build's unit tests, the CUDA build; then the slowest tests
# and how long each phase took (the budget: 30 minutes on a 2-core machine).
test: deps format-check build
	@date +%s > $(BUILD)/.test-start
	bash scripts/ctest-timed.sh $(BUILD) --output-on-failure -j $(JOBS) --timeout 600
	@date +%s > $(BUILD)/.test-ctest-end
	$(MAKE) fuzz
	@date +%s > $(BUILD)/.test-fuzz-end
	$(MAKE) test-asan
	@date +%s > $(BUILD)/.test-asan-end
	$(MAKE) cuda-check
	@bash scripts/ctest-timed.sh --slowest $(BUILD) 15
	@t() { cat $(BUILD)/.test-$$1; }; echo "make test phases: ctest $$(( $$(t ctest-end) - $$(t start) )) s," \
	  "fuzz $$(( $$(t fuzz-end) - $$(t ctest-end) )) s, asan $$(( $$(t asan-end) - $$(t fuzz-end) )) s," \
	  "cuda $$(( $$(date +%s) - $$(t asan-end) )) s"

# The process-level service tests (CTest label `service`) STRESS_RUNS (5) times in a row under a fixed
# background load (STRESS_LOAD busy processes, 2), stopping at the first failure: what a change to the
# service must pass before it lands (docs/testing.md).
STRESS_RUNS ?= 5
STRESS_LOAD ?= 2
test-stress: build
	bash scripts/test-stress.sh $(BUILD) $(STRESS_RUNS) $(STRESS_LOAD)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE '.'

test-asan:
	cmake -S . -B build-asan -G Ninja -DSTOKER_SANITIZE=ON $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	# Unit tests only (-LE '.': not the labelled tests that start servers, mounts or processes;
	# those run in the normal build above).
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) --timeout 900 -LE '.'

# The CUDA build (-DSTOKER_CUDA=ON, docs/gpu.md) where nvcc exists: builds every target (the device
# check bench/gpu included, so that it always compiles; ccache makes the objects shared with the plain
# build hits) and runs the CUDA tests, which skip, saying why, without a GPU.
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc /usr/local/cuda/bin/nvcc) $(shell command -v nvcc))
cuda-check:
	@if [ -z "$(NVCC)" ]; then echo "cuda-check: skipped (no nvcc: set CUDA_HOME or install the CUDA toolkit)"; exit 0; fi; \
	set -e; \
	cmake -S . -B build-cuda -G Ninja -DSTOKER_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC) $(CMAKE_FLAGS) >/dev/null; \
	cmake --build build-cuda -j $(JOBS); \
	./build-cuda/src/stoker/gpu/cuda_test

# libFuzzer targets, built with clang, each run briefly over its seed corpus.
fuzz:
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSTOKER_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	bash scripts/run-fuzzers.sh build-fuzz

# The fuzz campaign (not part of `make test`): every target up to 10 M executions or 30 min
# (FUZZ_RUNS, FUZZ_LONG_SECONDS), new coverage merged into tests/fuzz/corpus, figures in
# bench/results/fuzz.md.
fuzz-long:
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DSTOKER_FUZZ=ON $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	bash scripts/fuzz-long.sh build-fuzz

# The all-in-one demo: a small JPEG dataset, converted to shards, served by an in-process dispatcher
# and 2 workers, consumed with a progress bar.
demo: deps build
	./$(BUILD)/stoker demo

bench: deps build
	/usr/bin/python3 bench/run.py --build $(BUILD)

# Every P-figure of issue 25 beside its strongest peer, idle and under `stress-ng --cpu 1`, into
# bench/results/scoreboard.md (SCOREBOARD_FLAGS=--quick: P1 only, for development).
bench-scoreboard: build
	/usr/bin/python3 bench/scoreboard.py --build $(BUILD) $(SCOREBOARD_FLAGS)

# The fault soak (tests/soak/soak.py) for SOAK_MINUTES (20): workers killed, the dispatcher
# restarted and S3 faults injected under shared and coordinated jobs; results in
# bench/results/soak.md. `make test` runs a 2-minute version (CTest soak_short).
SOAK_MINUTES ?= 20
soak: deps build
	/usr/bin/python3 tests/soak/soak.py --stoker $(BUILD)/stoker --fault-proxy $(BUILD)/stoker-fault-proxy \
	  --make-test-images $(BUILD)/make_test_images --python-dir $(BUILD)/python --source-dir $(CURDIR) \
	  --minutes $(SOAK_MINUTES) --report bench/results/soak.md --out $(BUILD)/soak_out

clean:
	rm -rf build build-asan build-fuzz build-cuda

# Every C++ file the project owns (tracked or new, not ignored); `make format` rewrites them in place,
# `make format-check` (the first step of `make test`) fails naming each file that does not match .clang-format.
CXX_FILES = git ls-files --cached --others --exclude-standard -z -- '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh'

format:
	$(CXX_FILES) | xargs -0 -r clang-format -i

format-check:
	$(CXX_FILES) | xargs -0 -r clang-format --dry-run -Werror

# clang-tidy with the checks in .clang-tidy (the ones the code passes today) over every C++ file the
# build compiles, generated code left out. Not part of `make test` (it takes ~15 CPU-minutes).
lint: build
	run-clang-tidy -quiet -p $(BUILD) -j $(JOBS) '^$(CURDIR)/(src|bench|tests|python/src|examples)/'

