# The two set-up commands are `make run` and `make test`; both install what
# is missing (scripts/install-deps.sh, Debian packages only) and build first.
# `make bench` builds the benchmarks in their own Release tree and runs them.

BUILD_DIR  ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc)
LISTEN     ?= 127.0.0.1:8787
DATA_DIR   ?= ./kvgov-data
BENCH_DIR  ?= build-bench
# Benchmarks left out of `make bench`: the 10 M-block recovery and memory
# cases take minutes and gigabytes, so they run only on purpose.
BENCH_FILTER ?= -TenMillion
# CI builds treat warnings as errors.
WERROR     := $(if $(CI),ON,OFF)

.PHONY: all deps configure build test bench run serve clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DKVGOV_WERROR=$(WERROR) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

bench: deps
	@cmake -S . -B $(BENCH_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DKVGOV_BUILD_BENCHMARKS=ON -DKVGOV_BUILD_TESTS=OFF -DKVGOV_WERROR=$(WERROR) \
	  > $(BENCH_DIR).configure.log 2>&1 \
	  || { cat $(BENCH_DIR).configure.log; exit 1; }
	@cmake --build $(BENCH_DIR) -j $(JOBS)
	@bash scripts/run-benchmarks.sh $(BENCH_DIR) '$(BENCH_FILTER)'

# The demo: kvgov on $(LISTEN) with a simulated vLLM fleet attached, an agent
# workload routed through it, then kvgov keeps serving until Ctrl-C.
run: build
	$(BUILD_DIR)/apps/kvgov/kvgov demo --listen $(LISTEN) --data-dir $(DATA_DIR)

# kvgov alone, following the engines you give it (ENGINES="--engine ...").
serve: build
	$(BUILD_DIR)/apps/kvgov/kvgov serve --listen $(LISTEN) --data-dir $(DATA_DIR) $(ENGINES)

clean:
	rm -rf $(BUILD_DIR) $(BUILD_DIR).configure.log
