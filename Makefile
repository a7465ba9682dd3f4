# TensorHub: thin wrapper over scripts/install-deps, CMake and CTest.
#   make demo   install what is missing, build, run the demo (tensorhub demo; DEMO_ARGS="--peers 8 --size 1GiB")
#   make test   install what is missing, build, run the tests (plus ASan/UBSan unit tests)
# Also: make build, make bench, make bench-cluster (root), make sim, make test-asan, make fuzz, make clean,
#   make python-install PYTHON=/path/to/venv/bin/python (the Python package into that environment).

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
FUZZ_DIR ?= build-fuzz
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30
PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build test test-fast test-asan demo demo-manifest bench bench-cluster sim fuzz clean python-install

all: build

deps:
	@scripts/install-deps

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DTENSORHUB_WERROR=ON $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test-fast: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

test: test-fast test-asan

$(ASAN_DIR)/build.ninja: | deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTENSORHUB_SANITIZE=ON \
	  -DTENSORHUB_BENCH=OFF -DTENSORHUB_CUDA=OFF -DTENSORHUB_WERROR=ON $(CMAKE_FLAGS)

test-asan: deps $(ASAN_DIR)/build.ninja
	cmake --build $(ASAN_DIR) -j $(JOBS) --target tensorhub_unit_test_programs
	ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) -L unit

demo: build
	$(BUILD_DIR)/src/tensorhub demo $(DEMO_ARGS)

demo-manifest: build
	scripts/demo-manifest $(BUILD_DIR)/src/tensorhub

bench: build
	bench/run-benchmarks $(BUILD_DIR)

# Needs root: network namespaces with shaped links (bench/cluster/).
bench-cluster: build
	bench/cluster/run-standard $(BUILD_DIR)

# The simulator on a small default scenario (SIM_SCENARIO=sim/scenarios/...).
SIM_SCENARIO ?= sim/scenarios/cluster-8.json
sim: build
	$(BUILD_DIR)/sim/tensorhub-sim $(SIM_SCENARIO) --json $(BUILD_DIR)/sim-report.json --csv $(BUILD_DIR)/sim
	@echo "JSON summary: $(BUILD_DIR)/sim-report.json; CSV: $(BUILD_DIR)/sim-completions.csv, $(BUILD_DIR)/sim-timeline.csv"
	sim/plot $(BUILD_DIR)/sim "$$(basename $(SIM_SCENARIO) .json)"

python-install: build
	$(PYTHON) python/install.py --python $(PYTHON) --build-dir $(BUILD_DIR)

fuzz: deps
	tests/fuzz/run $(FUZZ_DIR) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
